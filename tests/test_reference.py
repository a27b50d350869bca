"""The NumPy reference: agreement with transformers, KV-cache chunking, traces, independence.

Tolerance: the reference in float64 is the oracle; transformers runs in float32, so its logits
may differ from the oracle by float32 rounding, bounded by `verifier.analysis.tolerance` (256 eps32 relative
to the largest logit; the measured error of a correct float32 model is about 10 eps32).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import needs
from verifier.analysis import tolerance
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.adapters import hf_transformers
from verifier.properties import checks
from verifier.properties.oracle import Oracle, exact
from verifier.properties.strategies import configs
from verifier.reference import InputError, NumpyModel
from verifier.reference.layers import rope_tables


def _assert_within_policy(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    ratio = tolerance.error_ratio(actual, expected)
    assert ratio <= 1, (
        f"{what}: max |diff| {tolerance.max_error(actual, expected):.3g} exceeds the bound "
        f"{tolerance.bound(expected):.3g} (ratio {ratio:.2f})"
    )


def _tokens(config: ModelConfig, T: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, config.vocab_size, T)


@needs.transformers
@pytest.mark.parametrize(
    ("name", "T"),
    [("gpt2", 32), ("llama2c-stories15M", 64), ("llama2c-stories260K", 96)],
)
def test_reference_matches_transformers_on_preset(name: str, T: int) -> None:
    config = preset(name)
    weights = init_weights(config, seed=1)
    tokens = _tokens(config, T)
    oracle = NumpyModel(config, weights, np.float64).logits(tokens)
    reference32 = NumpyModel(config, weights).logits(tokens)
    hf = hf_transformers.build(config, weights).logits(tokens)
    _assert_within_policy(hf, oracle, f"transformers vs float64 reference, {name}")
    _assert_within_policy(reference32, oracle, f"float32 vs float64 reference, {name}")


@needs.transformers
@settings(max_examples=15)
@given(config=configs(max_n_ctx=64, max_layers=3), scale=st.sampled_from([0.02, 0.3, 1.0]), data=st.data())
def test_reference_matches_transformers_on_generated_configs(config: ModelConfig, scale: float, data) -> None:
    weights = init_weights(config, seed=data.draw(st.integers(0, 2**16), label="seed"), scale=scale)
    T = data.draw(st.integers(1, config.n_ctx), label="T")
    tokens = np.array(data.draw(st.lists(st.integers(0, config.vocab_size - 1), min_size=T, max_size=T)))
    # Weight scale 1.0 reaches nearly one-hot attention, where the policy's floor alone is not the
    # policy: the bound includes how far the case's neighbours move (verifier.analysis.tolerance).
    expected = Oracle(config, weights).logits(tokens)
    found = hf_transformers.build(config, weights).logits(tokens)
    c = expected.compare(found)
    assert c.ok, f"transformers: max |diff| {c.max_error:.3g} at {list(c.index)} exceeds the bound {c.bound:.3g}"


@needs.transformers
def test_grouped_query_attention_matches_transformers_with_one_kv_head() -> None:
    config = preset("llama2c-stories260K").replace(n_kv_heads=1)
    weights = init_weights(config, seed=3, scale=0.2)
    tokens = _tokens(config, 40)
    oracle = NumpyModel(config, weights, np.float64).logits(tokens)
    _assert_within_policy(hf_transformers.build(config, weights).logits(tokens), oracle, "GQA, 1 kv head")


@settings(max_examples=20)
@given(config=configs(max_n_ctx=64, max_layers=3), data=st.data())
def test_chunked_decoding_equals_the_full_pass(config: ModelConfig, data) -> None:
    weights = init_weights(config, seed=0, scale=0.3)
    T = data.draw(st.integers(1, config.n_ctx), label="T")
    tokens = np.arange(T) % config.vocab_size
    cuts = sorted(data.draw(st.sets(st.integers(1, T - 1), max_size=5), label="cuts")) if T > 1 else []
    model = NumpyModel(config, weights, np.float64)
    cache, pieces = None, []
    for chunk in np.split(tokens, cuts):
        logits, cache = model.decode(chunk, cache)
        pieces.append(logits)
    np.testing.assert_allclose(np.concatenate(pieces), model.logits(tokens), rtol=1e-12, atol=1e-12)
    assert cache.shape == (config.n_layers, 2, 1, T, config.n_kv_heads, config.d_head)
    assert cache.nbytes == np.prod(cache.shape) * 8


def test_prefill_then_single_steps_equal_the_full_pass_on_stories15m() -> None:
    config = preset("llama2c-stories15M")
    model = NumpyModel(config, init_weights(config, seed=2))
    tokens = _tokens(config, 24)
    logits, cache = model.decode(tokens[:8])
    steps = [logits]
    for token in tokens[8:]:
        logits, cache = model.decode(token[None], cache)
        steps.append(logits)
    _assert_within_policy(np.concatenate(steps), model.logits(tokens), "cached vs full, float32")


def test_a_cache_is_not_modified_by_decoding_from_it() -> None:
    config = preset("llama2c-stories260K")
    model = NumpyModel(config, init_weights(config, seed=0))
    _, cache = model.decode(np.array([1, 2, 3]))
    first, _ = model.decode(np.array([4]), cache)
    model.decode(np.array([5, 6]), cache)
    again, _ = model.decode(np.array([4]), cache)
    np.testing.assert_array_equal(first, again)


def test_batch_rows_equal_single_sequences() -> None:
    config = preset("llama2c-stories260K")
    model = NumpyModel(config, init_weights(config, seed=0), np.float64)
    batch = np.random.default_rng(0).integers(0, config.vocab_size, (3, 10))
    out = model.logits(batch)
    assert out.shape == (3, 10, config.vocab_size)
    for row, tokens in zip(out, batch, strict=True):
        np.testing.assert_allclose(row, model.logits(tokens), rtol=1e-12, atol=1e-12)


def test_left_padding_with_a_mask_equals_the_row_alone() -> None:
    for name in ("gpt2", "llama2c-stories260K"):
        config = preset(name).replace(n_layers=2)
        model = NumpyModel(config, init_weights(config, seed=0), np.float64)
        tokens = np.array([[0, 0, 0, 7, 8, 9], [1, 2, 3, 4, 5, 6]])
        mask = np.array([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
        out = model.logits(tokens, attention_mask=mask)
        np.testing.assert_allclose(out[0, 3:], model.logits(np.array([7, 8, 9])), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["gpt2", "llama2c-stories260K"])
def test_trace_has_every_stage_with_its_formula_shape(name: str) -> None:
    config = preset(name).replace(n_layers=2)
    model = NumpyModel(config, init_weights(config, seed=0))
    trace = model.trace(_tokens(config, 5))
    expected = stages.stage_shapes(config, 5)
    assert list(trace) == list(expected)
    assert {k: v.shape for k, v in trace.items()} == expected
    np.testing.assert_array_equal(trace[stages.LOGITS], model.logits(_tokens(config, 5)))


def test_gpt2_trace_has_the_articles_shapes() -> None:
    config = preset("gpt2")
    shapes = stages.stage_shapes(config, 5)
    assert shapes["embed"] == (5, 768)
    assert shapes["layers.0.q"] == (12, 5, 64)
    assert shapes["layers.11.scores"] == (12, 5, 5)
    assert shapes["layers.0.attn"] == (5, 768)
    assert shapes["layers.0.mlp_act"] == (5, 3072)
    assert shapes["layers.0.resid_mlp"] == (5, 768)
    assert shapes["logits"] == (5, 50257)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (np.array([], dtype=np.int64), "T >= 1"),
        (np.array([0.5, 1.0]), "integers"),
        (np.array([0, 512]), r"\[0, 512\)"),
        (np.array([-1]), r"\[0, 512\)"),
        (np.zeros((1, 1, 3), dtype=np.int64), r"\[T\] or \[B, T\]"),
        (np.zeros(513, dtype=np.int64), "n_ctx=512"),
    ],
)
def test_bad_tokens_raise_input_error(tokens: np.ndarray, message: str) -> None:
    config = preset("llama2c-stories260K")
    with pytest.raises(InputError, match=message):
        NumpyModel(config, init_weights(config)).logits(tokens)


@needs.torch
def test_rope_tables_equal_the_ones_llama2c_computes_with_torch() -> None:
    """The suite's `test_rope_tables_equal_the_ones_llama2c_stores` compares the reference's tables with
    llama2.c's model.py transcribed into NumPy (no torch in a run whose models need none); here, with
    model.py's own torch lines (tests/adapters/llama2c_model.py)."""
    from tests.adapters.llama2c_model import precompute_freqs_cis  # imports torch

    for name in ("llama2c-stories260K", "llama2c-stories15M", "llama2c-stories110M"):
        c = preset(name)
        ours = rope_tables(np.arange(c.n_ctx), c.d_head, c.rope_theta)
        theirs = precompute_freqs_cis(c.d_head, c.n_ctx, c.rope_theta)
        for table, their_table, what in zip(ours, theirs, ("cos", "sin"), strict=True):
            checks.agree(table, exact(their_table.numpy(), c.n_ctx), what=f"{name} {what} table", model="reference")


