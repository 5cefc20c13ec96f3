"""``ebbtide job submit`` and ``ebbtide job cancel``: any other system hands ebbtide a batch job.

Place in the loop: an entry point. The command builds a JobEvent (``submitted`` with its JobSpec,
or ``cancelled``), validates it against the contract (schemas/jobs.py) before anything is
produced, and produces it to the job-events topic keyed by job id, exiting 0 only once the broker
acknowledged it (streams/submit.py). Bad input exits 2 naming the field; an unreachable broker 3.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from ebbtide.cli_inspect import BootstrapOption, ClusterOption, _where
from ebbtide.cli_run import ConfigOption
from schemas.codec import describe, encode
from schemas.jobs import JobEvent, JobEventKind, JobSpec

app = typer.Typer(no_args_is_help=True, help="Hand ebbtide a batch job: submit one, or cancel one.")

EXIT_BAD_INPUT = 2
EXIT_NOT_DELIVERED = 3

DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="validate and print the event as JSON; produce nothing")
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", min=1.0, max=600.0, help="seconds to wait for the acknowledgement")
]


class BadInput(ValueError):
    """Input that does not make a valid event; the message names the field."""


def _json_default(value: Any) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def read_spec_file(path: Path) -> dict[str, Any]:
    """A JobSpec mapping from a YAML or JSON file (JSON is YAML)."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise BadInput(f"--file: {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise BadInput(f"--file: {path} is not YAML or JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput(f"--file: {path} must hold a mapping of JobSpec fields")
    return data


def build_spec(from_file: dict[str, Any], flags: dict[str, Any]) -> JobSpec:
    """The JobSpec of the file's fields with the given flags over them, validated (JSON rules: times
    as ISO 8601 strings with a UTC offset)."""
    data = {**from_file, **{k: v for k, v in flags.items() if v is not None}}
    try:
        text = json.dumps(data, default=_json_default)
    except TypeError as exc:
        raise BadInput(f"job spec: {exc}") from None
    try:
        return JobSpec.model_validate_json(text)
    except ValidationError as exc:
        raise BadInput(f"job spec: {describe(exc)}") from None


def job_event(cluster: str, job_id: str, kind: JobEventKind, **fields: Any) -> JobEvent:
    """The validated JobEvent, stamped now; a problem names its field."""
    try:
        return JobEvent(cluster=cluster, job_id=job_id, kind=kind, time=datetime.now(UTC), **fields)
    except ValidationError as exc:
        raise BadInput(f"job event: {describe(exc)}") from None


def _gpu_seconds(gpu_s: float | None, gpu_hours: float | None) -> float | None:
    if gpu_s is not None and gpu_hours is not None:
        raise BadInput("estimated_gpu_s: give --estimated-gpu-s or --estimated-gpu-hours, not both")
    return gpu_hours * 3600.0 if gpu_hours is not None else gpu_s


def _publish(
    event: JobEvent, bootstrap: str | None, config: Path | None, dry_run: bool, timeout_s: float
) -> None:
    """Print the event (dry run) or produce it and say where it landed."""
    if dry_run:
        typer.echo(encode(event).decode())
        return
    from schemas.topics import JOB_EVENTS
    from streams.submit import DeliveryError, produce_confirmed

    settings, servers, _ = _where(config, bootstrap, event.cluster)
    try:
        done = produce_confirmed(
            servers, JOB_EVENTS, event, prefix=settings.kafka.topic_prefix,
            create_topic=settings.kafka.create_topics, durability=settings.kafka.durability(),
            timeout_s=timeout_s,
        )  # fmt: skip
    except DeliveryError as exc:
        typer.echo(f"error: job {event.job_id}: not delivered: {exc}", err=True)
        raise typer.Exit(EXIT_NOT_DELIVERED) from None
    typer.echo(f"{event.kind.value} job {event.job_id}: {done.topic} partition {done.partition} "
               f"offset {done.offset}")  # fmt: skip


def _cluster(config: Path | None, cluster: str | None) -> str:
    if cluster is not None:
        return cluster
    _settings, _, name = _where(config, None, None)
    return name


def _bad_input(exc: BadInput) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def _opt(flag: str, text: str) -> Any:
    return typer.Option(flag, help=text, show_default=False)


FileOpt = Annotated[Path | None, _opt("--file", "YAML or JSON file of JobSpec fields; flags override it")]
JobIdOpt = Annotated[str | None, _opt("--job-id", "job_id")]
GpusOpt = Annotated[int | None, _opt("--gpus", "gpus: the gang size (all of them or none)")]
PoolOpt = Annotated[list[str] | None, _opt("--pool", "allowed_pools (repeat; none: any pool)")]
GpuTypeOpt = Annotated[list[str] | None, _opt("--gpu-type", "allowed_gpu_types (repeat; none: any)")]
ClassOpt = Annotated[str | None, _opt("--priority-class", "priority_class (default standard)")]
WeightOpt = Annotated[float | None, _opt("--priority-weight", "priority_weight (default 1.0)")]
GpuSOpt = Annotated[float | None, _opt("--estimated-gpu-s", "estimated_gpu_s: GPU-seconds of work")]
GpuHOpt = Annotated[float | None, _opt("--estimated-gpu-hours", "estimated_gpu_s given in GPU-hours")]
DeadlineOpt = Annotated[str | None, _opt("--deadline", "deadline, ISO 8601 UTC (2026-12-01T18:00:00Z)")]
PreemptOpt = Annotated[
    bool | None, typer.Option("--preemptible/--not-preemptible", help="preemptible (default yes)",
                              show_default=False)
]  # fmt: skip
CheckpointOpt = Annotated[float | None, _opt("--checkpoint-interval-s", "checkpoint_interval_s")]
RestartOpt = Annotated[float | None, _opt("--restart-cost-s", "restart_cost_s (default 0)")]
TeamOpt = Annotated[str | None, _opt("--team", "team (default default)")]
BandwidthOpt = Annotated[str | None, _opt("--bandwidth-class", "bandwidth_class: low, medium or high")]


@app.command("submit")
def submit(
    file: FileOpt = None, job_id: JobIdOpt = None, gpus: GpusOpt = None, pool: PoolOpt = None,
    gpu_type: GpuTypeOpt = None, priority_class: ClassOpt = None, priority_weight: WeightOpt = None,
    estimated_gpu_s: GpuSOpt = None, estimated_gpu_hours: GpuHOpt = None, deadline: DeadlineOpt = None,
    preemptible: PreemptOpt = None, checkpoint_interval_s: CheckpointOpt = None,
    restart_cost_s: RestartOpt = None, team: TeamOpt = None, bandwidth_class: BandwidthOpt = None,
    cluster: ClusterOption = None, bootstrap: BootstrapOption = None, config: ConfigOption = None,
    dry_run: DryRunOption = False, timeout: TimeoutOption = 30.0,
) -> None:  # fmt: skip
    """Submit a batch job: a ``submitted`` JobEvent with its JobSpec, validated, then produced."""
    flags = {
        "job_id": job_id, "gpus": gpus, "allowed_pools": pool or None,
        "allowed_gpu_types": gpu_type or None, "priority_class": priority_class,
        "priority_weight": priority_weight, "deadline": deadline, "preemptible": preemptible,
        "checkpoint_interval_s": checkpoint_interval_s, "restart_cost_s": restart_cost_s,
        "team": team, "bandwidth_class": bandwidth_class,
    }  # fmt: skip
    try:
        flags["estimated_gpu_s"] = _gpu_seconds(estimated_gpu_s, estimated_gpu_hours)
        spec = build_spec(read_spec_file(file) if file is not None else {}, flags)
        event = job_event(_cluster(config, cluster), spec.job_id, JobEventKind.SUBMITTED, spec=spec)
    except BadInput as exc:
        raise _bad_input(exc) from None
    _publish(event, bootstrap, config, dry_run, timeout)


@app.command("cancel")
def cancel(
    job: Annotated[str, typer.Argument(help="job id")],
    message: Annotated[str | None, _opt("--message", "why (kept on the event)")] = None,
    cluster: ClusterOption = None,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
    dry_run: DryRunOption = False,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Cancel a batch job: a ``cancelled`` JobEvent keyed by its id, validated, then produced."""
    try:
        event = job_event(_cluster(config, cluster), job, JobEventKind.CANCELLED, message=message)
    except BadInput as exc:
        raise _bad_input(exc) from None
    _publish(event, bootstrap, config, dry_run, timeout)
