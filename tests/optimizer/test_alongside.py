"""Work run alongside the solve (optimizer/alongside.py): same value as inline, errors reach the
caller, and the planner's plan ids do not depend on whether the digest ran on the worker."""

from __future__ import annotations

import threading

import pytest

from optimizer.alongside import Alongside


def test_started_work_runs_on_the_worker_and_gives_its_value() -> None:
    ran_on: list[str] = []

    def work() -> int:
        ran_on.append(threading.current_thread().name)
        return 42

    job = Alongside(work)
    job.start()
    job.start()  # a second start changes nothing
    assert job.result() == 42
    assert ran_on and ran_on[0].startswith("ebbtide-alongside")
    assert len(ran_on) == 1


def test_work_never_started_runs_inline() -> None:
    ran_on: list[str] = []
    job = Alongside(lambda: ran_on.append(threading.current_thread().name) or "done")
    assert job.result() == "done"
    assert ran_on == [threading.current_thread().name]


def test_an_error_in_the_work_reaches_the_caller() -> None:
    def broken() -> None:
        raise ValueError("bad input")

    job = Alongside(broken)
    job.start()
    with pytest.raises(ValueError, match="bad input"):
        job.result()
