"""``ebbtide demo`` end to end on the embedded broker (slow: a broker, the simulator and the services)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_demo_runs_its_steps_compares_with_fifo_and_writes_plots(tmp_path: Path):
    out = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "ebbtide.cli", "demo", "--steps", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    screen = result.stdout
    for step in (1, 2, 3):
        assert f"step {step}/3" in screen
    assert "fifo" in screen and "(over Kafka)" in screen and "SLO short" in screen
    pngs = sorted(out.glob("demo_*.png"))
    assert pngs and all(p.stat().st_size > 10_000 for p in pngs)
