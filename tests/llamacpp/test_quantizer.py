"""llama.cpp on files quantized by its own quantizer (`llama_model_quantize`, what `llama-quantize`
runs: Q4_K_M, Q5_K_M, Q6_K), judged in the file's class (`precision.file_quantized`): against the
oracle on the weights read back from the file, with the activations entering its products in Q8_K.
The class is the file's own: judged on another file's weights, the same logits fail."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'lm-verifier[gguf]')")
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'lm-verifier[llamacpp]')")

from tests.meta.suite_runs import run_suite
from verifier.formats import load_checkpoint
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights, init_weights
from verifier.plugin.adapters import llamacpp
from verifier.plugin.contract import CheckedModel, build_checked
from verifier.plugin.probes import probe_config
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks
from verifier.properties.oracle import Oracle

BUILDS = {"Q4_K_M": llamacpp.build_q4_k_m, "Q5_K_M": llamacpp.build_q5_k_m, "Q6_K": llamacpp.build_q6_k}


def built(file_type: str, config: ModelConfig, weights: Weights) -> CheckedModel:
    """llama.cpp on `config`'s file quantized to `file_type`, as the suite's checked model."""
    return build_checked(ModelSpec(f"llamacpp-{file_type.lower()}", BUILDS[file_type], "test"), config, weights)


def config_of(kind: str) -> ModelConfig:
    """The probe config of `kind` with rows of 256 (the K types' super-blocks), in llama.cpp's shapes."""
    found = [c for shape in llamacpp.K_SHAPES if (c := probe_config(kind, shape)) is not None]
    return found[0]


@pytest.mark.parametrize(
    ("kind", "file_type"),
    [("llama", "Q4_K_M"), ("gpt2", "Q4_K_M"), ("qwen2_moe", "Q4_K_M"), ("gemma2", "Q5_K_M"), ("phi3", "Q6_K")],
)
def test_a_quantized_file_agrees_with_the_oracle_on_its_dequantized_weights(kind: str, file_type: str) -> None:
    config = config_of(kind)
    weights = init_weights(config, seed=3, scale=0.3)
    model = built(file_type, config, weights)
    tokens = np.arange(config.n_ctx) % config.vocab_size
    with checks.recording("test"):
        ratio = checks.agree(model.logits(tokens), Oracle(config, weights, model.precision).logits(tokens),
                             what="logits", model=model)  # fmt: skip
    print(f"llama.cpp {file_type}, {kind}: error / {model.precision.label} bound {ratio:.3g}")
    assert model.precision.label == file_type.lower()


def test_the_class_is_the_file_s_own_another_file_s_weights_fail() -> None:
    config = config_of("llama")
    weights = init_weights(config, seed=3, scale=0.3)
    q4, q6 = built("Q4_K_M", config, weights), built("Q6_K", config, weights)
    tokens = np.arange(config.n_ctx) % config.vocab_size
    with checks.recording("test"), pytest.raises(checks.PropertyFailure, match=r"exceeds the q6_k tolerance"):
        checks.agree(q4.logits(tokens), Oracle(config, weights, q6.precision).logits(tokens), what="logits", model=q4)


def test_a_quantizer_s_file_reads_back_as_its_config_and_dequantized_weights() -> None:
    # The reader refused Q4_K and Q6_K tensors, and Qwen2-MoE's shared-expert gate, which the quantizer
    # stores as [d_model] (ggml drops a trailing dimension of 1), was "wrong shape".
    config = config_of("qwen2_moe")
    model = llamacpp.build_q4_k_m(config, init_weights(config, seed=3, scale=0.3))
    checkpoint = load_checkpoint(model.model_path)
    assert config.d_expert == config.d_ff  # rows of 256 both: read back as no expert size of its own
    assert checkpoint.config == config.replace(d_expert=None)
    assert any("tensors stored as Q4_K, Q6_K, dequantized" in f for f in checkpoint.findings), checkpoint.findings
    assert checkpoint.weights.keys() == init_weights(config).keys()
    assert model.precision.rounding is not None
    reads = model.precision.rounding.weights  # the class's weights: the same file read back
    assert all(np.array_equal(reads(name, w), w) for name, w in checkpoint.weights.items())


@pytest.mark.slow  # a suite run in a subprocess
def test_the_suite_s_logits_properties_conform_on_a_q4_k_m_file(tmp_path: Path) -> None:
    report = run_suite("llamacpp-q4_k_m@llama", tmp_path, "-k", "logits_agree or decoding_in_chunks")
    (verdict,) = report.verdicts()
    assert verdict.verdict == "conforms", "\n".join(r.detail for r in report.failures)
    assert verdict.precision == "q4_k_m"


def test_each_config_and_weights_is_quantized_once_and_each_model_has_its_own_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every property builds the suite's pinned cases again: the quantizer ran for each build, 250 s of a
    # whole-suite run's 358 s on a Q4_K_M model.
    import llama_cpp

    calls: list[bytes] = []
    quantize = llama_cpp.llama_model_quantize
    monkeypatch.setattr(llama_cpp, "llama_model_quantize", lambda *args: calls.append(args[1]) or quantize(*args))
    fresh = {t: llamacpp.BuiltOnce(functools.partial(llamacpp.quantize, t)) for t in BUILDS}
    monkeypatch.setattr(llamacpp, "_QUANTIZED", fresh, raising=False)  # none kept from the tests before
    config = config_of("llama")
    weights = init_weights(config, seed=3, scale=0.3)
    first, again = llamacpp.build_q4_k_m(config, weights), llamacpp.build_q4_k_m(config, dict(weights))
    assert len(calls) == 1
    assert first.model_path != again.model_path and first.model_path.read_bytes() == again.model_path.read_bytes()
    assert again.precision is first.precision
    tokens = np.arange(config.n_ctx) % config.vocab_size
    np.testing.assert_array_equal(again.logits(tokens), first.logits(tokens))
    del first
    assert again.model_path.exists()  # a model's file is its own: the first one's going removes nothing of it
    other = llamacpp.build_q4_k_m(config, init_weights(config, seed=4, scale=0.3))
    llamacpp.build_q6_k(config, weights)
    assert len(calls) == 3 and other.model_path.read_bytes() != again.model_path.read_bytes()
