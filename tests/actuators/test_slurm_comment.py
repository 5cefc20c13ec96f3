"""The ebbtide comment grammar of Slurm jobs (actuators/slurm/comment.py), as tables."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from actuators.slurm.comment import (
    DECISION_MARK,
    ERROR_MARK,
    EXCLUDED_MARK,
    CommentError,
    note_of,
    parse_spec,
    spec_section,
    with_excluded,
    with_note,
)


def spec(section: str, gpus: int = 4, pools: list[str] | None = None):  # type: ignore[no-untyped-def]
    return parse_spec(section, "c-7", gpus, pools or ["pool-a"])


def test_every_key_reaches_its_jobspec_field() -> None:
    got = spec(
        "ebbtide: est_gpu_h=4 deadline=2026-12-02T06:00Z ckpt_s=1800 weight=3 team=nlp preemptible=no "
        "restart_s=60 class=research bandwidth=high gpu_type=A100,H100",
        gpus=16,
        pools=["pool-a", "pool-b"],
    )
    assert (got.job_id, got.gpus, got.allowed_pools) == ("c-7", 16, ["pool-a", "pool-b"])
    assert got.estimated_gpu_s == 4 * 3600.0
    assert got.deadline == datetime(2026, 12, 2, 6, 0, tzinfo=UTC)
    assert (got.checkpoint_interval_s, got.restart_cost_s, got.priority_weight) == (1800.0, 60.0, 3.0)
    assert (got.team, got.preemptible, got.priority_class) == ("nlp", False, "research")
    assert (got.bandwidth_class, got.allowed_gpu_types) == ("high", ["A100", "H100"])


def test_defaults_when_only_the_work_is_given() -> None:
    got = spec("ebbtide: est_gpu_s=7200")
    assert (got.estimated_gpu_s, got.priority_weight) == (7200.0, 1.0)
    assert (got.preemptible, got.deadline) == (True, None)


def test_a_deadline_with_an_offset_is_read_as_utc() -> None:
    assert spec("ebbtide: est_gpu_h=1 deadline=2026-12-02T08:00+02:00").deadline == datetime(
        2026, 12, 2, 6, 0, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("section", "why"),
    [
        ("ebbtide:", "est_gpu_h: required"),
        ("ebbtide: weight=3", "est_gpu_h: required"),
        ("ebbtide: est_gpu_h=x", "est_gpu_h: 'x' is not a number"),
        ("ebbtide: est_gpu_h=0", "est_gpu_h: 0 must be > 0"),
        ("ebbtide: est_gpu_h=-2", "est_gpu_h: -2 must be > 0"),
        ("ebbtide: est_gpu_h=nan", "est_gpu_h: 'nan' is not a finite number"),
        ("ebbtide: est_gpu_h=1 est_gpu_s=5", "est_gpu_s: given twice"),
        ("ebbtide: est_gpu_h=1 weight=2 weight=3", "weight: given twice"),
        ("ebbtide: est_gpu_h=1 colour=blue", "colour: unknown key"),
        ("ebbtide: est_gpu_h=1 weight", "weight: expected key=value"),
        ("ebbtide: est_gpu_h=1 deadline=tomorrow", "deadline: 'tomorrow' is not an ISO 8601 time"),
        ("ebbtide: est_gpu_h=1 deadline=2026-12-02T06:00", "deadline: '2026-12-02T06:00' has no time zone"),
        ("ebbtide: est_gpu_h=1 preemptible=maybe", "preemptible: 'maybe' is not yes or no"),
        ("ebbtide: est_gpu_h=1 restart_s=-1", "restart_s: -1 must be >= 0"),
        ("ebbtide: est_gpu_h=1 weight=1e9", "weight: Input should be less than or equal to"),
        ("ebbtide: est_gpu_h=1 bandwidth=huge", "bandwidth: Input should be 'low', 'medium' or 'high'"),
    ],
)
def test_a_malformed_section_names_the_key_and_why(section: str, why: str) -> None:
    with pytest.raises(CommentError) as caught:
        spec(section)
    assert str(caught.value).startswith(why), str(caught.value)


def test_no_gpus_requested_is_named_as_the_gres_request() -> None:
    with pytest.raises(CommentError, match=r"^gpus \(from --gres=gpu:N x nodes\)"):
        spec("ebbtide: est_gpu_h=1", gpus=0)


@pytest.mark.parametrize(
    ("comment", "section"),
    [
        (None, None),
        ("", None),
        ("nightly run", None),
        ("ebbtide: est_gpu_h=1", "ebbtide: est_gpu_h=1"),
        ("ebbtide: est_gpu_h=1 | ebbtide-decision: hold: full (plan=p)", "ebbtide: est_gpu_h=1"),
        ("ebbtide-error: x: y | ebbtide: est_gpu_h=1", "ebbtide: est_gpu_h=1"),
    ],
)
def test_the_spec_section_is_found_among_the_notes(comment: str | None, section: str | None) -> None:
    assert spec_section(comment) == section


def test_a_note_replaces_ebbtides_notes_and_keeps_the_users_section() -> None:
    first = with_note("ebbtide: est_gpu_h=1", DECISION_MARK, "hold: full")
    assert first == "ebbtide: est_gpu_h=1 | ebbtide-decision: hold: full"
    second = with_note(first, ERROR_MARK, "weight: bad")
    assert second == "ebbtide: est_gpu_h=1 | ebbtide-error: weight: bad"
    assert note_of(second, ERROR_MARK) == "weight: bad" and note_of(second, DECISION_MARK) is None
    assert spec_section(second) == "ebbtide: est_gpu_h=1"


def test_the_record_of_excluded_nodes_outlives_the_decision_notes_until_rewritten() -> None:
    spec = "ebbtide: est_gpu_h=1"
    recorded = with_excluded(with_note(spec, DECISION_MARK, "run: go (plan=p)"), ["a3", "a4"])
    assert recorded == f"{spec} | {EXCLUDED_MARK} a3,a4 | {DECISION_MARK} run: go (plan=p)"
    held = with_note(recorded, DECISION_MARK, "hold: full (plan=q)")
    assert held == f"{spec} | {EXCLUDED_MARK} a3,a4 | {DECISION_MARK} hold: full (plan=q)"
    assert note_of(with_note(held, ERROR_MARK, "weight: bad"), EXCLUDED_MARK) == "a3,a4"
    cleared = with_excluded(held, [])
    assert cleared == f"{spec} | {DECISION_MARK} hold: full (plan=q)"
    assert spec_section(cleared) == spec
