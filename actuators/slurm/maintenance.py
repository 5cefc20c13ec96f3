"""Maintenance windows from Slurm's reservations: which nodes of a partition go out, and when.

Place in the loop: read by the Slurm source (actuators/slurm/source.py) at each snapshot, from
``scontrol -o show reservation`` or slurmrestd's ``/reservations`` (the transport gives both in the
CLI's field names). A reservation with the ``MAINT`` flag (``scontrol create reservation
flags=maint nodes=gpu[03-04] starttime=... duration=...``) becomes one ``PoolWindow`` per partition
it touches, naming its nodes there and their GPUs; the state service folds it into the pool
(streams/fold_inventory.py) and the planner keeps work that would run into the window off those
nodes (optimizer/nodes.py). Other reservations (ebbtide's own for inference, a group's) are not
maintenance and are left out. A reservation that has ended, or whose times or nodes cannot be
read, is skipped with a warning: it never breaks the snapshot.

Times: the CLI prints the controller host's local time without an offset (so does ``_local_time``
in actuators/slurm/rest.py); they are read in the source host's time zone, which must match.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from schemas import PoolWindow
from schemas.bounds import LATEST_TIME

log = logging.getLogger(__name__)

MAINTENANCE_FLAG = "MAINT"
_BRACKET = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list as names: ``gpu[01-03,07],cpu5`` -> gpu01 gpu02 gpu03 gpu07 cpu5.

    Ranges keep their zero padding; several bracket groups in one name expand to every
    combination. Written here because the library for it (python-hostlist) is GPL-licensed."""
    names: list[str] = []
    for part in _top_level_parts(text):
        names.extend(_expand_one(part))
    return names


def _top_level_parts(text: str) -> list[str]:
    """``a[1,2],b`` -> ['a[1,2]', 'b']: split at commas outside brackets."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text.strip():
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    if depth != 0:
        raise ValueError(f"unbalanced brackets in host list {text!r}")
    return [p for p in parts if p]


def _expand_one(name: str) -> list[str]:
    match = _BRACKET.search(name)
    if match is None:
        return [name]
    head, tail = name[: match.start()], name[match.end() :]
    return [head + number + rest for number in _numbers(match.group(1)) for rest in _expand_one(tail)]


def _numbers(ranges: str) -> list[str]:
    """``01-03,7`` -> ['01', '02', '03', '7']."""
    out: list[str] = []
    for item in ranges.split(","):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"bad range {item!r} in host list")
        if not high:
            out.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"range {item!r} in host list runs backwards")
        out.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return out


def is_maintenance(reservation: Mapping[str, str]) -> bool:
    flags = {f.strip().upper() for f in reservation.get("Flags", "").split(",")}
    return MAINTENANCE_FLAG in flags


def _slurm_time(text: str) -> datetime:
    """A time as Slurm prints it (local, no offset: ``2026-12-06T14:00:00``) in UTC; far or
    unlimited ends are capped at the latest time an event may carry."""
    if text.strip().lower() in {"unknown", "none", ""}:
        raise ValueError(f"no time in {text!r}")
    when = datetime.fromisoformat(text).astimezone(UTC)
    return min(when, LATEST_TIME)


def maintenance_windows(
    reservations: Sequence[Mapping[str, str]],
    node_gpus: Mapping[str, Mapping[str, int]],
    now: datetime,
) -> dict[str, list[PoolWindow]]:
    """Partition -> the maintenance windows that take its nodes out, from now on.

    ``node_gpus``: partition -> node name -> its GPUs (nodes without GPUs are not listed)."""
    windows: dict[str, list[PoolWindow]] = {}
    for resv in reservations:
        if not is_maintenance(resv):
            continue
        name = resv.get("ReservationName", "?")
        try:
            start, end = _slurm_time(resv.get("StartTime", "")), _slurm_time(resv.get("EndTime", ""))
            nodes = set(expand_hostlist(resv.get("Nodes", "")))
        except ValueError as exc:
            log.warning("slurm reservation %s: left out, cannot read it: %s", name, exc)
            continue
        if end <= now or end <= start:
            continue
        for partition, gpus in node_gpus.items():
            out = sorted(n for n in nodes if n in gpus)
            if out:
                windows.setdefault(partition, []).append(
                    PoolWindow(
                        start=start,
                        end=end,
                        gpus_out=sum(gpus[n] for n in out),
                        nodes=out,
                        reason=f"maintenance (slurm reservation {name})",
                    )
                )
    return windows
