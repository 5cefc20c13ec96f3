"""``ebbtide job submit`` and ``ebbtide job cancel`` against the real broker: what they produce is read
back decoded, keyed by job id; a bad spec exits 2 naming the field and produces nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka_helpers import drain

from schemas.jobs import JobEvent, JobEventKind, JobSpec
from schemas.topics import DEAD_LETTERS, JOB_EVENTS
from streams.consumer import ValidatingConsumer

ROOT = Path(__file__).resolve().parents[2]


def _job(*args: str, bootstrap: str = "127.0.0.1:1", prefix: str = "") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "EBBTIDE_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "EBBTIDE_KAFKA__TOPIC_PREFIX": prefix,
        "EBBTIDE_KAFKA__REPLICATION_FACTOR": "1",  # the session's one-node broker
        "EBBTIDE_CLUSTER": "c1",
    }
    command = [sys.executable, "-m", "ebbtide.cli", "job", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _read_back(bootstrap: str, group: str, topics: list, want: int, timeout_s: float = 30.0) -> list:
    consumer = ValidatingConsumer(bootstrap, group, topics[:1], dead_letters=topics[1])
    try:
        return drain(consumer, want=want, timeout_s=timeout_s)
    finally:
        consumer.close()


def test_submit_help() -> None:
    result = _job("submit", "--help")
    assert result.returncode == 0, result.stderr
    assert "--job-id" in result.stdout and "--gpus" in result.stdout


@pytest.mark.kafka
def test_submit_and_cancel_are_read_back_decoded(kafka_broker, kafka_topics, topic_prefix, group_id,
                                                  tmp_path) -> None:  # fmt: skip
    topics = kafka_topics(JOB_EVENTS, DEAD_LETTERS)
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text("job_id: train-7\ngpus: 8\nallowed_pools: [a100]\ndeadline: 2030-01-02T03:00:00Z\n")
    before = datetime.now(UTC)
    submitted = _job(
        "submit", "--file", str(spec_file), "--gpus", "16", "--gpu-type", "A100", "--priority-class",
        "research", "--priority-weight", "2.5", "--estimated-gpu-hours", "10", "--not-preemptible",
        "--checkpoint-interval-s", "1800", "--restart-cost-s", "120", "--team", "vision",
        bootstrap=kafka_broker.bootstrap, prefix=topic_prefix,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert f"submitted job train-7: {topics[0].name} partition" in submitted.stdout
    cancelled = _job("cancel", "train-7", "--message", "superseded",
                     bootstrap=kafka_broker.bootstrap, prefix=topic_prefix)  # fmt: skip
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr

    first, second = _read_back(kafka_broker.bootstrap, group_id("job-cli"), topics, want=2)
    assert first.key == second.key == "train-7"
    assert isinstance(first.event, JobEvent) and first.event.kind == JobEventKind.SUBMITTED
    assert before <= first.event.time <= datetime.now(UTC) and first.event.cluster == "c1"
    assert first.event.spec == JobSpec(
        job_id="train-7", gpus=16, allowed_pools=["a100"], allowed_gpu_types=["A100"],
        priority_class="research", priority_weight=2.5, estimated_gpu_s=36_000.0,
        deadline=datetime(2030, 1, 2, 3, tzinfo=UTC), preemptible=False, checkpoint_interval_s=1800.0,
        restart_cost_s=120.0, team="vision",
    )  # fmt: skip
    assert second.event.kind == JobEventKind.CANCELLED and second.event.message == "superseded"


@pytest.mark.kafka
def test_bad_spec_exits_2_naming_the_field_and_produces_nothing(kafka_broker, kafka_topics, topic_prefix,
                                                                group_id) -> None:  # fmt: skip
    topics = kafka_topics(JOB_EVENTS, DEAD_LETTERS)
    where = {"bootstrap": kafka_broker.bootstrap, "prefix": topic_prefix}
    bad_gpus = _job("submit", "--job-id", "j1", "--gpus", "0", "--estimated-gpu-s", "60", **where)
    assert bad_gpus.returncode == 2 and "gpus: Input should be greater than or equal to 1" in bad_gpus.stderr
    missing = _job("submit", "--job-id", "j1", "--gpus", "4", **where)
    assert missing.returncode == 2 and "estimated_gpu_s: Field required" in missing.stderr
    naive = _job("submit", "--job-id", "j1", "--gpus", "4", "--estimated-gpu-s", "60",
                 "--deadline", "2030-01-01T00:00:00", **where)  # fmt: skip
    assert naive.returncode == 2 and "deadline:" in naive.stderr
    unknown = _job("submit", "--job-id", "j1", "--gpus", "4", "--estimated-gpu-s", "60",
                   "--bandwidth-class", "huge", **where)  # fmt: skip
    assert unknown.returncode == 2 and "bandwidth_class:" in unknown.stderr
    empty = _job("cancel", "", **where)
    assert empty.returncode == 2 and "job_id:" in empty.stderr
    assert _read_back(kafka_broker.bootstrap, group_id("job-cli-bad"), topics, want=1, timeout_s=5.0) == []


def test_unreachable_broker_exits_3() -> None:
    result = _job("cancel", "j1", "--timeout", "2", bootstrap="127.0.0.1:1")
    assert result.returncode == 3 and "not delivered" in result.stderr
