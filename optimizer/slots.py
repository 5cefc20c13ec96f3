"""Job slots: a stable position for every job in the persistent model.

Jobs arrive and finish every few steps; if the model's columns followed the job list, its shape
would change and HiGHS would start cold each time. Instead each job keeps a slot for its life.
Slots are grouped by class (allowed pools, quota row): every slot of a class has the same matrix
coefficients but one (1/gang in the preemption bound), so a new job takes a free slot of its
class and only bounds, costs and that coefficient change (an empty slot keeps its class's
coefficients and has no work, so it can do nothing). A team enters the matrix only through its
quota row, so the teams without a quota share one class, and a team that comes or goes changes
no slot. In ``ebbtide bench-decisions``' mid case (200 jobs of three teams, one with a quota) that
is 303 slots instead of 328 and 2 rebuilds in 400 decisions instead of 9 (one class per team). The
table is laid out again (and the model rebuilt) only when a class runs out of slots, most slots
stay empty, the teams with a quota change or no job is left. Pure bookkeeping.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np

from optimizer.formulation import quota_rows_of_jobs, quota_team_names
from optimizer.inputs import PlanInputs
from optimizer.nodes import NodeHolds

SlotClass = tuple[bytes, int]
"""(allowed pools as bytes, quota row: formulation.quota_rows_of_jobs, -1 for no quota)."""

SPARE_MIN = 10
SPARE_SQRT_FACTOR = 3.0
"""Spare slots per class at a layout: max(SPARE_MIN, SPARE_SQRT_FACTOR x sqrt(jobs of the class)).
Empty slots cost a warm solve next to nothing; a class running out costs a rebuild and a cold
solve (3-5x a warm one). With 2 x sqrt (at least 4) the seed-scale benchmark rebuilt 7 times in
200 decisions, with 3 x sqrt (at least 6) once; at commit 4334d71 (its eight pools give many
small classes) at least 6 rebuilt 5 times in 200 (a rebuild 10.5-11.6 ms, an update 5-6 ms, so
the rebuilds were its p99: 10.6-13.0 ms) and at least 10 once (p99 6.0-9.3 ms, p50 unchanged
within the host's noise, 4.9-6.6 ms either way; the mid case rebuilt 3 times in 200 either way)."""


def slots_for(jobs: int) -> int:
    """Slots a class of ``jobs`` jobs gets at a layout: the jobs and their spares."""
    return jobs + max(SPARE_MIN, math.ceil(SPARE_SQRT_FACTOR * math.sqrt(jobs)))


def slot_classes(inputs: PlanInputs) -> list[SlotClass]:
    """Each job's class: its row of allowed pools as bytes (cut from one buffer), and its quota row."""
    n_pools = inputs.n_pools
    rows = inputs.job_allowed.tobytes()
    quota_rows = quota_rows_of_jobs(inputs, quota_team_names(inputs)).tolist()
    return [(rows[j * n_pools : (j + 1) * n_pools], row) for j, row in enumerate(quota_rows)]


def team_of_quota_rows(inputs: PlanInputs) -> np.ndarray:
    """[quota rows + 1] a team index for each quota row, the last for no quota: the team an empty
    slot of that class carries (any team with the same row gives the same matrix)."""
    quota_teams = quota_team_names(inputs)
    no_quota = [t for t, q in enumerate(inputs.team_quota.tolist()) if not math.isfinite(q)]
    teams = [inputs.team_names.index(t) for t in quota_teams] + [no_quota[0] if no_quota else 0]
    return np.asarray(teams, dtype=np.int64)


class SlotTable:
    def __init__(self) -> None:
        self.slot_of: dict[str, int] = {}
        self.members: dict[SlotClass, list[int]] = {}
        self.class_of_slot: list[SlotClass] = []
        self.quota_teams: tuple[str, ...] = ()
        self.allowed = np.zeros((0, 0), dtype=bool)  # [slots, P] allowed pools of each slot's class
        self.quota_row = np.zeros(0, dtype=np.int64)  # [slots] quota row of each slot's class

    @property
    def capacity(self) -> int:
        return len(self.class_of_slot)

    def _layout(self, counts: dict[SlotClass, int], n_pools: int) -> None:
        self.members, self.class_of_slot = {}, []
        for cls in sorted(counts):
            size = slots_for(counts[cls])
            start = len(self.class_of_slot)
            self.members[cls] = list(range(start, start + size))
            self.class_of_slot.extend([cls] * size)
        self.slot_of = {}
        self.allowed = np.asarray(
            [np.frombuffer(cls[0], dtype=bool) for cls in self.class_of_slot], dtype=bool
        ).reshape(self.capacity, n_pools)
        self.quota_row = np.asarray([cls[1] for cls in self.class_of_slot], dtype=np.int64)

    def assign(
        self, job_ids: tuple[str, ...], classes: list[SlotClass], quota_teams: tuple[str, ...], n_pools: int
    ) -> np.ndarray:
        """Slot of each job (in the given order); lays the table out again when needed."""
        if quota_teams != self.quota_teams or not job_ids:  # quota rows moved, or nothing to keep
            self.quota_teams = quota_teams
            self._layout({}, n_pools)
        live = dict(zip(job_ids, classes, strict=True))
        slot_of, class_of_slot = self.slot_of, self.class_of_slot
        for job_id in [j for j, slot in slot_of.items() if live.get(j) != class_of_slot[slot]]:
            del slot_of[job_id]
        sparse = self._sparse(classes)
        if len(slot_of) < len(job_ids) or sparse:
            self._place_new(job_ids, classes, n_pools, relayout=sparse)
        return np.asarray([self.slot_of[j] for j in job_ids], dtype=np.int64)

    def _sparse(self, classes: list[SlotClass]) -> bool:
        """Most slots would stay empty: the table is over twice the size a new layout would take.
        (Judged against three slots a job, as it was until SPARE_MIN went from 6 to 10, six jobs
        each of its own class made every table sparse: a new layout every decision.)"""
        return self.capacity > 64 and self.capacity > 2 * sum(map(slots_for, Counter(classes).values()))

    def _place_new(
        self, job_ids: tuple[str, ...], classes: list[SlotClass], n_pools: int, *, relayout: bool
    ) -> None:
        """Give each job without a slot the lowest free one of its class, after a new layout when
        a class has too few slots or ``relayout`` (the table is sparse)."""
        if not relayout:
            new_jobs = [
                (job_id, cls)
                for job_id, cls in zip(job_ids, classes, strict=True)
                if job_id not in self.slot_of
            ]
            wanted = Counter(cls for _, cls in new_jobs)
            taken = set(self.slot_of.values())
            free = {cls: [s for s in self.members.get(cls, ()) if s not in taken] for cls in wanted}
            # the jobs that keep a slot hold distinct slots of their own class, so a class has too
            # few slots for all its jobs exactly when it has fewer free slots than new jobs
            if all(n <= len(free[cls]) for cls, n in wanted.items()):
                for job_id, cls in new_jobs:
                    self.slot_of[job_id] = free[cls].pop(0)
                return
        self._layout(Counter(classes), n_pools)  # every slot free: each job takes the next of its class
        next_free = {cls: iter(slots) for cls, slots in self.members.items()}
        for job_id, cls in zip(job_ids, classes, strict=True):
            self.slot_of[job_id] = next(next_free[cls])


def into_slots(inputs: PlanInputs, table: SlotTable, held_nodes: NodeHolds | None = None) -> PlanInputs:
    """The same inputs with job arrays laid out by slot (and ``held_nodes`` set, when given). An
    empty slot carries its class's gang, allowed pools and quota row (so the matrix stays the same)
    but no work, so it can do nothing."""
    slots = table.assign(inputs.job_ids, slot_classes(inputs), quota_team_names(inputs), inputs.n_pools)
    capacity = table.capacity

    def spread(values: np.ndarray, fill: object) -> np.ndarray:
        """[slots] ``values`` at the jobs' slots, ``fill`` in the empty ones."""
        out = np.full((capacity, *values.shape[1:]), fill, dtype=values.dtype)
        out[slots] = values
        return out

    ids = [""] * capacity
    classes = [""] * capacity
    for j, slot in enumerate(slots.tolist()):
        ids[slot] = inputs.job_ids[j]
        classes[slot] = inputs.job_priority_class[j]
    active = np.zeros(capacity, dtype=bool)
    active[slots] = True
    job_team = team_of_quota_rows(inputs)[table.quota_row]  # quota row -1 (none) takes the last
    job_team[slots] = inputs.job_team
    return replace(
        inputs,
        job_ids=tuple(ids),
        job_gang=spread(inputs.job_gang, 1.0),
        job_weight=spread(inputs.job_weight, 0.0),
        job_remaining_s=spread(inputs.job_remaining_s, 0.0),
        job_left_gpu_s=spread(inputs.job_left_gpu_s, 0.0),
        job_allowed=table.allowed.reshape(capacity, inputs.n_pools),
        job_running_pool=spread(inputs.job_running_pool, -1),
        job_preemptible=spread(inputs.job_preemptible, True),
        job_checkpoint_s=spread(inputs.job_checkpoint_s, 1.0),
        job_lost_gpu_s=spread(inputs.job_lost_gpu_s, 0.0),
        job_restart_s=spread(inputs.job_restart_s, 0.0),
        job_time_limit_s=spread(inputs.job_time_limit_s, 0.0),
        job_ran_s=spread(inputs.job_ran_s, np.inf),
        job_waited_s=spread(inputs.job_waited_s, 0.0),
        job_deadline_step=spread(inputs.job_deadline_step, inputs.horizon_steps + 1),
        job_team=job_team,
        job_priority_class=tuple(classes),
        job_active=active,
        held_nodes=inputs.held_nodes if held_nodes is None else held_nodes,
    )
