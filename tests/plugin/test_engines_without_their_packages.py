"""Where an engine's package is missing (or cannot import), its built-in model is untested with the reason
and the way to install it, never conforming (that runs naming no model leave these engines out is
tests/plugin/test_selection.py's). Each package is stood in for by one that raises ImportError, first on
PYTHONPATH. llama.cpp also without the gguf package (its extra's other half), which the probes once
imported and crashed on before the suite ran."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.meta.suite_runs import run_suite

SLOW = pytest.mark.slow  # a suite run in a subprocess each: llama.cpp's stays in the default tier

ENGINES = [  # the model, the packages stood in for, what its reason says, its extra
    pytest.param("llamacpp", ("llama_cpp",), "llama-cpp-python is not installed here", "llamacpp", id="llamacpp"),
    pytest.param("llamacpp", ("llama_cpp", "gguf"), "llama-cpp-python is not installed here", "llamacpp",
                 id="llamacpp+gguf"),
    pytest.param("onnxruntime", ("onnxruntime",), "onnxruntime cannot be imported here", "onnxruntime",
                 id="onnxruntime", marks=SLOW),
    pytest.param("litgpt", ("litgpt",), "litgpt cannot be imported here", "litgpt", id="litgpt", marks=SLOW),
    pytest.param("transformer-lens", ("transformer_lens",), "TransformerLens cannot be imported here",
                 "transformer-lens", id="transformer-lens", marks=SLOW),
]  # fmt: skip


@pytest.mark.parametrize(("model", "packages", "reason", "extra"), ENGINES)
def test_a_missing_package_leaves_the_engine_untested_with_the_reason(
    model: str, packages: tuple[str, ...], reason: str, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    for package in packages:
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text(f"raise ImportError('no {package} (this test stands in for it)')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    report = run_suite(model, tmp_path / "reports", "-k", "test_agreement or test_shapes")
    (verdict,) = report.verdicts()
    assert verdict.verdict == "untested"
    assert reason in verdict.reason
    assert f"pip install 'lm-verifier[{extra}]'" in verdict.reason
