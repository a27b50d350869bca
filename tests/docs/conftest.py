"""The documentation site, built once per test session into a temporary directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build_site(out: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` into `out`, as CI runs it: a broken link, anchor or docstring fails."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    done = build_site(out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out
