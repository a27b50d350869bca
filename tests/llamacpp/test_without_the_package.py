"""Where llama-cpp-python is missing (or cannot import), `--model llamacpp` is untested with the
reason, never conforming; runs that name no model do not test it."""

from __future__ import annotations

import os
from pathlib import Path

from tests.meta.suite_runs import run_suite


def test_a_missing_package_leaves_llamacpp_untested_with_the_reason(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake = tmp_path / "site" / "llama_cpp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no llama.cpp library (this test stands in for it)')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")]))
    report = run_suite("llamacpp", tmp_path / "reports", "-k", "test_agreement or test_shapes")
    (verdict,) = report.verdicts()
    assert verdict.verdict == "untested"
    assert "llama-cpp-python is not installed here" in verdict.reason
    assert "pip install 'lm-verifier[llamacpp]'" in verdict.reason
