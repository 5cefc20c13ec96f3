"""Maintenance windows announced on Kubernetes Nodes: when a node goes out, read from the Node.

Place in the loop: ``node_record`` (actuators/kube/records.py) reads each watched Node's window
here; the source's snapshot (actuators/kube/snapshot.py) gathers them per pool into the
inventory's ``PoolWindow``s, which the state service folds into the pool and the planner keeps
work that would run into them off those nodes (optimizer/nodes.py). Two announcements are read:

- the annotation ``ebbtide.io/maintenance``, an ISO 8601 interval with offsets that an SRE sets
  (``kubectl annotate node gpu-3 ebbtide.io/maintenance=2026-12-07T14:00:00Z/2026-12-07T16:00:00Z``);
- GKE's label ``cloud.google.com/scheduled-maintenance-time`` (Unix seconds), which GKE puts on
  GPU and TPU nodes before a host maintenance event that will stop them. GKE gives only the start;
  the window is taken to last ``GKE_WINDOW``, and a node back sooner takes work again once Ready.

The annotation wins where a node has both. A value that cannot be read is an error the source
logs, naming the node and the value; the node then announces nothing. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from schemas.bounds import EARLIEST_TIME, LATEST_TIME

ANN_MAINTENANCE = "ebbtide.io/maintenance"
LABEL_GKE_MAINTENANCE = "cloud.google.com/scheduled-maintenance-time"
GKE_WINDOW = timedelta(hours=1)
"""How long a GKE host maintenance event is taken to keep a node out (GKE announces the start only)."""
MAX_WINDOW = timedelta(days=30)
"""The longest window read as maintenance; a longer one is more likely a typo than a plan."""


@dataclass(frozen=True)
class NodeWindow:
    start: datetime
    end: datetime
    source: str  # what announced it: the annotation or GKE's label


def node_window(labels: Mapping[str, str], annotations: Mapping[str, str]) -> NodeWindow | None:
    """The maintenance window a Node announces, or None; ValueError naming the key and value when
    the announcement cannot be read."""
    if ANN_MAINTENANCE in annotations:
        text = str(annotations[ANN_MAINTENANCE])
        try:
            start_text, end_text = text.split("/")
            window = NodeWindow(_aware(start_text), _aware(end_text), ANN_MAINTENANCE)
        except ValueError as exc:
            raise ValueError(f"{ANN_MAINTENANCE}: {text!r}: {_why(exc)}") from None
        return _checked(window, ANN_MAINTENANCE, text)
    if LABEL_GKE_MAINTENANCE in labels:
        text = str(labels[LABEL_GKE_MAINTENANCE])
        if not text.isdigit():
            raise ValueError(f"{LABEL_GKE_MAINTENANCE}: {text!r}: not Unix seconds")
        start = datetime.fromtimestamp(min(int(text), int(LATEST_TIME.timestamp())), UTC)
        return _checked(NodeWindow(start, start + GKE_WINDOW, "GKE"), LABEL_GKE_MAINTENANCE, text)
    return None


def _aware(text: str) -> datetime:
    when = datetime.fromisoformat(text.strip())
    if when.utcoffset() is None:
        raise ValueError("a time needs its offset (Z or +HH:MM)")
    return when.astimezone(UTC)


def _why(exc: ValueError) -> str:
    text = str(exc)
    if text.startswith(("not enough values", "too many values")):
        return "expected START/END, e.g. 2026-12-07T14:00:00Z/2026-12-07T16:00:00Z"
    return text


def _checked(window: NodeWindow, key: str, text: str) -> NodeWindow:
    if window.end <= window.start:
        raise ValueError(f"{key}: {text!r}: the end is not after the start")
    if window.end - window.start > MAX_WINDOW:
        raise ValueError(f"{key}: {text!r}: longer than {MAX_WINDOW.days} days")
    if not (window.start >= EARLIEST_TIME and window.end <= LATEST_TIME):
        raise ValueError(f"{key}: {text!r}: outside {EARLIEST_TIME:%Y}..{LATEST_TIME:%Y}")
    return window
