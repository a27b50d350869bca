"""TransformerLens on one config of every family with every switch it has turned on
(`tests.formats.families`, and a GPT-2), against the float64 oracle within float32's bound: the default
bridge, its KV cache, and its compatibility mode (HookedTransformer's processing), each difference
measured (printed with -s) and pinned to its cause as a strict xfail, never under a widened tolerance.

Measured with transformer-lens 4.3.0 (transformers 5.24.0, torch 2.13.0+cpu; seed 3, scale 0.2, 100 tokens):
- The default bridge's logits agree in every family (error / tolerance 0.02 to 0.16).
- Its decode after a cache differs in every family (error / tolerance 8.8e3 to 2.6e4): its attention
  extends the KV cache it finds under `past_key_values` or `layer_past`, and transformers 5.24's
  decoder layers pass it as `cache`, so the cache handed back stays empty and each chunk attends to
  itself only.
- Compatibility mode (`enable_compatibility_mode()`: fold_ln, center_writing_weights, center_unembed)
  moves each position's logits by a constant (up to 0.6 here; 360 to 1,500 times the bound), the
  centred unembedding's: after log-softmax they agree, as they do without it. Gemma 2 is not moved
  (TransformerLens skips center_unembed under a final soft-cap). Qwen2-MoE with a shared expert
  differs after log-softmax too (1.3e3): fold_ln folds the MLP norm's weight out of the norm and into
  the router and the routed experts, not into the shared expert and its gate; with fold_ln=False, or
  without a shared expert, it agrees.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verifier.plugin.adapters import transformer_lens

if transformer_lens.missing() is not None:
    pytest.skip(transformer_lens.missing() or "", allow_module_level=True)

from tests.formats.families import FAMILY_EXAMPLES
from verifier.model.config import ModelConfig
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.properties.oracle import Oracle

TOKENS = np.random.default_rng(0).integers(0, 96, size=100)
EXAMPLES = {
    "gpt2": preset("gpt2").replace(vocab_size=96, n_ctx=128, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=256),
    **FAMILY_EXAMPLES,
}
EMPTY_CACHE = (
    "TransformerLens 4.3's attention extends the KV cache under `past_key_values`/`layer_past`; transformers "
    "5.24 passes it as `cache`, so the cache stays empty: error / tolerance 8.8e3 to 2.6e4"
)
SHARED_EXPERT = (
    "fold_ln folds the MLP norm into the router and the routed experts, not into Qwen2-MoE's shared expert and "
    "its gate: error / tolerance 1.3e3 after log-softmax"
)


def built(config: ModelConfig) -> tuple[Any, Any]:
    weights = init_weights(config, seed=3, scale=0.2)
    return transformer_lens.build(config, weights), Oracle(config, weights).logits(TOKENS)


def log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@pytest.mark.slow  # TransformerLens's import: 4 to 9 s
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_family_s_logits_agree_with_the_oracle(name: str) -> None:
    model, expected = built(EXAMPLES[name])
    comparison = expected.compare(model.logits(TOKENS))
    print(f"{name}: logits error / tolerance {comparison.ratio:.3g}")
    assert comparison.ok, f"logits: error / tolerance {comparison.ratio:.3g}"


@pytest.mark.slow  # TransformerLens's import: 4 to 9 s
@pytest.mark.xfail(strict=True, reason=EMPTY_CACHE)
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_family_s_decode_agrees_with_the_oracle(name: str) -> None:
    model, expected = built(EXAMPLES[name])
    first, cache = model.decode(TOKENS[:40])
    rest, _ = model.decode(TOKENS[40:], cache)
    comparison = expected.compare(np.concatenate([first, rest]))
    print(f"{name}: decode error / tolerance {comparison.ratio:.3g}")
    assert comparison.ok, f"decode: error / tolerance {comparison.ratio:.3g}"


@pytest.mark.slow  # TransformerLens's import: 4 to 9 s
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=SHARED_EXPERT)) if n == "qwen2_moe" else n
     for n in EXAMPLES],
)  # fmt: skip
def test_compatibility_mode_moves_each_position_s_logits_by_a_constant(name: str) -> None:
    """HookedTransformer's processing: the raw logits leave the bound (but Gemma 2's, whose final cap keeps
    the unembedding uncentred), and agree after log-softmax."""
    model, expected = built(EXAMPLES[name])
    model.bridge.enable_compatibility_mode(disable_warnings=True)
    logits = model.logits(TOKENS)
    raw = expected.compare(logits)
    oracle = np.asarray(expected.value)
    same_distribution = expected.compare(log_softmax(logits) + (oracle - log_softmax(oracle)))
    shift = np.abs((logits - oracle).mean(-1)).max()
    print(f"{name}: compatibility mode: raw {raw.ratio:.3g}, shift up to {shift:.3g}, "
          f"after log-softmax {same_distribution.ratio:.3g}")  # fmt: skip
    assert raw.ok == (name == "gemma2"), f"raw logits: error / tolerance {raw.ratio:.3g}"
    assert same_distribution.ok, f"after log-softmax: error / tolerance {same_distribution.ratio:.3g}"


@pytest.mark.slow  # TransformerLens's import: 4 to 9 s
@pytest.mark.parametrize(
    "config, processing",
    [
        (FAMILY_EXAMPLES["qwen2_moe"], {"fold_ln": False}),
        (FAMILY_EXAMPLES["qwen2_moe"].replace(d_shared_expert=None), {}),
    ],
    ids=["fold_ln=False", "no-shared-expert"],
)
def test_qwen2_moe_s_difference_is_fold_ln_and_the_shared_expert(config: ModelConfig, processing: dict) -> None:  # type: ignore[type-arg]
    model, expected = built(config)
    model.bridge.enable_compatibility_mode(disable_warnings=True, **processing)
    logits = model.logits(TOKENS)
    oracle = np.asarray(expected.value)
    comparison = expected.compare(log_softmax(logits) + (oracle - log_softmax(oracle)))
    assert comparison.ok, f"after log-softmax: error / tolerance {comparison.ratio:.3g}"
