"""``ebbtide forecast backtest``: the forecaster's rolling-origin backtest over a trace CSV.

Reads a CSV (a time and a value column), puts it on a regular grid (forecaster.clean), runs
forecaster.backtest (one origin a day, 24 hours ahead, no future in any fit or calibration), prints
per model, on one origin set (the origins every model forecast from), the MAE relative to seasonal
naive, the MAE by hours ahead, the weighted interval score, pinball loss and band coverage, plots
the automatic choice's bands against the actual series (PNG: dates in UTC on x, the values in
--unit on y) and writes the scores as JSON: the automatic row under the name ``auto`` with the
model it selected at each origin, and each candidate's.
Heavy imports happen inside the command so ``ebbtide --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from simulator.demand import traces_dir

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from forecaster.backtest import BacktestResult
    from forecaster.clean import CleanSeries

app = typer.Typer(no_args_is_help=True, help="demand forecaster: backtests")

GENTD26_HOURLY = "alibaba_gentd26_requests_per_hour.csv"


@app.callback()
def _group() -> None:
    """Demand forecaster commands."""


def load_series(
    path: Path, time_column: str, value_column: str, scale: float, where: str | None, time_unit_s: float
) -> tuple[list[float], list[float]]:
    """(times in s, values * scale) from a CSV; ``where`` is COLUMN=VALUE to keep matching rows."""
    import pandas as pd

    frame = pd.read_csv(path)
    for column, label in ((time_column, "--time-column"), (value_column, "--value-column")):
        if column not in frame.columns:
            raise typer.BadParameter(f"{label}: no column {column!r} in {path} (has {list(frame.columns)})")
    if where:
        column, _, wanted = where.partition("=")
        if column not in frame.columns:
            raise typer.BadParameter(f"--where: no column {column!r} in {path}")
        frame = frame[frame[column].astype(str) == wanted]
    raw_times = frame[time_column]
    if pd.api.types.is_numeric_dtype(raw_times):
        times = raw_times.astype(float) * time_unit_s
    else:
        parsed = pd.to_datetime(raw_times, errors="coerce", utc=True)
        times = (parsed - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    values = pd.to_numeric(frame[value_column], errors="coerce") * scale
    return times.tolist(), values.tolist()


_EPOCH_FLOOR_S = 631_152_000.0
"""1990-01-01 UTC: a series starting before it has relative times (a numeric column), not dates."""


def _plot_axis(result: BacktestResult, start_s: float) -> tuple[Any, str]:
    """The x values (UTC datetimes, or hours from start for relative times) and their label."""
    import numpy as np

    offsets_s = np.arange(result.values.size) * result.step_s
    if start_s < _EPOCH_FLOOR_S:
        return (start_s + offsets_s) / 3600, "hours from the series' start (relative times, no dates)"
    stamps = (np.float64(start_s) + offsets_s).astype("int64").astype("datetime64[s]")
    return stamps, "date (UTC)"


def _plot(result: object, png: Path, title: str, *, start_s: float, unit: str) -> None:
    """The actual series against the selected model's p50 and 80%/90% bands from every origin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    from forecaster.backtest import AUTO, BacktestResult

    assert isinstance(result, BacktestResult)
    x, xlabel = _plot_axis(result, start_s)
    fig, ax = plt.subplots(figsize=(14, 4.8), layout="constrained")
    first = min(result.forecasts[AUTO], default=0)
    ax.axvspan(x[0], x[first], color="grey", alpha=0.12, lw=0, label="history before the first origin")
    ax.plot(x, result.values, color="black", lw=0.8, label="actual")
    for i, origin in enumerate(sorted(result.forecasts[AUTO])):
        curves = result.forecasts[AUTO][origin]
        span = x[origin : origin + result.horizon_steps]
        labels = ("90% band", "80% band", "p50 forecast", "forecast origin") if i == 0 else (None,) * 4
        ax.fill_between(span, curves["p05"], curves["p95"], fc="tab:blue", alpha=0.2, lw=0, label=labels[0])
        ax.fill_between(span, curves["p10"], curves["p90"], fc="tab:blue", alpha=0.3, lw=0, label=labels[1])
        ax.plot(span, curves["p50"], color="tab:blue", lw=1.0, label=labels[2])
        ax.axvline(x[origin], color="grey", lw=0.4, ls=":", label=labels[3])
    if xlabel.startswith("date"):  # a tick a day or every few days, with the weekday (weekly seasonality)
        days = result.values.size * result.step_s / 86_400
        every = max(1, round(days / 14))
        ax.xaxis.set_major_locator(mdates.DayLocator(interval=every))  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%a\n%d %b"))  # type: ignore[no-untyped-call]
        xlabel = f"date (UTC), {str(x[0])[:10]} to {str(x[-1])[:10]}"
    ax.set_xlim(x[0], x[-1])
    ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.grid(alpha=0.25)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize="small")
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)


