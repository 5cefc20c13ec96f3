"""What a benchmark's figures were made with: key package versions and the git commit.

Written at the top of ``ebbtide bench --json`` so that a figure can be traced to its code and
its dependencies (installed from requirements.lock).
"""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

KEY_PACKAGES = ("ebbtide", "highspy", "pyomo", "numpy", "scipy", "pandas", "statsmodels", "pydantic")


def package_versions(names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (None when it is not installed)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit(where: Path | None = None) -> str | None:
    """HEAD's commit of the checkout holding this code (``-dirty`` when it has changes), or None."""
    cwd = where or Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head
