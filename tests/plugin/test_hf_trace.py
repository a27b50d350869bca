"""The transformers adapter's trace: every stage, read from transformers' own modules through
forward hooks, agrees with the float64 reference's trace, for every family; the hooks are gone afterwards."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests import needs
from verifier.analysis import tolerance
from verifier.model import stages
from verifier.model.config import ModelConfig, RopeScaling
from verifier.model.weights import init_weights
from verifier.plugin.adapters import hf_transformers
from verifier.plugin.probes import PROBE_CONFIGS
from verifier.properties.oracle import Oracle
from verifier.properties.strategies import configs
from verifier.reference import NumpyModel


@needs.transformers
@settings(max_examples=6, deadline=None)
@given(config=configs(max_n_ctx=64, max_layers=3), data=st.data())
@example(config=PROBE_CONFIGS["llama-gqa"].replace(n_layers=2), data=None).via("grouped-query heads, two layers")
def test_every_traced_stage_agrees_with_the_reference(config: ModelConfig, data: st.DataObject | None) -> None:
    T = data.draw(st.integers(1, config.n_ctx), label="T") if data else config.n_ctx
    assert_trace_agrees(config, T)


@needs.transformers
@pytest.mark.parametrize("kind", PROBE_CONFIGS)
def test_every_family_traces_every_stage_as_the_reference(kind: str) -> None:
    """Each family's probe (its switches on: Qwen3's q/k norms, Gemma's normaliser, Gemma 2's sandwich
    norms, soft-capped scores and local/global layers, ...) over its whole context, past any window."""
    assert_trace_agrees(PROBE_CONFIGS[kind], PROBE_CONFIGS[kind].n_ctx)


# The free switches the probes leave off, each on in a family that allows it.
FREE_SWITCHES = {
    "llama biased, own head_dim, linear scaling": PROBE_CONFIGS["llama-gqa"].replace(
        head_dim=6, qkv_bias=True, o_bias=True, rope_scaling=RopeScaling("linear", 4.0)
    ),
    "mistral with head_dim and llama3 scaling": PROBE_CONFIGS["mistral"].replace(
        head_dim=8, rope_scaling=RopeScaling("llama3", 4.0, original_n_ctx=4)
    ),
    "qwen2 local/global": PROBE_CONFIGS["qwen2"].replace(
        n_layers=2, sliding_window=3, layer_types=("full_attention", "sliding_attention")
    ),
    "qwen3 biased, windowed": PROBE_CONFIGS["qwen3"].replace(
        qkv_bias=True, o_bias=True, n_layers=2, sliding_window=5, layer_types=("sliding_attention",) * 2
    ),
    "gemma biased": PROBE_CONFIGS["gemma"].replace(qkv_bias=True, o_bias=True),
    "gemma2 without a window or caps": PROBE_CONFIGS["gemma2"].replace(
        sliding_window=None, layer_types=(), attn_softcap=None, final_softcap=None, n_layers=1
    ),
    "mixtral top-1 of 3, windowed, llama3 scaling": PROBE_CONFIGS["mixtral"].replace(
        n_experts=3, top_k=1, sliding_window=5, rope_scaling=RopeScaling("llama3", 4.0, original_n_ctx=4)
    ),
    "qwen2_moe renormalised, no shared expert, a dense layer": PROBE_CONFIGS["qwen2_moe"].replace(
        n_layers=2, norm_topk=True, d_shared_expert=None, dense_layers=(0,)
    ),
    "phi3 fully rotary, windowed": PROBE_CONFIGS["phi3"].replace(rotary_dim=None, sliding_window=5),
    "glm unbiased, fully rotary": PROBE_CONFIGS["glm"].replace(qkv_bias=False, rotary_dim=None),
}


@needs.transformers
@pytest.mark.parametrize("name", FREE_SWITCHES)
def test_the_free_switches_trace_and_decode_as_the_reference(name: str) -> None:
    config = FREE_SWITCHES[name]
    assert_trace_agrees(config, config.n_ctx)
    weights = init_weights(config, seed=8, scale=0.3)
    tokens = np.random.default_rng(8).integers(0, config.vocab_size, config.n_ctx)
    model = hf_transformers.build(config, weights)
    first, cache = model.decode(tokens[:5])
    decoded = np.concatenate([first, model.decode(tokens[5:], cache)[0]])
    found = Oracle(config, weights).logits(tokens).compare(decoded)
    assert found.ok, found


@needs.transformers
@pytest.mark.parametrize("kind", ["mixtral", "qwen2_moe"])
def test_the_experts_each_token_uses_are_those_transformers_router_hands_its_experts(kind: str) -> None:
    """In float32, each MoE layer's `experts` [T, top_k] (the indices transformers' router returns and its
    experts use) are, token by token, the set the reference chooses."""
    config = PROBE_CONFIGS[kind]
    tokens = np.random.default_rng(3).integers(0, config.vocab_size, config.n_ctx)
    weights = init_weights(config, seed=3, scale=0.3)
    trace = hf_transformers.build(config, weights).trace(tokens)
    reference = NumpyModel(config, weights).trace(tokens)
    moe_layers = [i for i in range(config.n_layers) if config.is_moe_layer(i)]
    assert moe_layers
    for i in moe_layers:
        stage = stages.layer_stage(i, "experts")
        assert trace[stage].shape == (len(tokens), config.top_k) and np.issubdtype(trace[stage].dtype, np.integer)
        np.testing.assert_array_equal(np.sort(trace[stage], -1), np.sort(reference[stage], -1), err_msg=stage)


def assert_trace_agrees(config: ModelConfig, T: int) -> None:
    tokens = np.random.default_rng(T).integers(0, config.vocab_size, T)
    weights = init_weights(config, seed=T, scale=0.3)
    model = hf_transformers.build(config, weights)
    trace = model.trace(tokens)
    oracle = NumpyModel(config, weights, np.float64).trace(tokens)
    assert list(trace) == list(stages.stage_shapes(config, T)) == list(oracle)
    below = np.tril(np.ones((T, T), dtype=bool))
    for stage, expected in oracle.items():
        actual = trace[stage]
        assert actual.shape == expected.shape, f"{stage}: shape {actual.shape}, expected {expected.shape}"
        if stages.is_index_stage(stage):  # each token's chosen experts, in any order
            np.testing.assert_array_equal(np.sort(actual, axis=-1), np.sort(expected, axis=-1), err_msg=stage)
            continue
        if stages.split_stage(stage)[1] in stages.CAUSAL_OPS:  # above the diagonal is undefined
            actual, expected = actual[:, below], expected[:, below]
        ratio = tolerance.error_ratio(actual, expected)
        assert ratio <= 1, f"{stage}: max |diff| {tolerance.max_error(actual, expected):.3g}, ratio {ratio:.3g}"
    assert not any(m._forward_hooks for m in model.model.modules()), "trace left forward hooks behind"
    assert np.array_equal(model.logits(tokens), trace[stages.LOGITS])
