"""Step 0 (called from optimizer/step0.py): which of the stops the relaxed plan asks for pay for
themselves. A stop the plan asks for stays a stop only if it pays; the others are kept running
(they still give way where inference or a shrinking pool takes their GPUs: step 0 places kept
jobs only where their pool has room left after the services).

A running job the plan wants out (share below the run threshold) is stopped only when:

- it has run at least ``min_run_s`` since it (re)started (hysteresis: a job one decision starts
  is not stopped by the next, so the plan cannot swap jobs back and forth step after step);
- a job the plan starts in its pool now has a higher weight (value per GPU-hour): a stop never
  makes room for work of equal or lower value density;
- the value those starts gain over waiting for GPUs to free by themselves exceeds what the stop
  costs. The heavier jobs the plan starts in the pool queue for the GPUs that free, and would wait
  W for them (running jobs ending by their estimates, the stopped job among them: one that ends in
  an hour frees its GPUs in an hour; the horizon if they never do). Both jobs' work is done either
  way; the stop moves the heavier work W sooner and the stopped job's work as much later, so,
  valued as the plan values time (work is worth ``earliness`` more at the start of the horizon
  than at its end: ``value_of_sooner``), it gains: their mean weight (by GPUs) less the stopped job's
  x the GPUs of the stopped job they take x W x earliness x W / horizon. Cost: the stopped job's
  weight x (its work since the last checkpoint + its restart + the preemption penalty), plus the
  starters' weight x their start-up on those GPUs.

A stop that pays waits for the job's next checkpoint where that comes before the next decision (its
interval less the wall time its work since the last checkpoint took): stopped then, the job loses
none of its work since the checkpoint. It waits unless the starts lose more by one step's wait (the
value of their W sooner less that of W - a step) than that work is worth at the job's weight, and
never where a deadline is at stake. Node clearing waits the same way for victims that checkpoint
within the step (against the step the gang would wait and the GPUs idling for it meanwhile).

The stops are judged the cheapest first (weight x work since checkpoint): a stop saves no wait
where the GPUs idle now and those of the stops already found to pay cover the starts it would make
room for (``saved_wait_s``), so one start's wait or deadline does not pay for every job the plan
would stop for it; otherwise each is judged against the starts' natural wait.

A start with a deadline in reach (optimizer/deadlines.py's ``deadline_in_reach``) that waiting for
its gang's GPUs to free by themselves would push past its deadline gains more: the plan's price of
its work left late (PlannerConfig.deadline_penalty) on the GPU-hours the wait pushes past it. Such a
start also counts as heavier than any job without that at stake, as the plan ranks it.

Node clearing (stops so a gang the plan starts finds whole nodes; optimizer/node_clearing.py) is
judged by the same value of time and the same costs (``clearing_pays``). Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from optimizer.deadlines import deadline_in_reach, steps_of_work

if TYPE_CHECKING:  # annotations only: optimizer/inputs.py imports optimizer/quota.py, which imports this
    from optimizer.inputs import PlanInputs

EPS = 1e-6


@dataclass(frozen=True)
class StopRules:
    """The settings the rules read (PlannerConfig's): the minimum run, the preemption penalty per
    GPU and the earliness by which the plan values work done sooner."""

    min_run_s: float = 0.0
    penalty_gpu_s: float = 0.0
    earliness: float = 0.75
    deadline_penalty: float = 0.0
    """Price of a GPU-hour left past a deadline, per unit of the largest weight x (1 + earliness)."""


@dataclass(frozen=True)
class StopJudgement:
    """What the rule made of the stops the plan asks for."""

    kept: np.ndarray  # the jobs whose stop does not pay (yet): to be kept running
    awaiting_checkpoint: frozenset[int]  # of them, those whose stop waits for a checkpoint within the step


def judge_stops(
    inputs: PlanInputs, share0: np.ndarray, wants_out: np.ndarray, free0: np.ndarray, rules: StopRules
) -> StopJudgement:
    """The jobs of ``wants_out`` (running, preemptible, the plan's share below the threshold)
    whose stop does not pay (see the module), to be kept running, and of them those whose stop
    waits for a checkpoint within the step (their reasons say so). ``free0`` [P]: GPUs left for
    jobs in step 0 after the services."""
    stopping = np.zeros(inputs.n_jobs, dtype=bool)
    waiting: set[int] = set()
    # the cheapest stops are judged first; one whose starts the earlier ones already make room for
    # saves no wait (saved_wait_s), so two stops are not both paid for by the same start's wait
    cost = inputs.job_weight * inputs.job_lost_gpu_s
    for j in wants_out[np.lexsort((wants_out, cost[wants_out]))].tolist():
        stopping[j], waits = _pays(inputs, share0, free0, j, rules, stopping)
        if waits:
            waiting.add(j)
    return StopJudgement(wants_out[~stopping[wants_out]], frozenset(waiting))


def _pays(
    inputs: PlanInputs, share0: np.ndarray, free0: np.ndarray, j: int, rules: StopRules, stopping: np.ndarray
) -> tuple[bool, bool]:
    """(whether job j's stop pays now, whether it waits for a checkpoint within the step instead)."""
    if float(inputs.job_ran_s[j]) < rules.min_run_s:
        return False, False
    p = int(inputs.job_running_pool[j])
    weight, gang = inputs.job_weight, inputs.job_gang
    at_stake, deadline_gain = _deadlines_at_stake(inputs, share0, free0, p, j, rules, stopping)
    starters = np.union1d(_heavier_starters(inputs, share0, p, float(weight[j])), at_stake)
    if starters.size == 0:
        return False, False  # nothing heavier starts in its pool: kept (inference still takes its GPUs)
    # the heavier starts queue for the GPUs that free: the stop gains their mean weight over the
    # stopped job's, on the GPUs of it they take, for as long as all of them would wait
    starter_gpus = float(gang[starters].sum())
    starter_weight = float((weight[starters] * gang[starters]).sum()) / starter_gpus
    starter_startup_s = float((inputs.job_restart_s[starters] * gang[starters]).sum()) / starter_gpus
    gpus = min(float(gang[j]), starter_gpus)
    wait_s = saved_wait_s(inputs, free0, p, starter_gpus, stopping)
    # the heavier work moves ``wait_s`` earlier, the stopped job's as much later
    horizon_s = inputs.blocks.horizon_s
    heavier_by = max(starter_weight - float(weight[j]), 0.0)

    def sooner_by(wait: float) -> float:
        return value_of_sooner(heavier_by, gpus, wait, horizon_s, rules.earliness)

    cost = float(stop_cost_gpu_s(inputs, rules)[j])
    cost += starter_weight * starter_startup_s * gpus
    if sooner_by(wait_s) + deadline_gain <= cost:
        return False, False
    waits = deadline_gain <= 0 and waits_for_checkpoints(inputs, [j], sooner_by, wait_s)
    return not waits, waits


def waits_for_checkpoints(
    inputs: PlanInputs, stopped: list[int], gain_by: Callable[[float], float], wait_s: float
) -> bool:
    """Whether stops that pay wait for the next decision: those of ``stopped`` that write a
    checkpoint before it lose none of their work since the last one then, and that work (at their
    weights) is worth more than the starts lose by waiting one step more (``gain_by``: what the
    starts gain, by the wait the stops save; now ``wait_s``)."""
    at = np.asarray(stopped, dtype=np.int64)
    gang = inputs.job_gang[at]
    since = np.maximum(inputs.job_lost_gpu_s[at] - inputs.job_restart_s[at] * gang, 0.0)
    to_next_s = inputs.job_checkpoint_s[at] - since / np.maximum(gang, 1.0)
    soon = np.isfinite(to_next_s) & (to_next_s <= inputs.step_s)
    if not soon.any():
        return False
    saved = float((inputs.job_weight[at][soon] * since[soon]).sum())
    return saved > gain_by(wait_s) - gain_by(max(wait_s - inputs.step_s, 0.0))


def stop_cost_gpu_s(inputs: PlanInputs, rules: StopRules) -> np.ndarray:
    """[J] what stopping each job costs (weight x GPU-seconds): its weight x (its work since the last
    checkpoint + its restart + the preemption penalty on its GPUs). Used by the stop rule, node
    clearing and quota reclaims (optimizer/step0.py)."""
    lost: np.ndarray = inputs.job_weight * (inputs.job_lost_gpu_s + rules.penalty_gpu_s * inputs.job_gang)
    return lost


def value_of_sooner(weight: float, gpus: float, sooner_s: float, horizon_s: float, earliness: float) -> float:
    """What ``gpus`` GPUs of work of ``weight`` done ``sooner_s`` sooner are worth, as the plan values
    time (weight x GPU-seconds): work is worth ``earliness`` more at the start of the horizon than at
    its end, so the ``gpus x sooner_s`` GPU-seconds moved each gain ``earliness x sooner_s / horizon``
    of their weight. Used by the stop rule here and by quota reclaims (optimizer/quota.py)."""
    return weight * gpus * sooner_s * earliness * sooner_s / horizon_s


def _heavier_starters(inputs: PlanInputs, share0: np.ndarray, p: int, above: float) -> np.ndarray:
    """Waiting jobs the plan starts in pool p now (any share there) that weigh more than ``above``:
    a stop never makes room for work of equal or lower value density."""
    if share0.size == 0:
        return np.zeros(0, dtype=np.int64)
    waiting = (inputs.job_running_pool < 0) & (inputs.job_remaining_s > 0)
    return np.flatnonzero(waiting & (share0[:, p] > EPS) & (inputs.job_weight > above + EPS))


def _deadlines_at_stake(
    inputs: PlanInputs,
    share0: np.ndarray,
    free0: np.ndarray,
    p: int,
    stopped: int,
    rules: StopRules,
    stopping: np.ndarray,
) -> tuple[np.ndarray, float]:
    """Waiting jobs the plan starts in pool p now whose deadline (in reach) waiting for GPUs to free
    by themselves would miss, where the stopped job has none at stake itself; and the plan's price
    (weight x GPU-seconds) of the work each such wait pushes past its deadline. Each start waits for
    its own gang's GPUs (``natural_wait_s``), beyond its slack (deadline less its work)."""
    none = np.zeros(0, dtype=np.int64)
    in_reach = deadline_in_reach(inputs)
    if rules.deadline_penalty <= 0 or share0.size == 0 or in_reach[stopped]:
        return none, 0.0
    waiting = (inputs.job_running_pool < 0) & (inputs.job_remaining_s > 0)
    candidates = np.flatnonzero(waiting & (share0[:, p] > EPS) & in_reach)
    late_gpu_s = {
        s: late_by_wait_gpu_s(inputs, s, saved_wait_s(inputs, free0, p, float(inputs.job_gang[s]), stopping))
        for s in candidates.tolist()
    }
    at_stake = np.asarray([s for s, late in late_gpu_s.items() if late > 0], dtype=np.int64)
    return at_stake, _late_price(inputs, rules) * sum(late_gpu_s[s] for s in at_stake.tolist())


def late_by_wait_gpu_s(inputs: PlanInputs, s: int, wait_s: float) -> float:
    """GPU-seconds of job s's work that waiting ``wait_s`` before it starts pushes past its deadline
    (its slack: the deadline less its work); 0 or less where the wait fits in the slack."""
    slack_s = float(inputs.job_deadline_step[s] - steps_of_work(inputs)[s]) * inputs.step_s
    return min(float(inputs.job_remaining_s[s]), float(inputs.job_gang[s]) * (wait_s - slack_s))


def _late_price(inputs: PlanInputs, rules: StopRules) -> float:
    """The plan's price (weight x GPU-second) of work left past its deadline."""
    return rules.deadline_penalty * inputs.max_weight * (1.0 + rules.earliness)


def clearing_pays(
    inputs: PlanInputs, gang_job: int, victims: list[int], wait_s: float, rules: StopRules
) -> bool:
    """Node clearing (optimizer/node_clearing.py, from optimizer/step0.py) judged as a stop is:
    stopping ``victims`` (each of a lower weight) so gang ``gang_job`` starts now rather than after
    ``wait_s`` (its nodes draining by themselves) pays only when the gang's work moved ``wait_s``
    sooner and the victims' as much later (``value_of_sooner`` of the weight the gang has over their
    mean, on the GPUs swapped), plus the GPUs of the gang's nodes that idle now (its gang less the
    GPUs swapped): the nodes held for the gang keep them idle while they drain (optimizer/step0.py),
    GPU-time lost for good and priced at the victims' weight (the work those nodes run), plus the work
    the wait would push past the gang's deadline (in reach, where no victim has one at stake), exceeds
    the victims' lost work, restarts and preemption penalty. The gang's own start-up is no cost of
    the clearing: it is paid whether the gang starts now or when the nodes have drained. A clearing
    that pays still waits where its victims write a checkpoint within the step and their work since
    the last one outweighs a step's more wait (``waits_for_checkpoints``), unless a deadline is at
    stake."""
    weight, gang = inputs.job_weight, inputs.job_gang
    victim_gpus = float(gang[victims].sum())
    if victim_gpus <= 0 or wait_s <= 0:
        return False
    victim_weight = float((weight[victims] * gang[victims]).sum()) / victim_gpus
    gpus = min(float(gang[gang_job]), victim_gpus)
    horizon_s = inputs.blocks.horizon_s
    heavier_by = max(float(weight[gang_job]) - victim_weight, 0.0)
    idle_gpus = float(gang[gang_job]) - gpus  # held idle while the nodes drain

    def gain_by(wait: float) -> float:
        sooner = value_of_sooner(heavier_by, gpus, wait, horizon_s, rules.earliness)
        return sooner + victim_weight * idle_gpus * wait

    in_reach = deadline_in_reach(inputs)
    late_gain = 0.0
    if rules.deadline_penalty > 0 and in_reach[gang_job] and not in_reach[victims].any():
        late_gain = _late_price(inputs, rules) * max(late_by_wait_gpu_s(inputs, gang_job, wait_s), 0.0)
    cost = float(stop_cost_gpu_s(inputs, rules)[victims].sum())
    if gain_by(wait_s) + late_gain <= cost:
        return False
    return late_gain > 0 or not waits_for_checkpoints(inputs, victims, gain_by, wait_s)


def saved_wait_s(
    inputs: PlanInputs, free0: np.ndarray, p: int, need_gpus: float, stopping: np.ndarray
) -> float:
    """The wait a stop saves starts of ``need_gpus`` GPUs in pool p: none where the GPUs idle now and
    those of the stops already found to pay (``stopping``) cover them; else their natural wait."""
    if natural_wait_s(inputs, free0, p, need_gpus, stopping) <= 0.0:
        return 0.0
    return natural_wait_s(inputs, free0, p, need_gpus)


def natural_wait_s(
    inputs: PlanInputs, free0: np.ndarray, p: int, need_gpus: float, stopping: np.ndarray | None = None
) -> float:
    """How long until ``need_gpus`` GPUs are free in pool p with no stop but ``stopping`` [J] (those
    already found to pay; their GPUs are free now): the GPUs idle now, then the other running jobs
    there ending by their estimates (remaining GPU-time over the gang), the job a stop would take
    them from among them (a job that ends in an hour frees its GPUs in an hour: stopping it saves at
    most that); the horizon if they never add up."""
    horizon_s = inputs.blocks.horizon_s
    run_pool = inputs.job_running_pool
    on_pool = run_pool == p
    running = np.flatnonzero(on_pool if stopping is None else on_pool & ~stopping)
    gangs = inputs.job_gang[running]
    idle = float(free0[p]) - float(gangs.sum())
    need = need_gpus - max(idle, 0.0)
    if need <= EPS:
        return 0.0
    wall = inputs.job_remaining_s[running] / np.maximum(gangs, 1.0)
    order = np.argsort(wall, kind="stable")
    freed = np.cumsum(gangs[order])
    enough = np.flatnonzero(freed + EPS >= need)
    if enough.size == 0:
        return horizon_s
    return min(float(wall[order][enough[0]]), horizon_s)
