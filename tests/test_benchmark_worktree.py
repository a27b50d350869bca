"""The benchmarks' `--before`: the code at another revision runs with its own suite."""

from __future__ import annotations

from pathlib import Path

from benchmarks._machine import as_installed

PYPROJECT = """\
[tool.setuptools.package-dir]
"verifier.properties" = "properties"
"verifier.fixtures" = "fixtures"
"""


def test_a_worktree_imports_its_own_suite_and_fixtures(tmp_path: Path) -> None:
    # Without the links, `verifier.properties` came from this checkout's editable install: the "before"
    # check ran the new suite on the old package.
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    for folder in ("verifier", "properties", "fixtures"):
        (tmp_path / folder).mkdir()
    as_installed(tmp_path)
    as_installed(tmp_path)  # a second time changes nothing
    assert (tmp_path / "verifier" / "properties").resolve() == (tmp_path / "properties").resolve()
    assert (tmp_path / "verifier" / "fixtures").resolve() == (tmp_path / "fixtures").resolve()
