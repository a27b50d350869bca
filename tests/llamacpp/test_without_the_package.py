"""Where llama-cpp-python is missing (or cannot import), `--model llamacpp` is untested with the
reason, never conforming; runs that name no model do not test it. Also without the gguf package (the
extra's other half), which the probes once imported and crashed on before the suite ran."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.meta.suite_runs import run_suite


@pytest.mark.parametrize("missing", [("llama_cpp",), ("llama_cpp", "gguf")], ids="+".join)
def test_a_missing_package_leaves_llamacpp_untested_with_the_reason(tmp_path: Path, monkeypatch, missing) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "site"
    for package in missing:
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text(f"raise ImportError('no {package} (this test stands in for it)')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    report = run_suite("llamacpp", tmp_path / "reports", "-k", "test_agreement or test_shapes")
    (verdict,) = report.verdicts()
    assert verdict.verdict == "untested"
    assert "llama-cpp-python is not installed here" in verdict.reason
    assert "pip install 'lm-verifier[llamacpp]'" in verdict.reason
