"""ONNX Runtime on one config of every family with every switch it has turned on
(`tests.formats.families`: RoPE scaling, biases, windows shorter than the context, Gemma 2's caps and
layer pattern, routed and shared experts, partial rotary), against the float64 oracle within
float32's bound: the logits of 100 tokens, and decode in two chunks (past the windows)."""

from __future__ import annotations

import numpy as np
import pytest

from verifier.plugin.adapters import onnxruntime

if onnxruntime.missing() is not None:
    pytest.skip(onnxruntime.missing() or "", allow_module_level=True)

from tests.formats.families import FAMILY_EXAMPLES
from verifier.model.weights import init_weights
from verifier.properties.oracle import Oracle

TOKENS = np.random.default_rng(0).integers(0, 96, size=100)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAMILY_EXAMPLES))
def test_every_family_s_logits_and_decode_agree_with_the_oracle(name: str) -> None:
    config = FAMILY_EXAMPLES[name]
    weights = init_weights(config, seed=3, scale=0.2)
    model, expected = onnxruntime.build(config, weights), Oracle(config, weights).logits(TOKENS)
    comparison = expected.compare(model.logits(TOKENS))
    print(f"{name}: logits error / tolerance {comparison.ratio:.3g}")
    assert comparison.ok, f"logits: error / tolerance {comparison.ratio:.3g}"
    first, cache = model.decode(TOKENS[:40])
    rest, _ = model.decode(TOKENS[40:], cache)
    decoded = expected.compare(np.concatenate([first, rest]))
    assert decoded.ok, f"decode: error / tolerance {decoded.ratio:.3g}"
