"""Maintenance windows from Slurm reservations (actuators/slurm/maintenance.py), on the records
``scontrol -o show reservation`` prints; tests/actuators/test_slurm_source_real.py reads them from
real Slurm daemons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from actuators.slurm.maintenance import expand_hostlist, maintenance_windows
from actuators.slurm.records import job_time_limit_s
from schemas.bounds import MAX_DURATION_S

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
NODES = {"pool-a": {"gpu01": 8, "gpu02": 8, "gpu03": 8}, "pool-b": {"gpu03": 8, "big7": 4}}


def local(when: datetime) -> str:
    """As the CLI prints a time: the host's local time, no offset."""
    return when.astimezone().replace(tzinfo=None).isoformat(timespec="seconds")


def reservation(nodes: str, start_h: float, hours: float, flags: str = "MAINT,SPEC_NODES") -> dict[str, str]:
    start = NOW + timedelta(hours=start_h)
    return {
        "ReservationName": "fw-upgrade",
        "StartTime": local(start),
        "EndTime": local(start + timedelta(hours=hours)),
        "Nodes": nodes,
        "Flags": flags,
    }


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu[01-03,07],cpu5", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]),
        ("rack[1-2]-n[8-9]", ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]),
        ("a1", ["a1"]),
        ("", []),
    ],
)
def test_host_lists_expand_as_slurm_writes_them(text: str, names: list[str]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("text", ["gpu[01-03", "gpu[3-1]", "gpu[a-b]"])
def test_a_host_list_that_cannot_be_read_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="host list"):
        expand_hostlist(text)


def test_a_maint_reservation_is_a_window_per_partition_naming_its_nodes_there() -> None:
    windows = maintenance_windows([reservation("gpu[02-03]", 5, 2)], NODES, NOW)
    a, b = windows["pool-a"][0], windows["pool-b"][0]
    assert (a.nodes, a.gpus_out, b.nodes, b.gpus_out) == (["gpu02", "gpu03"], 16, ["gpu03"], 8)
    assert (a.start, a.end) == (NOW + timedelta(hours=5), NOW + timedelta(hours=7))
    assert a.reason == "maintenance (slurm reservation fw-upgrade)"


def test_other_ended_or_unreadable_reservations_are_left_out() -> None:
    kept = reservation("gpu01", 1, 1)
    others = [
        reservation("gpu01", 1, 1, flags="SPEC_NODES"),  # a group's reservation, not maintenance
        reservation("gpu01", -3, 1),  # over
        reservation("gpu[01-", 1, 1),  # nodes unreadable
        {**reservation("gpu01", 1, 1), "StartTime": "Unknown"},
        reservation("elsewhere9", 1, 1),  # no GPU node of any partition
    ]
    windows = maintenance_windows([*others, kept], NODES, NOW)
    assert list(windows) == ["pool-a"] and len(windows["pool-a"]) == 1
    under_way = maintenance_windows([reservation("big7", -1, 3)], NODES, NOW)
    assert under_way["pool-b"][0].start < NOW < under_way["pool-b"][0].end


@pytest.mark.parametrize(
    ("record", "seconds"),
    [
        ({"time_limit": 40}, 2400.0),  # Slurm 22.05: minutes
        ({"time_limit": None}, MAX_DURATION_S),  # 22.05: unlimited
        ({"time_limit": {"set": True, "infinite": False, "number": 90}}, 5400.0),  # 23.02 on
        ({"time_limit": {"set": True, "infinite": True, "number": 0}}, MAX_DURATION_S),
        ({}, None),  # sacct's records: unknown
    ],
)
def test_a_jobs_time_limit_in_each_shape_slurm_writes_it(
    record: dict[str, object], seconds: float | None
) -> None:
    assert job_time_limit_s(record) == seconds
