"""PlannerConfig: every setting of the receding-horizon planner, one default for all clusters.

Read once when a PlannerPolicy is built; a bad value fails there, naming the setting. The
planner itself never reads configuration from anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlannerConfig:
    horizon_steps: int = 96
    """Steps in the horizon (96 x 15 min = 24 h)."""
    step_s: int = 900
    """Length of a plan step in seconds."""
    fine_steps: int = 4
    """Leading steps modelled one by one (step 0 is always its own block)."""
    mid_block_steps: int = 4
    """Block length after the fine steps, up to ``mid_until_step``."""
    mid_until_step: int = 24
    coarse_block_steps: int = 12
    """Block length for the rest of the horizon."""

    shortfall_penalty: float = 25.0
    """Cost of one uncovered GPU-hour of inference demand, in units of the largest job weight
    (optimizer/parameters.py, SLO_PRICE_UNIT)."""
    min_replica_penalty: float = 5.0
    """Cost per GPU-hour of a replica missing under min_replicas, same unit."""
    earliness: float = 0.75
    """Work in step 0 is worth (1 + earliness) x work at the horizon's end."""
    finish_bonus: float = 0.05
    """Among jobs of equal weight, the one with the highest response ratio goes first: a GPU-hour of
    a job whose gang has h hours of work left and that has waited w hours since submission (0 while
    it runs) is worth ``finish_bonus x (finish_hours + w) / (finish_hours + w + h)`` more
    (optimizer/parameters.py). Without waiting that is Smith's rule within a weight class (2.5% an
    hour from done, 0.5% at 9 hours); waiting raises it, so a job that has waited goes before newer
    ones that would finish sooner (highest response ratio next). Never ``finish_bonus`` or more, so
    a weight that much heavier always outranks it. The nearness to done alone, measured over 57
    bench runs: weighted completions at least the best baseline's in 48 runs instead of 33 without
    it; the waiting term, over 71 (README, "What a job's GPU-hour is worth")."""
    finish_hours: float = 1.0
    """Hours of work left at which a job that has not waited gets half of ``finish_bonus``."""
    deadline_penalty: float = 2.0
    """Cost of one GPU-hour of a job's remaining work that its plan leaves past its deadline, in
    units of the most any job's GPU-hour is worth (the largest weight x (1 + earliness)): above 1,
    a deadline that can be met outranks every other use of a GPU-hour but inference's SLO
    (``shortfall_penalty``). Only deadlines the job's gang can still meet, running from now on,
    are priced (optimizer/parameters.py)."""
    deadline_margin_s: float = 1800.0
    """A deadline job is planned to finish this long before its deadline where its gang still can
    (else as soon as it can): a job started on its GPUs meanwhile could not be stopped for it
    within ``min_run_s``, and a deadline that leaves no slack is missed by any delay."""
    preemption_penalty_gpu_h: float = 0.1
    """Cost of a preemption per GPU of the gang (disruption, hysteresis against swapping jobs back
    and forth), in GPU-hours at the preempted job's weight, on top of the work it loses."""
    churn_penalty_gpu: float = 0.02
    """Cost per GPU of service capacity added (scale-up churn between steps)."""
    service_gpu_cost: float = 0.01
    """Cost per service GPU-hour, so capacity is not provisioned beyond what is needed."""
    stay_preference: float = 0.2
    """A service GPU-hour in a pool the service has no replicas in now costs this share of
    ``service_gpu_cost`` more: where pools are otherwise equal (later blocks count what a service
    adds, not where) its placement stays put, and moves only where that buys something."""
    interference_cost: float = 0.05
    """Cost per GPU-hour of replica capacity placed on a shared (time-sliced) GPU."""
    nowcast_steps: int = 4
    """Leading steps whose demand is at least the last observed demand (covers forecast misses)."""
    peak_margin: bool = True
    """Size capacity for the demand until the next decision, not a step's mean: the plan covers the
    forecast plus the move demand makes within a step and a replica's start-up, and a service
    lending headroom keeps that move ready above its demand now (optimizer/peak_margin.py)."""
    peak_margin_z: float = 2.2
    """That move in robust standard deviations of the service's own moves over the last day (from
    each step mean, the largest change to either of the next two; 1.4826 x their median): at 2.2 a
    normally distributed move passes it about once in 70 steps."""
    max_preemptions_per_step: int = 8
    min_run_s: float = 1800.0
    """A running job is not stopped for other jobs within this long of its (re)start (hysteresis:
    one decision's start is not undone by the next; inference and shrinking pools still take the
    GPUs they need). Stops must also pay for themselves (optimizer/stop_pays.py)."""
    time_limit_s: float = 0.8
    """Wall-clock budget of one decision (model update, solve, rounding, plan and reasons): the
    solve gets what is left after the model is built, less what the last decision needed after its
    solve (at least a quarter of it); past its limit the planner publishes a flagged fallback."""
    backend: str = "highspy"
    """'highspy': the HiGHS matrix built from the model definition (hot path); 'pyomo': the Pyomo model."""
    run_threshold: float = 0.5
    """A job whose relaxed share of a step is at least this runs there (all or nothing)."""
    lend_headroom: bool = True
    """Lend step 0's idle inference headroom to preemptible, checkpointing jobs; services get a
    ``burst_gpus`` ceiling their autoscaler takes back from those borrowers (optimizer/headroom.py)."""
    burst_into_idle: bool = True
    """Raise a service's ``burst_gpus`` ceiling by the GPUs step 0 leaves idle in its pool, so its
    autoscaler can scale into them within the step (optimizer/idle_burst.py)."""
    burst_over_batch: bool = True
    """Raise each service's ``burst_gpus`` ceiling over the preemptible jobs in its pools that lose
    least if stopped: a service that surged within the last day by its largest rise, then every
    service up to its GPUs in the pool, as a horizontal autoscaler may double (optimizer/surge_burst.py).
    Over 57 bench runs, with the last step's rise: SLO shortfall summed 1.773 -> 1.387 points, lost
    work 572 -> 516 GPU-hours, preemptions 1022 -> 1026; the day's largest rise since, over 45: 0.796
    -> 0.723 points, 315 -> 328 GPU-hours, 942 -> 941; every service up to its GPUs since, over 36
    held-out runs: 2.740 -> 1.763 points, 678 -> 744 GPU-hours, 457 -> 485 preemptions."""
    lend_outside_quotas: bool = True
    """Where teams have quotas, lend the GPUs no quota covers (what the quotas leave to inference)
    like idle quota, to teams over theirs, where inference leaves them free (optimizer/quota.py);
    False: the quotas together cap batch, as a Kueue cohort does."""

    def __post_init__(self) -> None:
        positive = {
            "horizon_steps": self.horizon_steps,
            "step_s": self.step_s,
            "mid_block_steps": self.mid_block_steps,
            "coarse_block_steps": self.coarse_block_steps,
        }
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PlannerConfig.{name}: must be a positive integer, got {value!r}")
        non_negative: dict[str, float] = {
            "fine_steps": self.fine_steps,
            "mid_until_step": self.mid_until_step,
            "shortfall_penalty": self.shortfall_penalty,
            "min_replica_penalty": self.min_replica_penalty,
            "earliness": self.earliness,
            "finish_bonus": self.finish_bonus,
            "deadline_penalty": self.deadline_penalty,
            "deadline_margin_s": self.deadline_margin_s,
            "preemption_penalty_gpu_h": self.preemption_penalty_gpu_h,
            "churn_penalty_gpu": self.churn_penalty_gpu,
            "service_gpu_cost": self.service_gpu_cost,
            "stay_preference": self.stay_preference,
            "interference_cost": self.interference_cost,
            "max_preemptions_per_step": self.max_preemptions_per_step,
            "nowcast_steps": self.nowcast_steps,
            "peak_margin_z": self.peak_margin_z,
            "min_run_s": self.min_run_s,
        }
        for name, number in non_negative.items():
            if number < 0:
                raise ValueError(f"PlannerConfig.{name}: must be >= 0, got {number!r}")
        if not self.finish_hours > 0:
            raise ValueError(f"PlannerConfig.finish_hours: must be > 0, got {self.finish_hours!r}")
        if not self.time_limit_s > 0:
            raise ValueError(f"PlannerConfig.time_limit_s: must be > 0, got {self.time_limit_s!r}")
        if self.backend not in ("highspy", "pyomo"):
            raise ValueError(f"PlannerConfig.backend: 'highspy' or 'pyomo', got {self.backend!r}")
        if not 0.0 < self.run_threshold <= 1.0:
            raise ValueError(f"PlannerConfig.run_threshold: must be in (0, 1], got {self.run_threshold!r}")
