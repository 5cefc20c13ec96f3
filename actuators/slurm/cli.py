"""Slurm through its command-line tools (squeue/sinfo --json, scontrol, scancel).

Place in the loop: the transport under ``SlurmBackend`` when no slurmrestd URL is configured.
Reads use JSON output (``squeue --json``, ``sinfo --json``); Slurm 22.05's ``scontrol`` has no
``--json``, so reservations are read from ``scontrol -o show reservation`` (one record per line,
``Key=Value`` fields, a documented format). Failures are classified: controller unreachable,
timeouts and busy resources are temporary; anything else is permanent.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from actuators.base import PermanentError, TemporaryError

_TEMPORARY_MARKERS = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out",
    "zero bytes were transmitted",
    "communication connection failure",
    "slurm backup controller in standby mode",
    "requested nodes are busy",
    "resource temporarily unavailable",
    "job is no longer pending",
    "slurmctld is not responding",
    "protocol authentication error",
)


def classify(stderr: str) -> type[TemporaryError] | type[PermanentError]:
    low = stderr.lower()
    return TemporaryError if any(m in low for m in _TEMPORARY_MARKERS) else PermanentError


def parse_key_values(line: str) -> dict[str, str]:
    """``A=1 B=x y=2`` -> dict; a value runs until the next `` Key=`` (values may hold spaces)."""
    out: dict[str, str] = {}
    key: str | None = None
    for token in line.strip().split(" "):
        if "=" in token and token.split("=", 1)[0].replace("_", "").isalnum():
            key, value = token.split("=", 1)
            out[key] = value
        elif key is not None and token:
            out[key] = f"{out[key]} {token}"
    return out


def squeue_shaped(record: Mapping[str, Any]) -> dict[str, Any]:
    """A ``sacct --json`` job in the field names of ``squeue --json`` that the backend reads: its
    state, its comment (kept by accounting with ``AccountingStoreFlags=job_comment``) and its GPUs
    (``AccountingStorageTRES=gres/gpu``)."""
    state = record.get("state") or {}
    comment = record.get("comment")
    requested = (record.get("tres") or {}).get("requested") or []
    gpus = sum(
        int(t.get("count") or 0) for t in requested if t.get("type") == "gres" and t.get("name") == "gpu"
    )
    return {
        **record,
        "job_state": state.get("current", "") if isinstance(state, Mapping) else str(state),
        "state_reason": state.get("reason", "") if isinstance(state, Mapping) else "",
        "comment": comment.get("job", "") if isinstance(comment, Mapping) else comment,
        "tres_per_job": f"gres:gpu:{gpus}" if gpus else "",
    }


class SlurmCli:
    """Runs Slurm commands; ``env`` may carry ``SLURM_CONF`` to address a specific cluster."""

    def __init__(
        self, env: Mapping[str, str] | None = None, timeout_s: float = 20.0, bin_dir: str = ""
    ) -> None:
        self.env = {**os.environ, **(env or {})}
        self.timeout_s = timeout_s
        self.bin_dir = bin_dir

    def _run(self, argv: Sequence[str]) -> str:
        command = [os.path.join(self.bin_dir, argv[0]) if self.bin_dir else argv[0], *argv[1:]]
        try:
            proc = subprocess.run(
                command, env=self.env, capture_output=True, text=True, timeout=self.timeout_s
            )
        except subprocess.TimeoutExpired as exc:
            raise TemporaryError(f"{shlex.join(command)}: timed out after {self.timeout_s} s") from exc
        except FileNotFoundError as exc:
            raise PermanentError(f"{command[0]}: not found (is Slurm installed?)") from exc
        if proc.returncode != 0:
            message = (proc.stderr or proc.stdout).strip()
            raise classify(message)(f"{shlex.join(command)}: {message}")
        return proc.stdout

    def _json(self, argv: Sequence[str], key: str) -> list[dict[str, Any]]:
        text = self._run(argv)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TemporaryError(f"{argv[0]} --json: unreadable output ({exc})") from exc
        errors = data.get("errors") or []
        if errors:
            raise TemporaryError(f"{argv[0]} --json: {errors}")
        return list(data.get(key) or [])

    # -- reads -----------------------------------------------------------------------------

    def jobs(self) -> list[dict[str, Any]]:
        return self._json(["squeue", "--all", "--json"], "jobs")

    def nodes(self) -> list[dict[str, Any]]:
        return self._json(["sinfo", "--json"], "nodes")

    def accounted_jobs(self, job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Jobs that left squeue, from accounting (``sacct --json -j``), in squeue's field names;
        empty when the cluster keeps no accounting (``AccountingStorageType=accounting_storage/none``)."""
        if not job_ids:
            return []
        try:
            records = self._json(["sacct", "--json", "-j", ",".join(job_ids)], "jobs")
        except PermanentError as exc:
            if "accounting storage is disabled" in str(exc).lower():
                return []
            raise
        return [squeue_shaped(r) for r in records]

    def reservations(self) -> list[dict[str, str]]:
        text = self._run(["scontrol", "-o", "show", "reservation"])
        if "No reservations in the system" in text:
            return []
        return [parse_key_values(line) for line in text.splitlines() if line.startswith("ReservationName=")]

    # -- job changes -----------------------------------------------------------------------

    def update_job(self, job_id: str, fields: Mapping[str, str]) -> None:
        self._run(["scontrol", "update", f"JobId={job_id}", *(f"{k}={v}" for k, v in fields.items())])

    def hold(self, job_id: str) -> None:
        self._run(["scontrol", "hold", job_id])

    def release(self, job_id: str) -> None:
        self._run(["scontrol", "release", job_id])

    def resume(self, job_id: str) -> None:
        self._run(["scontrol", "resume", job_id])

    def signal(self, job_id: str, signal: str) -> None:
        self._run(["scancel", "--full", f"--signal={signal}", job_id])

    def requeue_hold(self, job_id: str) -> None:
        self._run(["scontrol", "requeuehold", job_id])

    # -- reservation changes ---------------------------------------------------------------

    def create_reservation(self, fields: Mapping[str, str]) -> None:
        self._run(["scontrol", "create", "reservation", *(f"{k}={v}" for k, v in fields.items())])

    def update_reservation(self, name: str, fields: Mapping[str, str]) -> None:
        self._run(["scontrol", "update", f"ReservationName={name}", *(f"{k}={v}" for k, v in fields.items())])

    def delete_reservation(self, name: str) -> None:
        self._run(["scontrol", "delete", f"ReservationName={name}"])
