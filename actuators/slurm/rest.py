"""Slurm through slurmrestd (OpenAPI v0.0.38, Slurm 22.05), with the CLI for what it lacks.

The API version is negotiated: at the first request the client reads the daemon's ``/openapi``
document, takes the newest version it offers among those this client reads (``SUPPORTED``), and
fails permanently, naming what the daemon offers, when there is none (a daemon started with only
``-s openapi/v0.0.37``, or a newer Slurm whose data shapes differ).

Place in the loop: the transport under ``SlurmBackend`` when a slurmrestd URL and a JWT are
configured. Reads (jobs, nodes, reservations) and job updates (hold, release, partition, begin
time, comment, excluded nodes) and signals go through REST; v0.0.38 has no requeue and no
reservation writes, so those go through ``SlurmCli`` (the actuator host then needs the Slurm client
tools and ``slurm.conf``). Jobs and nodes come back in the same JSON as ``squeue/sinfo --json``;
reservations are converted to the CLI's field names so the backend reads one format.

Authentication: headers ``X-SLURM-USER-NAME`` and ``X-SLURM-USER-TOKEN`` (a token from
``scontrol token username=<user>``). The token's user must be allowed to change the jobs: their
owner, or a Slurm operator/administrator.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from actuators.base import PermanentError, TemporaryError
from actuators.slurm.cli import SlurmCli, classify

SUPPORTED = ("v0.0.38",)
"""OpenAPI versions whose job, node and reservation records this client reads, oldest first."""
_VERSION_IN_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")
# scontrol field names (what the backend writes) -> REST job_properties names.
_FIELD_NAMES = {
    "AdminComment": "comment",
    "Comment": "comment",
    "Partition": "partition",
    "Priority": "priority",
    "Nice": "nice",
    # Not in the v0.0.38 schema document, but 22.05's job parser takes it (tried against slurmrestd
    # 22.05.8: it sets and, given "", clears the job's ExcNodeList).
    "ExcNodeList": "exclude_nodes",
}


def _local_time(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).astimezone().replace(tzinfo=None).isoformat(timespec="seconds")


class SlurmRest:
    def __init__(
        self, url: str, user: str, token: str, *, cli: SlurmCli | None = None, timeout_s: float = 10.0
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"slurmrestd url: expected http(s)://host:port, got {url!r}")
        if not token:
            raise ValueError("slurmrestd token: empty (set it from `scontrol token username=<user>`)")
        self.url = url.rstrip("/")
        self.user = user
        self.token = token
        self.cli = cli or SlurmCli()
        self.timeout_s = timeout_s
        self._api: str | None = None

    @property
    def api(self) -> str:
        """``/slurm/<version>``: the newest version both the daemon and this client speak."""
        if self._api is None:
            offered = self.offered_versions()
            usable = [v for v in SUPPORTED if v in offered]
            if not usable:
                raise PermanentError(
                    f"slurmrestd at {self.url} offers OpenAPI {', '.join(sorted(offered)) or 'nothing'}; "
                    f"ebbtide reads {', '.join(SUPPORTED)} (start slurmrestd with -s openapi/{SUPPORTED[-1]})"
                )
            self._api = f"/slurm/{usable[-1]}"
        return self._api

    def offered_versions(self) -> set[str]:
        """The ``/slurm/<version>`` APIs the daemon's ``/openapi`` document lists."""
        document = self._call("GET", f"{self.url}/openapi", None, "slurmrestd GET /openapi")
        return {m.group(1) for path in document.get("paths") or {} if (m := _VERSION_IN_PATH.match(path))}

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self._call(method, f"{self.url}{self.api}{path}", body, f"slurmrestd {method} {path}")

    def _call(self, method: str, url: str, body: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
        request = urllib.request.Request(
            url,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={
                "X-SLURM-USER-NAME": self.user,
                "X-SLURM-USER-TOKEN": self.token,
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                data = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")[:300]
            kind = TemporaryError if exc.code >= 500 or exc.code == 429 else classify(text)
            raise kind(f"{what}: HTTP {exc.code} {text}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise TemporaryError(f"{what}: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise TemporaryError(f"{what}: unreadable reply ({exc})") from exc
        errors = data.get("errors") or []
        if errors:
            message = "; ".join(str(e.get("error") or e.get("description") or e) for e in errors)
            raise classify(message)(f"{what}: {message}")
        return dict(data)

    # -- reads -----------------------------------------------------------------------------

    def jobs(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/jobs").get("jobs") or [])

    def nodes(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/nodes").get("nodes") or [])

    def reservations(self) -> list[dict[str, str]]:
        out = []
        for resv in self._request("GET", "/reservations").get("reservations") or []:
            out.append(
                {
                    "ReservationName": str(resv.get("name", "")),
                    "NodeCnt": str(resv.get("node_count", 0)),
                    "PartitionName": str(resv.get("partition") or ""),
                    "StartTime": _local_time(int(resv.get("start_time") or 0)),
                    "EndTime": _local_time(int(resv.get("end_time") or 0)),
                    "Nodes": str(resv.get("node_list") or ""),
                    "Flags": ",".join(str(f) for f in resv.get("flags") or []),
                }
            )
        return out

    # -- job changes -----------------------------------------------------------------------

    def update_job(self, job_id: str, fields: Mapping[str, str]) -> None:
        body: dict[str, Any] = {}
        for key, value in fields.items():
            if key == "StartTime":
                body["begin_time"] = value  # Slurm's time syntax: "now", "now+60", an ISO time
            elif key in _FIELD_NAMES:
                body[_FIELD_NAMES[key]] = int(value) if key in {"Priority", "Nice"} else value
            else:
                raise PermanentError(f"slurmrestd: job field {key!r} is not supported by {self.api}")
        self._request("POST", f"/job/{job_id}", body)

    def hold(self, job_id: str) -> None:
        self._request("POST", f"/job/{job_id}", {"hold": True})

    def release(self, job_id: str) -> None:
        self._request("POST", f"/job/{job_id}", {"hold": False})

    def resume(self, job_id: str) -> None:
        self.cli.resume(job_id)

    def signal(self, job_id: str, signal: str) -> None:
        self._request("DELETE", f"/job/{job_id}?signal={signal}")

    def requeue_hold(self, job_id: str) -> None:
        self.cli.requeue_hold(job_id)

    # -- reservation changes (not in v0.0.38: the CLI) ------------------------------------

    def create_reservation(self, fields: Mapping[str, str]) -> None:
        self.cli.create_reservation(fields)

    def update_reservation(self, name: str, fields: Mapping[str, str]) -> None:
        self.cli.update_reservation(name, fields)

    def delete_reservation(self, name: str) -> None:
        self.cli.delete_reservation(name)
