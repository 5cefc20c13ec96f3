"""``ebbtide bench-scale``'s loop on the suite's Apache Kafka at a small size (marker ``kafka``): the
services run a step end to end, every topic is read back and each topic's largest record is
measured against its limits (the 2,000 and 10,000-job figures come from the command itself)."""

from __future__ import annotations

import pytest
from rich.console import Console

from bench.scale_loop import run_size
from ebbtide.soak_wiring import soak_services
from schemas.topics import CATALOGUE

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_loop_runs_and_every_topic_record_is_measured_against_its_limit(kafka_broker) -> None:
    result = run_size(soak_services, 64, 2, kafka_broker, Console(quiet=True))
    assert result.jobs_in_state and result.jobs_in_state[0] == 64 and len(result.decision_ms) >= 2
    assert [t.topic for t in result.topics] == [t.name for t in CATALOGUE]
    by_topic = {t.topic: t for t in result.topics}
    for name in ("ebbtide.cluster-state", "ebbtide.plans", "ebbtide.allocations", "ebbtide.actuations"):
        sizes = by_topic[name]
        assert sizes.records >= 1, name
        assert sizes.largest_zstd_bytes > 0 and sizes.largest_json_bytes > 0, name
        assert sizes.fits, name
    assert result.outputs_too_large == 0 and result.dead_letters == 0
