"""House rules that tools check: layers (import-linter, contracts in pyproject.toml), ruff's lint and
format, mypy on every package (strict on the pure parts), and a docstring at the top of every module."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "schemas", "loop", "streams", "forecaster", "optimizer", "actuators", "simulator", "ebbtide", "bench"
)  # fmt: skip


def test_import_contracts_kept() -> None:
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    result = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" in result.stdout and "0 broken" in result.stdout
    assert "the loop's layers KEPT" in result.stdout  # the whole order is checked, not only bans


def test_every_module_has_a_docstring() -> None:
    missing = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text().lstrip()
            if not text.startswith(('"""', "'''", 'r"""')):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"modules without a docstring saying their place in the loop: {missing}"


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).with_name(name))


def test_ruff_clean() -> None:
    command = [_tool("ruff"), "check", "."]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_formatted() -> None:
    command = [_tool("ruff"), "format", "--check", "."]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_package_type_checks_and_the_pure_parts_strictly() -> None:
    """mypy over every package; pyproject.toml's overrides make schemas, loop, forecaster and
    optimizer strict."""
    result = subprocess.run(
        [_tool("mypy"), *PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
