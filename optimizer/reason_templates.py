"""The words of every step-0 reason: one template per decision cause, and ``explain``, the one
place a reason's text is made (part of stage 6 of a decision, used by optimizer/reasons.py, which
decides each cause and its numbers). Pure.
"""

from __future__ import annotations

from typing import NamedTuple

from schemas import DecisionCause

C = DecisionCause
_JOB = "({gpus} GPUs, weight {weight}, class {cls}); {left_h} GPU-h left{deadline}"
_LOSES = "loses {lost_h} GPU-h (since checkpoint plus restart)"
TEMPLATES: dict[DecisionCause, str] = {
    C.KEEPS_RUNNING: "run: keeps running in pool {pool} " + _JOB + "{waits}",
    C.NOT_PREEMPTIBLE: "run: keeps running in pool {pool}, not preemptible " + _JOB,
    C.PREEMPTION_BOUND: "run: keeps running in pool {pool} " + _JOB + "; the plan would stop it "
    "(share {share}) but at most {bound} jobs are preempted per step",
    C.PLANNED_START: "run: starts in pool {pool} " + _JOB + "; plan share now {share}; {pool_note}",
    C.BACKFILL: "run: starts in pool {pool} " + _JOB + "; backfills GPUs the plan leaves idle "
    "(plan share now {share}); {pool_note}",
    C.CLEARED_FOR_JOB: "preempted: node(s) {nodes} of pool {pool} cleared for job {for_job} "
    "({for_gpus} GPUs, weight {for_weight}), above its own weight {weight}; " + _LOSES,
    C.FREED_FOR_JOBS: "preempted: its {gpus} GPUs in pool {pool} go to job {for_job} ({for_gpus} GPUs, "
    "weight {for_weight}){others}, starting now (its own weight {weight}); " + _LOSES,
    C.FREED_FOR_DEADLINE: "preempted: its {gpus} GPUs in pool {pool} go to job {for_job} ({for_gpus} "
    "GPUs, weight {for_weight}){others}, starting now to meet its deadline {for_deadline} (its own "
    "weight {weight}); " + _LOSES,
    C.QUOTA_RECLAIMED: "preempted: quota reclaimed: team {team} runs beyond its quota of {quota} GPUs "
    "on quota lent by idle teams, and job {for_job} ({for_gpus} GPUs, weight {for_weight}) of team "
    "{for_team}{others} takes its GPUs in pool {pool} back, starting now (its {gpus} GPUs, its own weight "
    "{weight}); " + _LOSES,
    C.FREED_FOR_INFERENCE: "preempted: its {gpus} GPUs in pool {pool} go to inference, {service} "
    "grows from {from_replicas} to {to_replicas} replicas there: {service_note}; " + _LOSES,
    C.POOL_SHRINKS: "preempted: {pool_note}; fewer GPUs in service than running work held "
    "(its {gpus} GPUs, weight {weight}); " + _LOSES,
    C.PLAN_STOPS: "preempted: the plan stops it (share {share} of its gang in pool {pool}; its {gpus} "
    "GPUs, weight {weight}); {pool_note}; " + _LOSES,
    C.NO_ALLOWED_POOL: "held: no pool matches the job's allowed pools and GPU types",
    C.NO_WORK_LEFT: "held: no work left by its own estimate",
    C.TEAM_QUOTA: "held: team {team} is at its quota of {quota} GPUs ({used} in use, its gang needs "
    "{gpus}){lent}; {when}",
    C.QUOTA_LENT: "held: team {team} is within its quota of {quota} GPUs ({used} in use, its gang needs "
    "{gpus}), but other teams borrow {lent} GPUs of the quotas; taking them back would stop running "
    "work that loses more than waiting for it to end or checkpoint; {when}",
    C.FRAGMENTATION: "held: fragmentation: {free} GPUs free in pool {pool} but its nodes do not take "
    "a gang of {gpus} (most free on one node: {largest} of {per_node}){held}; {when}",
    C.NODES_HELD_FOR_GANG: "held: the nodes of pool {pool} with room for its gang of {gpus} are held "
    "for job {for_job} ({for_gpus} GPUs, weight {for_weight}) while they drain, and it would not "
    "end before they do (its own weight {weight}){held}; {when}",
    C.NODES_GO_OUT: "held: the nodes of pool {pool} with room for its gang of {gpus} go out for "
    "maintenance {before} (it runs {run_h} h{limit}; node(s) {nodes} go from {at}){held}; {when}",
    C.RESERVED_FOR_SERVICE: "held: pool {pool} is reserved for inference from {start} until {end}, "
    "most for {service_note}; {free} GPUs free now, its gang needs {gpus}{held}; {when}",
    C.GANG_GOES_FIRST: "held: job {for_job} ({for_gpus} GPUs, weight {for_weight}) starts in pool {pool} "
    "in its place: this job and the plan's other new starts would leave {idle} GPUs idle there, too few "
    "for that gang, which keeps more weighted GPUs busy (its own weight {weight}); {when}; {pool_note}",
    C.POOL_FULL: "held: {when}; needs a gang of {gpus} GPUs{held}; {pool_note}",
    C.COVERS_FORECAST: "{replicas} replicas on {gpus} GPUs in pool {pool}: covers {service_note}{sliced}",
    C.SHORT_OF_FORECAST: "{replicas} replicas on {gpus} GPUs in pool {pool}: covers {service_note}"
    "{sliced}; short by {short} GPUs: {pool_note}",
    C.KEPT_WHILE_MOVING: "{replicas} replicas on {gpus} GPUs in pool {pool}: kept this step while "
    "{service}'s {added} new replicas in pool {to} start up (it moves there, and lets these go at the "
    "next decision): covers {service_note}{sliced}",
}


class Reason(NamedTuple):
    cause: DecisionCause
    text: str


def explain(cause: DecisionCause, **numbers: object) -> Reason:
    """The one place a reason's text is made: the cause's template filled with its numbers."""
    return Reason(cause, TEMPLATES[cause].format(**numbers))
