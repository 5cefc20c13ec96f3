"""Decision causes: the code behind every step-0 reason in an Allocation.

The optimizer (optimizer/reasons.py) decides each job's and service's cause from what step 0's
placement saw, and makes the reason's text from the cause and its numbers in one place; the code
travels with the decision (JobDecision.cause, ServiceDecision.cause) so a consumer can act on it
without parsing English. Optional on the wire: records written before it existed carry none.
"""

from __future__ import annotations

from enum import StrEnum


class DecisionCause(StrEnum):
    # run
    KEEPS_RUNNING = "keeps-running"
    NOT_PREEMPTIBLE = "not-preemptible"
    PREEMPTION_BOUND = "preemption-bound"  # the plan wanted it out; the bound per step kept it
    PLANNED_START = "planned-start"
    BACKFILL = "backfill"
    BORROWS_HEADROOM = "borrows-headroom"  # runs on a service's idle burst headroom (optimizer/headroom.py)
    # preempt
    CLEARED_FOR_JOB = "cleared-for-job"  # stopped to empty nodes for a gang of a higher weight
    FREED_FOR_JOBS = "freed-for-jobs"  # its GPUs go to jobs started in its pool
    FREED_FOR_DEADLINE = "freed-for-deadline"  # its GPUs go to a job started now to meet its deadline
    QUOTA_RECLAIMED = "quota-reclaimed"  # its team ran on lent quota; the lending team takes it back
    FREED_FOR_INFERENCE = "freed-for-inference"  # its GPUs go to a service scaling up there
    POOL_SHRINKS = "pool-shrinks"  # the pool has fewer GPUs in service than it holds
    PLAN_STOPS = "plan-stops"  # the plan stops it and nothing in step 0 uses its GPUs
    # hold
    NO_ALLOWED_POOL = "no-allowed-pool"
    NO_WORK_LEFT = "no-work-left"
    TEAM_QUOTA = "team-quota"
    QUOTA_LENT = "quota-lent"  # within its team's quota, lent to borrowers whose stop does not pay yet
    FRAGMENTATION = "fragmentation"  # enough GPUs free in the pool, on no node set that takes the gang
    NODES_HELD_FOR_GANG = "nodes-held-for-gang"  # the nodes that would take it drain for a gang
    NODES_GO_OUT = "nodes-go-out"  # the nodes that would take it go out for maintenance before it ends
    GANG_GOES_FIRST = "gang-goes-first"  # a larger gang takes its GPUs: it would leave GPUs idle
    RESERVED_FOR_SERVICE = "reserved-for-service"  # inference holds the GPUs it would need
    POOL_FULL = "pool-full"
    # services
    COVERS_FORECAST = "covers-forecast"
    SHORT_OF_FORECAST = "short-of-forecast"
    KEPT_WHILE_MOVING = "kept-while-moving"  # old replicas serve until the new ones in another pool start
