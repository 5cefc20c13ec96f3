"""Upper bounds on every quantity of the event contracts: the most a real cluster could report.

Place in the loop: schemas/base.py turns these into the checked field types the events use, so
a record beyond a bound fails validation at the edge (a dead letter naming the field) instead of
reaching the fold or the planner, where a gang of 10^9 GPUs or a priority weight of 1e20 would
make every decision a fallback. Each bound is generous (well above any cluster of today) and
finite, so that products of two bounded values stay far below the solver's infinity (1e20).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

EARLIEST_TIME: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""The earliest time an event may carry (the Unix epoch, which seeds use as "no time yet")."""

LATEST_TIME: Final = datetime(2200, 1, 1, tzinfo=UTC)
"""The latest time an event may carry; a service also rejects times too far past its own clock."""

MAX_POOL_GPUS: Final = 1_000_000
"""GPUs in one pool (total, available, quota of a team, a service's GPUs in a pool)."""

MAX_GANG_GPUS: Final = 65_536
"""GPUs of one batch job's gang (the largest training runs today use some 16k GPUs)."""

MAX_NODE_GPUS: Final = 1024
"""GPUs on one node (and so the largest GPU index on it plus one)."""

MAX_SHARE: Final = 1024
"""Time-slicing replicas (or tenants) on one GPU."""

MAX_REPLICAS: Final = 1_000_000
"""Replicas of one inference service."""

MAX_DEMAND_GPUS: Final = 10_000_000.0
"""Busy GPUs of one service (a sample, a history value, a forecast quantile): ten pools' worth."""

MAX_PRIORITY_WEIGHT: Final = 1e6
"""A batch job's priority weight (weights are relative: 1 is standard)."""

MAX_GPU_SECONDS: Final = 1e12
"""GPU-seconds of one job's work (about 280 million GPU-hours: 100,000 GPUs for three years)."""

MAX_DURATION_S: Final = 366.0 * 86_400.0
"""Seconds of one duration (checkpoint interval, restart cost, service startup): a year."""

MAX_STEP_S: Final = 86_400
"""Seconds of one planning step: a day."""

MAX_HORIZON_STEPS: Final = 10_000
"""Steps of one planning horizon (forecast and plan)."""

MAX_REQUESTS_PER_S: Final = 1e9
"""Requests per second of one service."""

MAX_LATENCY_MS: Final = 3_600_000.0
"""Milliseconds of one latency quantile: an hour."""

MAX_GPU_MEMORY_MIB: Final = 16_777_216.0
"""MiB of memory of one GPU (16 TiB)."""

MAX_POWER_W: Final = 100_000.0
"""Watts drawn by one GPU."""

MAX_CLOCK_MHZ: Final = 100_000.0
"""MHz of one GPU clock (SM or memory)."""

MAX_PROCESSES: Final = 1_000_000
"""Processes on one GPU."""

MAX_ATTEMPTS: Final = 1_000_000
"""Attempts of one actuation."""

MAX_SOLVE_MS: Final = 86_400_000.0
"""Milliseconds of one solve: a day."""

MAX_RELATIVE: Final = 1e9
"""A relative quantity (an optimality gap, a backtest's relative error)."""

MAX_PARTITION: Final = 2**31 - 1
"""A Kafka partition number (int32)."""

MAX_OFFSET: Final = 2**63 - 1
"""A Kafka offset (int64)."""