@app.command()
def backtest(
    file: Annotated[
        Path | None, typer.Argument(help="trace CSV (default: the GenTD26 hourly series)")
    ] = None,
    time_column: Annotated[str, typer.Option(help="column with the time")] = "hour",
    value_column: Annotated[str, typer.Option(help="column with the value")] = "gpu_exec_seconds",
    scale: Annotated[float, typer.Option(help="multiply values by this (1/3600: GPU-s per hour -> GPUs)")] = (
        1 / 3600
    ),
    unit: Annotated[
        str, typer.Option(help="unit of the values after --scale, on the plot's y axis and title")
    ] = "busy GPUs",
    where: Annotated[str | None, typer.Option(help="keep rows where COLUMN=VALUE")] = None,
    time_unit_s: Annotated[float, typer.Option(help="seconds per unit of a numeric time column")] = 1.0,
    min_history_days: Annotated[float, typer.Option(help="history before the first origin")] = 14.0,
    max_origins: Annotated[int, typer.Option(help="inner-backtest origins per fit")] = 14,
    window_days: Annotated[
        float | None,
        typer.Option(
            min=1.0,
            help="forecast from only the last N days at each origin, as a state service keeping N days "
            "would (default: the whole past; the state service keeps 21)",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="series name in the JSON (default: file stem)")] = None,
    png: Annotated[Path, typer.Option(help="plot of the selected model's bands")] = Path(
        "forecast_backtest.png"
    ),
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the selected model's scores")
    ] = None,
) -> None:
    """Rolling-origin backtest: one origin a day, 24-hour-ahead forecasts, per-model scores."""
    from rich.console import Console

    console = Console()
    if console.width < 150:
        console = Console(width=150)  # the score table needs the room; never truncate model names
    path = file or traces_dir() / GENTD26_HOURLY
    if not path.is_file():
        raise typer.BadParameter(f"FILE: {path} does not exist")
    series = _clean_or_exit(load_series(path, time_column, value_column, scale, where, time_unit_s), console)
    series_name = name or path.stem
    result = _run_backtest(series, series_name, min_history_days, max_origins, window_days, console)
    console.print(_score_table(result, series_name, series.step_s))
    summary = _timings(result)
    console.print(f"selected per origin: {', '.join(result.selected)}")
    console.print(
        f"fit (select + calibrate) median {summary['fit_ms_p50']:.0f} ms; "
        f"step forecast p99 {summary['forecast_ms_p99']:.1f} ms"
    )
    title = f"{series_name} ({unit}): selected model's p50 and 80%/90% bands, 24 h ahead from daily origins"
    _plot(result, png, title, start_s=series.start_s, unit=unit)
    console.print(f"wrote {png}")
    if json_path is not None:
        _write_json(json_path, series_name, result, summary)
        console.print(f"wrote {json_path}")


def _clean_or_exit(raw: tuple[list[float], list[float]], console: Console) -> CleanSeries:
    from forecaster.clean import HistoryError, clean_series

    try:
        series = clean_series(*raw)
    except HistoryError as exc:
        console.print(f"[red]rejected: {exc}[/red]")
        raise typer.Exit(2) from exc
    for note in series.notes:
        console.print(f"[yellow]cleaned: {note}[/yellow]")
    return series


