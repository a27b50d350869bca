"""Where ctranslate2 is missing (or cannot import), `--model ctranslate2` is untested with the
reason, never conforming."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.meta.suite_runs import run_suite


@pytest.mark.slow  # a suite run in a subprocess
def test_a_missing_package_leaves_ctranslate2_untested_with_the_reason(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "site"
    (site / "ctranslate2").mkdir(parents=True)
    stand_in = "raise ImportError('no ctranslate2 (this test stands in for it)')\n"
    (site / "ctranslate2" / "__init__.py").write_text(stand_in)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    report = run_suite("ctranslate2", tmp_path / "reports", "-k", "test_agreement or test_shapes")
    (verdict,) = report.verdicts()
    assert verdict.verdict == "untested"
    assert "ctranslate2 cannot be imported here" in verdict.reason
    assert "pip install 'lm-verifier[ctranslate2]'" in verdict.reason
