"""Work a decision runs alongside HiGHS's solve, on one worker thread.

HiGHS releases the GIL while it solves (a third of a seed-scale decision, most of a large one), so
Python work that needs nothing from the solution (the digest of the plan's inputs, the plan's
step shells, the decisions of jobs that run on where they run: optimizer/plan_build.py
step_shells and allocation_ahead) can run on a second core meanwhile instead of before or after
it. The work is started right before HiGHS runs: started
earlier, the worker would take the GIL back and forth with the planner's own Python work. Results
are the same as running the work inline; only when it happens changes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

_T = TypeVar("_T")

_worker: tuple[int, ThreadPoolExecutor] | None = None


def _executor() -> ThreadPoolExecutor:
    """The process's worker (a forked child makes its own: threads do not survive a fork)."""
    global _worker
    if _worker is None or _worker[0] != os.getpid():
        _worker = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="ebbtide-alongside"))
    return _worker[1]


class Alongside(Generic[_T]):
    """``work()`` to be run alongside a solve: ``start`` hands it to the worker thread,
    ``result`` gives its value (running it here if it was never started) or raises its error."""

    def __init__(self, work: Callable[[], _T]) -> None:
        self._work = work
        self._future: Future[_T] | None = None

    def start(self) -> None:
        if self._future is None:
            self._future = _executor().submit(self._work)

    def result(self) -> _T:
        return self._work() if self._future is None else self._future.result()