def _run_backtest(
    series: CleanSeries,
    series_name: str,
    min_history_days: float,
    max_origins: int,
    window_days: float | None,
    console: Console,
) -> BacktestResult:
    import time

    from rich.progress import Progress

    from forecaster.backtest import rolling_origin_backtest

    try:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"backtest {series_name}", total=None)
            result = rolling_origin_backtest(
                series.values,
                step_s=series.step_s,
                min_history_days=min_history_days,
                max_origins=max_origins,
                window_days=window_days,
                timer=time.perf_counter,
                on_origin=lambda done, total: progress.update(task, completed=done, total=total),
            )
    except ValueError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    if not result.origins:
        console.print(
            f"[red]{series_name}: {series.values.size} steps of {series.step_s} s leave no 24-hour origin "
            f"after {min_history_days} days of history[/red]"
        )
        raise typer.Exit(2)
    return result


def _horizon_groups(result: BacktestResult) -> list[tuple[str, slice]]:
    """Column label and step slice for the hours ahead 1-6, 7-12 and 13-24."""
    per_hour = max(3600 // result.step_s, 1)
    return [
        (f"MAE {lo}-{hi} h", slice((lo - 1) * per_hour, hi * per_hour))
        for lo, hi in ((1, 6), (7, 12), (13, 24))
    ]


def _score_table(result: BacktestResult, series_name: str, step_s: int) -> Table:
    import numpy as np
    from rich.table import Table

    common = result.common_origins()
    left_out = len(result.origins) - len(common)
    title = f"{series_name}: {len(common)} origins for every model, step {step_s} s, 24 h ahead"
    if left_out:
        title += f" ({left_out} earlier origins left out: a model needs a longer history)"
    if result.window_days is not None:
        title += f"; each forecast from the last {result.window_days:g} days only"
    table = Table(title=title)
    groups = _horizon_groups(result)
    columns = ["model", "origins", "rel MAE", "MAE", *(g[0] for g in groups), "WIS", "pinball"]
    for column in (*columns, "cover 80%", "cover 90%"):
        table.add_column(column, justify="left" if column == "model" else "right", no_wrap=True)
    for model in result.model_names():
        score = result.score(model)
        if score is None:
            continue
        by_horizon = np.asarray(score.mae_by_horizon)
        table.add_row(
            model,
            str(score.origins),
            f"{score.rel_mae:.3f}",
            f"{score.mae:.4f}",
            *(f"{float(by_horizon[part].mean()):.4f}" for _, part in groups),
            f"{score.wis:.4f}",
            f"{score.pinball:.4f}",
            f"{score.coverage_80:.3f}",
            f"{score.coverage_90:.3f}",
        )
    return table


def _timings(result: BacktestResult) -> dict[str, float]:
    import numpy as np

    return {
        "fit_ms_p50": float(np.median(result.fit_ms)),
        "forecast_ms_p99": float(np.quantile(result.forecast_ms, 0.99)),
    }


def _write_json(json_path: Path, series_name: str, result: BacktestResult, timings: dict[str, float]) -> None:
    import json

    from forecaster.backtest import AUTO

    def entry(model: str) -> dict[str, object]:
        score = result.score(model)
        assert score is not None
        return {
            "rel_mae": score.rel_mae,
            "mae": score.mae,
            "mae_by_horizon": score.mae_by_horizon,
            "wis": score.wis,
            "pinball": score.pinball,
            "coverage_80": score.coverage_80,
            "coverage_90": score.coverage_90,
        }

    common = result.common_origins()
    scores = {
        "model": AUTO,
        "origins": len(common),
        "window_days": result.window_days,
        **entry(AUTO),
        "selected_per_origin": [
            m for o, m in zip(result.origins, result.selected, strict=True) if o in common
        ],
        "candidates": {
            m: entry(m) for m in result.model_names() if m != AUTO and result.score(m) is not None
        },
        "forecast_ms_p99": timings["forecast_ms_p99"],
        "fit_ms_p50": timings["fit_ms_p50"],
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"series": {series_name: scores}}, indent=2) + "\n")
