"""llama.cpp's smollm3 against `transformers` in float64, as test_families.py measures the other families:
SmolLM3-3B's layout (RoPE off on every fourth layer) agrees; what its architecture cannot hold is refused
with the reason, and each refusal is measured here with it lifted.

Measured with llama-cpp-python 0.3.36 (printed with -s): its smollm3 turns RoPE off on layers 3, 7, ...
whatever the file says (`n_no_rope_layer_step` is 4 in its loader; no key holds it), attends to every key
(no window), and refuses a file with attention biases ('wrong number of tensors': it reads no o bias).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'lm-verifier[gguf]')")
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'lm-verifier[llamacpp]')")

from tests import needs
from tests.formats.families import FAMILY_EXAMPLES as F
from tests.llamacpp.test_families import TOKENS, bound, hf_logits, run
from verifier.formats import gguf as gguf_format
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights
from verifier.plugin.adapters import llamacpp
from verifier.plugin.interface import Unsupported
from verifier.properties.oracle import Oracle

pytestmark = needs.transformers

SMOLLM3 = F["smollm3"]  # 4 layers, the last without RoPE


def test_llama_cpp_s_smollm3_agrees_with_transformers() -> None:
    weights, model = run(SMOLLM3)
    expected = hf_logits(SMOLLM3, weights)
    got = model.logits(TOKENS)
    with_rope_everywhere = hf_logits(SMOLLM3.replace(nope_layers=()), weights)
    print(
        f"llama.cpp smollm3: max |error| {np.abs(got - expected).max():.3g} (bound {bound(expected):.3g}); "
        f"the same model with RoPE on every layer is {np.abs(with_rope_everywhere - expected).max():.3g} off"
    )
    assert np.abs(got - expected).max() <= bound(expected)
    assert np.abs(with_rope_everywhere - expected).max() > 100 * bound(expected)  # the NoPE layer mattered
    first, cache = model.decode(TOKENS[:60])
    rest, _ = model.decode(TOKENS[60:], cache)
    assert np.abs(np.concatenate([first, rest]) - expected).max() <= bound(expected)
    oracle = Oracle(SMOLLM3, weights)
    assert oracle.logits(TOKENS).compare(got).ok
    divergence = oracle.localize(model.trace(TOKENS), TOKENS)
    assert divergence.first is None, divergence.describe()


REFUSED = {
    "nope layer 1": (SMOLLM3.replace(nope_layers=(1,)), "every fourth layer"),
    "window": (SMOLLM3.replace(sliding_window=8), "no sliding window"),
    "biases": (SMOLLM3.replace(qkv_bias=True, o_bias=True), "does not load every q/k/v/o bias"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_llama_cpp_s_smollm3_cannot_hold_is_unsupported_with_the_reason(name: str) -> None:
    config, reason = REFUSED[name]
    assert gguf_format.unsupported(config) is not None
    with pytest.raises(Unsupported, match=reason):
        llamacpp.build(config, init_weights(config))


def _lifted(config: ModelConfig, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, np.ndarray, object]:
    monkeypatch.setattr(gguf_format, "unsupported", lambda config: None)
    weights, model = run(config)
    return model.logits(TOKENS), hf_logits(config, weights), weights


def test_without_the_refusal_llama_cpp_turns_rope_off_on_every_fourth_layer_whatever_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = REFUSED["nope layer 1"][0]
    got, expected, weights = _lifted(config, monkeypatch)
    as_its_rule = hf_logits(SMOLLM3, weights)  # type: ignore[arg-type]
    print(
        f"llama.cpp smollm3 with layer 1 without RoPE: {np.abs(got - expected).max():.3g} off; "
        f"{np.abs(got - as_its_rule).max():.3g} off the model with layer 3 without RoPE"
    )
    assert np.abs(got - expected).max() > 100 * bound(expected)
    assert np.abs(got - as_its_rule).max() <= bound(as_its_rule)


def test_without_the_refusal_llama_cpp_s_smollm3_attends_to_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    config = REFUSED["window"][0]
    got, expected, weights = _lifted(config, monkeypatch)
    full = hf_logits(config.replace(sliding_window=None), weights)  # type: ignore[arg-type]
    print(
        f"llama.cpp smollm3 with window 8: {np.abs(got - expected).max():.3g} off; "
        f"{np.abs(got - full).max():.3g} off full causal attention"
    )
    assert np.abs(got - expected).max() > 100 * bound(expected)
    assert np.abs(got - full).max() <= bound(full)


def test_without_the_refusal_llama_cpp_itself_refuses_smollm3_s_biases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_format, "unsupported", lambda config: None)
    config = REFUSED["biases"][0]
    with pytest.raises(RuntimeError, match="wrong number of tensors"):  # its four o_proj biases unread
        llamacpp.build(config, init_weights(config)).logits(TOKENS)
