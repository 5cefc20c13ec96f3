"""Target names (schemas/targets.py): every builder parses back to its parts, and nothing else parses."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas import ActuationResult
from schemas.targets import (
    Target,
    is_target,
    job_target,
    parse_target,
    plan_target,
    reservation_target,
    service_target,
)

parts = st.text(min_size=1, max_size=30)
tricky = st.text(alphabet="/%2F5a", min_size=1, max_size=12)
any_part = st.one_of(parts, tricky)


@given(any_part, any_part)
def test_service_target_round_trips(service: str, pool: str) -> None:
    target = service_target(service, pool)
    assert parse_target(target) == Target("service", (service, pool))
    assert str(parse_target(target)) == target
    assert target.count("/") == 2


@given(any_part, st.sampled_from([job_target, plan_target, reservation_target]))
def test_single_part_targets_round_trip(name: str, build) -> None:  # type: ignore[no-untyped-def]
    target = build(name)
    parsed = parse_target(target)
    assert parsed.parts == (name,)
    assert target.startswith(parsed.kind + "/")
    assert str(parsed) == target


@given(any_part, any_part, any_part)
def test_distinct_parts_give_distinct_targets(a: str, b: str, c: str) -> None:
    assert (service_target(a, b) == service_target(a, c)) == (b == c)
    assert service_target(a, b) != job_target(a)
    assert (job_target(a) == job_target(b)) == (a == b)


@pytest.mark.parametrize(
    "bad",
    [
        "train-42",  # a bare job id
        "service/chat@pool-a",  # the old service@pool spelling
        "service/chat",
        "service/chat/a/b",
        "service//a",
        "job/",
        "job/a/b",
        "node/n1",
        "job/50%",
        "job/%2f",
        "",
    ],
)
def test_anything_else_is_rejected(bad: str) -> None:
    assert not is_target(bad)
    with pytest.raises(ValueError):
        parse_target(bad)


def test_builders_reject_empty_parts() -> None:
    with pytest.raises(ValueError):
        service_target("chat", "")
    with pytest.raises(ValueError):
        job_target("")


def test_an_actuation_result_carries_only_a_target_name() -> None:
    now = datetime.now(UTC)
    base = dict(cluster="c", backend="b", plan_id="p", action="run", outcome="applied", time=now)
    assert ActuationResult(target=service_target("chat", "a"), **base).target == "service/chat/a"  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ActuationResult(target="j1", **base)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ActuationResult(target="job/50%", **base)  # type: ignore[arg-type]