def test_reference_imports_only_numpy_and_the_standard_library() -> None:
    code = (
        "import sys, verifier.reference, verifier.model.stages;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'transformers', 'scipy', 'safetensors'});"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing verifier.reference also imported: {out.stdout.strip()}"


@pytest.mark.parametrize(
    ("T", "S", "window", "padded"),
    [(600, 600, None, False), (600, 600, 100, True), (3, 700, 64, False), (300, 1000, None, True)],
    ids=["causal-prefill", "window-and-padding", "decode-after-a-cache", "chunk-after-a-cache"],
)
def test_unwatched_attention_in_blocks_is_the_watched_attention(
    T: int, S: int, window: int | None, padded: bool
) -> None:
    """Without a stage, attention takes QUERY_BLOCK queries at a time against the keys they see: the
    same values as the whole [T, S] attention a trace watches (float64: only the sums' order differs)."""
    from verifier.reference import layers as L

    assert T > L.QUERY_BLOCK or S - T > 0  # more than one block, or keys a block skips
    rng = np.random.default_rng(0)
    B, h, kv, d = 2, 4, 2, 16
    q = rng.standard_normal((B, h, T, d))
    k, v = rng.standard_normal((B, kv, S, d)), rng.standard_normal((B, kv, S, d))
    allowed = L.causal_mask(T, S, window)[None, None]
    if padded:  # the first sequence left-padded by 37 keys; each query still sees itself
        keys = np.ones((B, S), dtype=bool)
        keys[0, :37] = False
        allowed = allowed & (keys[:, None, None, :] | np.eye(T, S, S - T, dtype=bool))
    whole = L.attention(q, k, v, allowed, lambda op, x: x, cap=5.0)
    blocked = L.attention(q, k, v, allowed, cap=5.0)
    np.testing.assert_allclose(blocked, whole, rtol=1e-13, atol=1e-15)
