"""The reference of the Llama-layout families (Llama 3, Mistral, Qwen2, Qwen3, Gemma, Gemma 2) against
`transformers`, and the RoPE scaling laws written from the math.

The float64 comparison runs transformers' own model classes in float64 throughout: they upcast some
pieces to float32 explicitly (RMSNorm's `.to(torch.float32)`, Gemma's `.float()`, the rotary table's
`dtype=torch.float`), which would hide the float64 oracle behind float32 rounding, so while a model is
built and run `torch.float32` / `torch.float` / `Tensor.float` name float64. What remains is
transformers' code in float64, against the reference written from the math: they agree to ~1e-13.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import needs
from verifier.analysis import tolerance
from verifier.analysis.divergence import localize
from verifier.analysis.precision import BFLOAT16
from verifier.model import stages
from verifier.model.config import FAMILY_SWITCHES, HF_CLASSES, ROPE_FAMILIES, ModelConfig, RopeScaling
from verifier.model.weights import LazyWeights, Weights, expert_names, init_weights
from verifier.plugin.adapters.hf_transformers import transformers_state
from verifier.properties.oracle import Oracle
from verifier.reference import InputError, NumpyModel, llama
from verifier.reference import layers as L
from verifier.reference import rounding as R

# Logits of the two float64 implementations agree within this, relative to the largest logit: both
# are float64 sums of a few hundred terms (measured ~1e-14); a missing or misplaced piece moves them by
# far more than float32 would.
FLOAT64_AGREEMENT = 1e-10


@st.composite
def family_configs(draw: st.DrawFn, family: str, T: int) -> ModelConfig:
    """A small config of `family` with each switch it leaves free drawn so that it bites at T positions:
    windows shorter than T, llama3 scaling whose original context T passes, heads decoupled from d_model."""
    fixed, free = FAMILY_SWITCHES[family]  # type: ignore[index]
    n_layers = draw(st.integers(2, 3), label="n_layers")
    n_kv_heads = draw(st.sampled_from([1, 2]), label="n_kv_heads")
    n_heads = n_kv_heads * draw(st.sampled_from([1, 2]), label="group")
    switches: dict[str, Any] = dict(fixed)
    if "head_dim" in free and draw(st.booleans(), label="decoupled head_dim"):
        switches["head_dim"] = draw(st.sampled_from([6, 10, 16]), label="head_dim")
    if "rope_scaling" in free and draw(st.booleans(), label="scaled RoPE"):
        factor = draw(st.sampled_from([2.0, 8.0]), label="factor")
        if draw(st.booleans(), label="llama3"):
            # Short wavelengths (below 8, so the fastest pair of any head, 2 pi, is one) kept, long
            # ones divided, over an original context T passes.
            bands = st.sampled_from([(16, 1.0, 2.0), (32, 1.0, 4.0), (64, 2.0, 8.0)])
            original, low, high = draw(bands, label="llama3 original_n_ctx, low and high factors")
            switches["rope_scaling"] = RopeScaling("llama3", factor, low, high, original)
        else:
            switches["rope_scaling"] = RopeScaling("linear", factor)
    if "qkv_bias" in free:
        switches["qkv_bias"] = draw(st.booleans(), label="attention bias")
        if "o_bias" in free:  # attention_bias biases o too, but for GLM
            switches["o_bias"] = switches["qkv_bias"]
    if "sliding_window" in free and draw(st.booleans(), label="windowed"):
        switches["sliding_window"] = draw(st.integers(1, T - 1), label="window")
        if "layer_types" in free:
            kinds = st.sampled_from(["sliding_attention", "full_attention"])
            switches["layer_types"] = tuple(draw(st.lists(kinds, min_size=n_layers, max_size=n_layers)))
    for cap in ("attn_softcap", "final_softcap"):
        if cap in free and draw(st.booleans(), label=cap):
            switches[cap] = draw(st.sampled_from([1.0, 5.0, 30.0]), label=f"{cap} value")
    if "query_scale" in free and draw(st.booleans(), label="query_scale"):
        switches["query_scale"] = draw(st.integers(1, 64), label="query_pre_attn_scalar")
    switches |= draw(_issue27_switches(free, n_layers, switches.get("head_dim", 8)))
    return ModelConfig(
        family=family,  # type: ignore[arg-type]
        vocab_size=40,
        n_ctx=T + 8,
        d_model=8 * n_heads,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=24,
        norm_eps=1e-6,
        tie_embeddings=draw(st.booleans(), label="tied"),
        rope_theta=draw(st.sampled_from([10000.0, 500000.0]), label="rope_theta"),
        **switches,
    )


@st.composite
def _issue27_switches(draw: st.DrawFn, free: tuple[str, ...], n_layers: int, d_head: int) -> dict[str, Any]:
    """Routed experts (several, top_k of them, renormalised or not, a shared expert, dense layers),
    partial rotary and layers without RoPE, where the family leaves them free."""
    switches: dict[str, Any] = {}
    if "n_experts" in free:
        switches["n_experts"] = draw(st.integers(2, 6), label="n_experts")
        switches["top_k"] = draw(st.integers(1, min(3, switches["n_experts"])), label="top_k")
    if "d_expert" in free and draw(st.booleans(), label="own d_expert"):
        switches["d_expert"] = draw(st.sampled_from([8, 16]), label="d_expert")
    if "norm_topk" in free:
        switches["norm_topk"] = draw(st.booleans(), label="norm_topk")
    if "d_shared_expert" in free and draw(st.booleans(), label="shared expert"):
        switches["d_shared_expert"] = draw(st.sampled_from([6, 20]), label="d_shared_expert")
    if "dense_layers" in free:
        switches["dense_layers"] = tuple(draw(st.lists(st.sampled_from(range(n_layers)), unique=True, max_size=1)))
    if "rotary_dim" in free and draw(st.booleans(), label="partial rotary"):
        switches["rotary_dim"] = draw(st.sampled_from(range(2, d_head, 2)), label="rotary_dim")
    if "nope_layers" in free:
        switches["nope_layers"] = tuple(sorted(draw(st.sets(st.sampled_from(range(n_layers))), label="nope_layers")))
    return switches


def _hf_fields(config: ModelConfig) -> dict[str, Any]:
    """The transformers config fields of `config`: `to_hf_dict()`'s, with issue 27's families' fields set
    here from transformers' config classes (MixtralConfig, Qwen2MoeConfig, Phi3Config, GlmConfig), so that
    this test checks the reference, not the config translation (tests/test_config.py does)."""
    fields = config.to_hf_dict()
    del fields["architectures"], fields["model_type"]
    c, family = config, config.family
    if family == "mixtral":
        fields |= {"num_local_experts": c.n_experts, "num_experts_per_tok": c.top_k, "sliding_window": c.sliding_window}
    if family == "qwen2_moe":
        fields |= {
            "num_experts": c.n_experts,
            "num_experts_per_tok": c.top_k,
            "moe_intermediate_size": c.expert_d_ff,
            "shared_expert_intermediate_size": c.d_shared_expert or 0,  # 0: a shared expert that adds 0
            "norm_topk_prob": c.norm_topk,
            "mlp_only_layers": list(c.dense_layers),
            "decoder_sparse_step": 1,
            "qkv_bias": True,
            "use_sliding_window": c.sliding_window is not None,
            "sliding_window": c.sliding_window,
            "max_window_layers": c.n_layers,
            "layer_types": [c.layer_type(i) for i in range(c.n_layers)],
        }
    if family in ("phi3", "glm"):
        factor = c.rotated_dims / c.d_head
        assert int(c.d_head * factor) == c.rotated_dims  # transformers' rotary dims: int(head_dim * factor)
        fields["rope_parameters"] = {**fields["rope_parameters"], "partial_rotary_factor": factor}
        fields |= {"pad_token_id": None, "sliding_window": c.sliding_window}
    if family == "glm":
        fields |= {"attention_bias": c.qkv_bias, "head_dim": c.d_head}
    if family == "smollm3":  # SmolLM3Config: no_rope_layers[i] is 1 where layer i uses RoPE
        fields |= {
            "no_rope_layers": [0 if i in c.nope_layers else 1 for i in range(c.n_layers)],
            "use_sliding_window": c.sliding_window is not None,
            "sliding_window": c.sliding_window,
            "layer_types": [c.layer_type(i) for i in range(c.n_layers)],
        }
    return fields


@contextlib.contextmanager
def _float64_transformers() -> Iterator[None]:
    """transformers' code with its explicit float32 upcasts made float64 (module docstring)."""
    import torch

    default = torch.get_default_dtype()
    with (
        mock.patch.object(torch, "float32", torch.float64),
        mock.patch.object(torch, "float", torch.float64),
        mock.patch.object(torch.Tensor, "float", lambda t: t.to(torch.float64)),
    ):
        torch.set_default_dtype(torch.float64)  # the buffers built from Python floats (Gemma's normaliser)
        try:
            yield
        finally:
            torch.set_default_dtype(default)


def _transformers_model(config: ModelConfig, weights: Weights, dtype: str) -> Any:
    """`HF_CLASSES[family]`'s model class built from `config.to_transformers()` in `dtype` ("float64",
    "float32" or "bfloat16", eager attention), holding `weights` (rounded to bfloat16 there)."""
    import torch
    import transformers

    model_class = getattr(transformers, HF_CLASSES[config.family][1])
    context = _float64_transformers() if dtype == "float64" else contextlib.nullcontext()
    with context:
        hf_config = getattr(transformers, HF_CLASSES[config.family][0])(**_hf_fields(config))
        # Eager experts: transformers' default grouped_mm experts take no float64 (a per-expert loop either way).
        moe = {"experts_implementation": "eager"} if config.n_experts else {}
        model = model_class._from_config(hf_config, dtype=getattr(torch, dtype), attn_implementation="eager", **moe)
    stored = np.float64 if dtype == "float64" else np.float32
    live = transformers_state(config, weights)
    state = {name: torch.from_numpy(np.asarray(w, stored)).to(getattr(torch, dtype)) for name, w in live.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    absent = {"lm_head.weight"} if config.tie_embeddings else set()
    if config.family == "qwen2_moe" and config.d_shared_expert is None:  # its size-0 shared expert adds 0
        absent |= {name for name in model.state_dict() if ".shared_expert" in name}
    assert not unexpected and set(missing) <= absent
    return model.eval()


def _transformers_logits(model: Any, tokens: np.ndarray, dtype: str) -> np.ndarray:
    import torch

    context = _float64_transformers() if dtype == "float64" else contextlib.nullcontext()
    with context, torch.no_grad():
        logits = model(input_ids=torch.from_numpy(tokens[None]), use_cache=False).logits[0]
        return logits.numpy() if dtype == "float64" else logits.float().numpy()


def _relative_error(found: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(found - expected).max() / max(1.0, np.abs(expected).max()))


T = 40


@needs.transformers
@pytest.mark.parametrize("family", ROPE_FAMILIES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_float64_reference_equals_transformers_in_float64(family: str, data: st.DataObject) -> None:
    config = data.draw(family_configs(family, T), label="config")
    # Weight scale 1: scores and logits large enough that small soft-caps bite.
    weights = init_weights(config, seed=data.draw(st.integers(0, 999), label="seed"), scale=1.0)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, T)
    expected = NumpyModel(config, weights, np.float64).logits(tokens)
    found = _transformers_logits(_transformers_model(config, weights, "float64"), tokens, "float64")
    assert _relative_error(found, expected) <= FLOAT64_AGREEMENT, config


@needs.transformers
@pytest.mark.parametrize("family", ROPE_FAMILIES)
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_the_float32_reference_equals_transformers_in_float32_within_the_policy(
    family: str, data: st.DataObject
) -> None:
    config = data.draw(family_configs(family, T), label="config")
    weights = init_weights(config, seed=data.draw(st.integers(0, 999), label="seed"), scale=0.3)
    tokens = np.random.default_rng(1).integers(0, config.vocab_size, T)
    oracle = NumpyModel(config, weights, np.float64).logits(tokens)
    for found, who in (
        (NumpyModel(config, weights).logits(tokens), "float32 reference"),
        (_transformers_logits(_transformers_model(config, weights, "float32"), tokens, "float32"), "transformers"),
    ):
        ratio = tolerance.error_ratio(found, oracle)
        assert ratio <= 1, f"{who} vs the float64 oracle: {ratio:.2f} of the float32 bound, {config}"


@pytest.mark.parametrize("family", ROPE_FAMILIES)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_cached_decoding_past_the_window_equals_the_full_pass(family: str, data: st.DataObject) -> None:
    config = data.draw(family_configs(family, T), label="config")
    model = NumpyModel(config, init_weights(config, seed=3, scale=0.5), np.float64)
    tokens = np.random.default_rng(2).integers(0, config.vocab_size, T)
    first = data.draw(st.integers(1, 4), label="prefill")
    logits, cache = model.decode(tokens[:first])
    pieces = [logits]
    for token in tokens[first:]:  # one at a time: each step's window slides over the cache
        logits, cache = model.decode(token[None], cache)
        pieces.append(logits)
    np.testing.assert_allclose(np.concatenate(pieces), model.logits(tokens), rtol=1e-12, atol=1e-12)


def test_a_window_hides_exactly_the_keys_w_or_more_positions_back() -> None:
    config = family_configs_example("mistral", sliding_window=3)
    model = NumpyModel(config, init_weights(config, seed=0, scale=0.5), np.float64)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, 12)
    base = model.logits(tokens)
    # One layer: position t reads keys t-2..t only, so an edit at t-3 cannot reach it; one at t-2 does.
    t = 9
    edited = tokens.copy()
    edited[t - 3] = (edited[t - 3] + 1) % config.vocab_size
    np.testing.assert_array_equal(model.logits(edited)[t], base[t])
    edited = tokens.copy()
    edited[t - 2] = (edited[t - 2] + 1) % config.vocab_size
    assert np.abs(model.logits(edited)[t] - base[t]).max() > 1e-6


def family_configs_example(family: str, **fields: Any) -> ModelConfig:
    """A small config of `family` (one layer unless `fields` say) with its fixed switches and `fields`."""
    fixed, _ = FAMILY_SWITCHES[family]  # type: ignore[index]
    sizes = dict(vocab_size=40, n_ctx=32, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=24, norm_eps=1e-6)
    return ModelConfig(family=family, tie_embeddings=False, **{**sizes, **fixed, **fields})  # type: ignore[arg-type]


@needs.transformers
@pytest.mark.parametrize(
    "scaling",
    [
        RopeScaling("linear", 4.0),
        RopeScaling("llama3", 8.0, 1.0, 4.0, 64),
        RopeScaling("llama3", 32.0, 2.0, 16.0, 8192),
    ],
)
@pytest.mark.parametrize("d_head", [16, 128])
def test_the_scaled_frequency_table_equals_transformers_inv_freq(scaling: RopeScaling, d_head: int) -> None:
    config = family_configs_example("llama", head_dim=d_head, rope_scaling=scaling).replace(rope_theta=500000.0)
    with _float64_transformers():
        model = _transformers_model(config, init_weights(config), "float64")
    rotary = model.model.rotary_emb
    assert rotary.attention_scaling == 1.0  # linear and llama3 scale the frequencies only
    np.testing.assert_allclose(rotary.inv_freq.numpy(), llama.inv_freq(config), rtol=1e-15, atol=0)


@pytest.mark.parametrize("factor", [2.0, 8.0, 32.0])
@pytest.mark.parametrize(("low", "high", "original"), [(1.0, 4.0, 8192), (1.0, 4.0, 64), (2.0, 16.0, 256)])
def test_llama3_scaling_keeps_the_high_band_divides_the_low_band_and_interpolates_between(
    factor: float, low: float, high: float, original: int
) -> None:
    base = L.rope_frequencies(128, 500000.0)
    scaled = L.llama3_scaled_frequencies(base, factor, low, high, original)
    wavelength = 2 * np.pi / base
    short, long = wavelength < original / high, wavelength > original / low
    assert short.any() and long.any(), "the case must reach both bands"
    np.testing.assert_array_equal(scaled[short], base[short])
    np.testing.assert_allclose(scaled[long], base[long] / factor, rtol=1e-15)
    between = ~short & ~long
    assert np.all((scaled[between] >= base[between] / factor) & (scaled[between] <= base[between]))
    # The mix is continuous: at each band's edge it meets the band's own rule.
    edges = np.array([original / high, original / low])
    at_edges = L.llama3_scaled_frequencies(2 * np.pi / edges, factor, low, high, original)
    np.testing.assert_allclose(at_edges, 2 * np.pi / edges * np.array([1.0, 1.0 / factor]), rtol=1e-12)
    np.testing.assert_allclose(L.linear_scaled_frequencies(base, factor), base / factor, rtol=1e-15)


@needs.transformers
@pytest.mark.parametrize(
    ("family", "switches", "hf_stages"),
    [
        ("qwen3", {}, {"q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}),
        (
            "gemma2",
            {"sliding_window": 4, "attn_softcap": 5.0, "final_softcap": 3.0},
            {"attn_post_norm": "post_attention_layernorm", "mlp_post_norm": "post_feedforward_layernorm",
             "mlp_norm": "pre_feedforward_layernorm", "attn_norm": "input_layernorm"},
        ),
        (
            "olmo2",
            {},
            {"q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm", "attn_post_norm": "post_attention_layernorm",
             "mlp_post_norm": "post_feedforward_layernorm"},
        ),
    ],
)  # fmt: skip
def test_the_new_trace_stages_equal_the_outputs_of_transformers_modules(
    family: str, switches: dict[str, Any], hf_stages: dict[str, str]
) -> None:
    config = family_configs_example(family, **switches).replace(n_layers=2)
    weights = init_weights(config, seed=4, scale=0.5)
    tokens = np.random.default_rng(3).integers(0, config.vocab_size, 10)
    trace = NumpyModel(config, weights, np.float64).trace(tokens)
    expected_stages = stages.stage_shapes(config, len(tokens))
    assert list(trace) == list(expected_stages)
    assert {name: value.shape for name, value in trace.items()} == expected_stages
    model = _transformers_model(config, weights, "float64")
    captured: dict[str, np.ndarray] = {}
    for i in range(config.n_layers):
        for op, path in hf_stages.items():

            def keep(module: Any, inputs: Any, output: Any, name: str = stages.layer_stage(i, op)) -> None:
                captured[name] = output[0].numpy()

            model.get_submodule(f"model.layers.{i}.{path}").register_forward_hook(keep)
    logits = _transformers_logits(model, tokens, "float64")
    np.testing.assert_allclose(trace[stages.LOGITS], logits, rtol=0, atol=1e-12)
    for name, value in captured.items():
        if stages.split_stage(name)[1] in ("q_norm", "k_norm"):
            # transformers normalises [T, heads, d_head] (OLMo 2: [T, heads x d_head], the whole projection)
            value = value.reshape(len(tokens), -1, config.d_head).transpose(1, 0, 2)
        np.testing.assert_allclose(trace[name], value, rtol=0, atol=1e-12, err_msg=name)


_ATTENTION_SWITCHES = {"qkv_bias": True, "o_bias": True, "head_dim": 10, "sliding_window": 3}


@pytest.mark.parametrize(("family", "switches"), [
    ("qwen3", _ATTENTION_SWITCHES),
    ("gemma2", {**_ATTENTION_SWITCHES, "attn_softcap": 2.0, "final_softcap": 4.0, "query_scale": 9}),
    ("qwen2_moe", {"n_experts": 3, "top_k": 2, "d_expert": 8, "d_shared_expert": 12, "dense_layers": (0,)}),
    ("phi3", {"rotary_dim": 4, "sliding_window": 3}),
    ("glm", {"rotary_dim": 6, "qkv_bias": True, "head_dim": 10}),
    ("smollm3", {"nope_layers": (1,), "sliding_window": 3, "layer_types": ("full_attention", "sliding_attention")}),
    ("olmo2", {"qkv_bias": True, "o_bias": True, "head_dim": 10}),
])  # fmt: skip
def test_a_streamed_pass_of_a_family_equals_the_resident_one_bit_for_bit(family: str, switches: dict[str, Any]) -> None:
    config = family_configs_example(family, **{"n_layers": 2, **switches})
    weights = init_weights(config, seed=5, scale=0.5)
    lookups: list[str] = []
    lazy = LazyWeights({n: w.shape for n, w in weights.items()}, lambda n: lookups.append(n) or weights[n])
    tokens = np.random.default_rng(4).integers(0, config.vocab_size, 9)
    for dtype in (np.float32, np.float64):
        resident, streamed = NumpyModel(config, weights, dtype), NumpyModel(config, lazy, dtype, stream=True)
        np.testing.assert_array_equal(streamed.logits(tokens), resident.logits(tokens))
        streamed_trace, resident_trace = streamed.trace(tokens), resident.trace(tokens)
        assert list(streamed_trace) == list(resident_trace)
        for name, value in resident_trace.items():
            np.testing.assert_array_equal(streamed_trace[name], value, err_msg=name)
    assert set(weights) <= set(lookups), "the streamed pass read every weight, the new ones included"


_BIASED_HEADS = {"head_dim": 12, "qkv_bias": True, "o_bias": True}


@needs.transformers
@pytest.mark.parametrize(("family", "switches"), [
    ("qwen3", _BIASED_HEADS),
    ("gemma", _BIASED_HEADS),
    ("gemma2", {**_BIASED_HEADS, "sliding_window": 5, "attn_softcap": 3.0, "final_softcap": 5.0, "query_scale": 20}),
    ("mixtral", {"n_experts": 4, "top_k": 2}),
    ("qwen2_moe", {"n_experts": 4, "top_k": 2, "d_expert": 16, "d_shared_expert": 24}),
    ("phi3", {"rotary_dim": 4}),
    ("glm", {"rotary_dim": 6, "qkv_bias": True}),
    ("smollm3", {"nope_layers": (0,), "qkv_bias": True, "o_bias": True}),
    ("olmo2", {}),
])  # fmt: skip
def test_transformers_in_bfloat16_agrees_with_the_oracle_within_the_bfloat16_class(
    family: str, switches: dict[str, Any]
) -> None:
    """At a seed whose routers meet no near-tie at bfloat16 (the near-tie rule is the oracle's, in properties)."""
    config = family_configs_example(family, **switches).replace(n_layers=2, d_model=48)
    weights = init_weights(config, seed=6, scale=0.3)
    tokens = np.random.default_rng(5).integers(0, config.vocab_size, 20)
    found = _transformers_logits(_transformers_model(config, weights, "bfloat16"), tokens, "bfloat16")
    c = Oracle(config, weights, BFLOAT16).logits(tokens).compare(found)
    assert c.ok, f"max |diff| {c.max_error:.3g} at {list(c.index)} exceeds the bfloat16 bound {c.bound:.3g}"


@needs.transformers
@pytest.mark.parametrize("d_model", [48, 40, 300])
def test_gemma_s_normaliser_in_bfloat16_is_sqrt_d_model_rounded_as_transformers_rounds_it(d_model: int) -> None:
    """sqrt(48) = 6.928 is 6.9375 in bfloat16: the embedding is scaled by the rounded value, as
    transformers' normaliser, a tensor of the model's dtype, is."""
    import torch

    config = family_configs_example("gemma").replace(d_model=d_model, n_heads=2, n_kv_heads=2)
    weights = init_weights(config, seed=7)
    tokens = np.arange(config.n_ctx) % config.vocab_size
    ours = NumpyModel(config, weights, np.float32, rounding=R.BFLOAT16).trace(tokens)[stages.EMBED]
    model = _transformers_model(config, weights, "bfloat16")
    with torch.no_grad():
        theirs = model.model.embed_tokens(torch.from_numpy(tokens[None]))[0].float().numpy()
    np.testing.assert_array_equal(ours, theirs)


@needs.transformers
@pytest.mark.parametrize("family", ["mistral", "qwen2", "gemma2", "mixtral", "qwen2_moe"])
def test_left_padding_under_a_window_equals_transformers_and_the_row_alone(family: str) -> None:
    """Padding positions route too (their outputs are nobody's): a padded row's real tokens equal the row alone."""
    import torch

    switches: dict[str, Any] = {"sliding_window": 3}
    if family not in ("mistral", "mixtral"):
        switches["layer_types"] = ("sliding_attention", "full_attention")
    if family in ("mixtral", "qwen2_moe"):
        switches |= {"n_experts": 4, "top_k": 2}
    config = family_configs_example(family, **switches, n_layers=2)
    weights = init_weights(config, seed=8, scale=0.5)
    rng = np.random.default_rng(6)
    tokens = rng.integers(0, config.vocab_size, (2, 12))
    mask = np.ones_like(tokens)
    mask[0, :4] = 0
    ours = NumpyModel(config, weights, np.float64).logits(tokens, attention_mask=mask)
    np.testing.assert_allclose(ours[0, 4:], NumpyModel(config, weights, np.float64).logits(tokens[0, 4:]), atol=1e-12)
    model = _transformers_model(config, weights, "float64")
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    with _float64_transformers(), torch.no_grad():
        theirs = model(
            input_ids=torch.from_numpy(tokens),
            attention_mask=torch.from_numpy(mask),
            position_ids=torch.from_numpy(positions),
            use_cache=False,
        ).logits.numpy()
    real = mask.astype(bool)  # a padded position's logits are nobody's
    assert _relative_error(theirs[real], ours[real]) <= FLOAT64_AGREEMENT


@needs.transformers
def test_gemma2_without_a_window_runs_in_transformers_and_equals_the_reference() -> None:
    """Gemma2Model builds its sliding mask for every config and refused the null `sliding_window`
    `to_hf_dict` wrote for a model without one (ValueError); every layer is full attention here."""
    config = family_configs_example("gemma2", n_layers=2)
    assert config.to_transformers().layer_types == ["full_attention", "full_attention"]
    weights = init_weights(config, seed=9, scale=0.5)
    tokens = np.random.default_rng(7).integers(0, config.vocab_size, 30)
    found = _transformers_logits(_transformers_model(config, weights, "float64"), tokens, "float64")
    assert _relative_error(found, NumpyModel(config, weights, np.float64).logits(tokens)) <= FLOAT64_AGREEMENT


@needs.transformers
def test_transformers_geglu_tail_in_bfloat16_is_within_the_trace_s_bound() -> None:
    """Gemma's gate -3.6 or below: transformers' tanh GELU in bfloat16 loses its tail (1 + tanh
    cancels), so the error of gelu(gate) * up grows with 0.5 |gate| |up|, not with the result, as
    GPT-2's GELU's does; judged by its own size (a SwiGLU family's floor) the correct model fails."""
    import torch

    config = family_configs_example("gemma", d_ff=1)
    weights = init_weights(config, seed=373, scale=1.0)
    tokens = np.array([0])
    expected = NumpyModel(config, weights, np.float64).trace(tokens)
    assert -6 < expected["layers.0.mlp_gate"].item() < -3.6
    model = _transformers_model(config, weights, "bfloat16")
    captured: dict[str, np.ndarray] = {}
    model.model.layers[0].mlp.down_proj.register_forward_hook(
        lambda module, inputs, output: captured.update(act=inputs[0][0].float().numpy())
    )
    with torch.no_grad():
        model(input_ids=torch.from_numpy(tokens[None]))
    trace = {"layers.0.mlp_act": captured["act"]}

    def ratio(family: str) -> float:
        compared = localize(trace, expected, precision=BFLOAT16, family=family).stages
        return next(s.ratio for s in compared if s.stage == "layers.0.mlp_act")

    assert ratio("gemma") <= 1
    assert ratio("llama") > 1


@pytest.mark.parametrize("family", ROPE_FAMILIES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_the_trace_has_every_stage_of_the_switches_and_its_stages_meet_every_weight(
    family: str, data: st.DataObject
) -> None:
    config = data.draw(family_configs(family, 6), label="config")
    weights = init_weights(config)
    trace = NumpyModel(config, weights).trace(np.arange(6) % config.vocab_size)
    assert {name: value.shape for name, value in trace.items()} == stages.stage_shapes(config, 6)
    assert list(trace) == list(stages.stage_shapes(config, 6))
    met = [name for stage in trace for name in stages.stage_weights(config, stage)]
    assert sorted(set(met)) == sorted(weights), "a weight no stage meets, or a stage meeting no such weight"
    for i in range(config.n_layers):
        ops = stages.layer_ops(config, i)
        assert ("q_norm" in ops and "k_norm" in ops) == config.qk_norm
        assert ("attn_post_norm" in ops and "mlp_post_norm" in ops) == config.sandwich_norm
        assert ("router_probs" in ops) == config.is_moe_layer(i) != ("mlp_gate" in ops)


def _float64_error(config: ModelConfig, weights: Weights, tokens: np.ndarray, reference: ModelConfig) -> float:
    """How far the float64 reference of `reference` (a config, or a broken reference under a patch) is
    from transformers' float64 model of `config`, relative to the largest logit."""
    found = _transformers_logits(_transformers_model(config, weights, "float64"), tokens, "float64")
    return _relative_error(NumpyModel(reference, weights, np.float64).logits(tokens), found)


def _top_1(probs: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-probs, axis=-1, kind="stable")[..., :1]


def _router_over_tokens(h: np.ndarray, router: np.ndarray) -> np.ndarray:
    return L.softmax(L.linear(h, router.T), axis=-2)


def _swapped_expert_names(c: ModelConfig, i: int, e: int) -> tuple[str, str, str]:
    gate, up, down = expert_names(c, i, e)
    return up, gate, down


_EXPERTS = {"n_experts": 4, "top_k": 2}
_GATE_UP, _FUSED_QKV = llama.gate_up, llama.fused_qkv_split
# Each new piece of the reference broken on purpose: (family, switches, what breaks, the patch (module,
# attribute, replacement) or the switches the broken reference runs with instead).
_BROKEN: dict[str, tuple[str, dict[str, Any], tuple[Any, str, Any] | dict[str, Any]]] = {
    "top-1 instead of top-2": ("mixtral", _EXPERTS, (L, "top_k_experts", _top_1)),
    "no renormalisation where Mixtral renormalises": ("mixtral", _EXPERTS, (L, "renormalise", lambda w: w)),
    "renormalised where Qwen2-MoE does not": ("qwen2_moe", _EXPERTS, {"norm_topk": True}),
    "router softmax over tokens": ("mixtral", _EXPERTS, (L, "router_probs", _router_over_tokens)),
    "an expert's gate and up swapped (w1, w3)": ("mixtral", _EXPERTS, (llama, "expert_names", _swapped_expert_names)),
    "shared expert ungated": (
        "qwen2_moe", {**_EXPERTS, "d_shared_expert": 12}, (L, "sigmoid_gated", lambda out, h, gate: out)
    ),
    "gate and up swapped in the fused matrix": ("phi3", {}, (llama, "gate_up", lambda *a: _GATE_UP(*a)[::-1])),
    "q and k swapped in the fused matrix": (
        "phi3", {"n_kv_heads": 2}, (llama, "fused_qkv_split", lambda *a: [_FUSED_QKV(*a)[i] for i in (1, 0, 2)])
    ),
    "partial rotary rotating the whole head": ("phi3", {"rotary_dim": 4}, {"rotary_dim": None}),
    "interleaved pairs read as rotate-half": ("glm", {}, (L, "apply_rope_interleaved", L.apply_rope)),
    "GLM's partial rotary rotating the whole head": ("glm", {"rotary_dim": 4}, {"rotary_dim": None}),
}  # fmt: skip


@needs.transformers
@pytest.mark.parametrize("broken", list(_BROKEN))
def test_each_new_piece_of_the_reference_broken_on_purpose_is_caught_by_transformers(broken: str) -> None:
    family, switches, breaking = _BROKEN[broken]
    config = family_configs_example(family, **switches).replace(n_layers=2)
    weights = init_weights(config, seed=10, scale=0.5)
    tokens = np.random.default_rng(8).integers(0, config.vocab_size, 20)
    assert _float64_error(config, weights, tokens, config) <= FLOAT64_AGREEMENT  # the intact reference
    if isinstance(breaking, dict):
        error = _float64_error(config, weights, tokens, config.replace(**breaking))
    else:
        module, name, replacement = breaking
        with mock.patch.object(module, name, replacement):
            error = _float64_error(config, weights, tokens, config)
    assert error > 1e-4, f"{broken}: the broken reference is within {error:.2g} of transformers"


def _other_choice(probs: np.ndarray, k: int) -> np.ndarray:
    """Each token's top k experts with its k-th replaced by its (k+1)-th: the other side of a near-tie."""
    ranked = np.argsort(-probs, axis=-1, kind="stable")
    return np.concatenate([ranked[..., : k - 1], ranked[..., k : k + 1]], axis=-1)


@needs.transformers
@pytest.mark.parametrize(("family", "switches"), [
    ("mixtral", {"n_experts": 4, "top_k": 2}),
    ("qwen2_moe", {"n_experts": 5, "top_k": 3, "d_shared_expert": 12, "d_expert": 8, "dense_layers": (1,)}),
    ("qwen2_moe", {"n_experts": 3, "top_k": 1, "norm_topk": True}),
])  # fmt: skip
def test_routes_compute_the_oracle_of_another_choice_as_transformers_forced_to_it(
    family: str, switches: dict[str, Any]
) -> None:
    """`routes` makes each layer use the other side of every token's k-th / (k+1)-th split; transformers'
    routers forced to the same experts (their own probabilities, renormalised where the family does) agree."""
    import torch

    config = family_configs_example(family, **{"n_layers": 3, **switches})
    weights = init_weights(config, seed=11, scale=0.5)
    tokens = np.random.default_rng(9).integers(0, config.vocab_size, 16)
    model = NumpyModel(config, weights, np.float64)
    routes: dict[int, np.ndarray] = {}
    for layer in [i for i in range(config.n_layers) if config.is_moe_layer(i)]:  # each sees the earlier overrides
        routes[layer] = _other_choice(model.router_probs(tokens, routes=routes)[layer], config.top_k)
    expected = model.logits(tokens, routes=routes)
    own = {i: L.top_k_experts(p, config.top_k) for i, p in model.router_probs(tokens).items()}
    np.testing.assert_array_equal(model.logits(tokens, routes=own), model.logits(tokens))
    assert _relative_error(expected, model.logits(tokens)) > 1e-4, "the other choice changes the logits"

    hf = _transformers_model(config, weights, "float64")

    def force(module: Any, args: Any, output: Any, layer: int) -> tuple[Any, Any, Any]:
        logits = output[0]
        chosen = torch.from_numpy(routes[layer].reshape(-1, config.top_k))
        scores = torch.softmax(logits, dim=-1).gather(-1, chosen)
        return logits, scores / scores.sum(-1, keepdim=True) if config.norm_topk else scores, chosen

    for layer in routes:
        hf.model.layers[layer].mlp.gate.register_forward_hook(lambda m, a, o, layer=layer: force(m, a, o, layer))
    assert _relative_error(_transformers_logits(hf, tokens, "float64"), expected) <= FLOAT64_AGREEMENT


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ({1: np.zeros((6, 2), int)}, "layer 1 is not a MoE layer"),
        ({0: np.zeros((5, 2), int)}, "shape (5, 2) is not [B, T, top_k] = (1, 6, 2)"),
        ({0: np.full((6, 2), 4)}, "expert indices must be integers in [0, 4)"),
        ({0: np.zeros((6, 2), int)}, "a token chooses the same expert twice"),
    ],
)
def test_routes_that_cannot_be_a_choice_are_refused_naming_the_layer(routes: dict[int, Any], message: str) -> None:
    config = family_configs_example("qwen2_moe", n_experts=4, top_k=2, dense_layers=(1,), n_layers=2)
    model = NumpyModel(config, init_weights(config), np.float64)
    with pytest.raises(InputError, match=re.escape(message)):
        model.logits(np.arange(6), routes=routes)


@pytest.mark.parametrize("d_model", [16, 64, 256])
def test_initial_routers_vary_across_tokens_and_never_tie_in_float64(d_model: int) -> None:
    """Router rows of norm ~2 (`init_weights`): the k-th and (k+1)-th probabilities of every token stay
    far apart in float64 rounding (measured: smallest gap 1e-4 over 60 layers of 30 tokens), and the
    tokens of a sequence choose different expert sets in every layer (2 to 14 of them over 30 tokens: at
    d_model 256 a later layer's inputs share much of their direction, ~0.8 correlation, measured)."""
    config = family_configs_example("mixtral", n_experts=8, top_k=2, n_layers=2).replace(d_model=d_model)
    for seed in range(5):
        model = NumpyModel(config, init_weights(config, seed=seed, scale=0.02), np.float64)
        for probs in model.router_probs(np.random.default_rng(seed).integers(0, config.vocab_size, 30)).values():
            ranked = np.sort(probs, axis=-1)[:, ::-1]
            assert (ranked[:, 1] - ranked[:, 2]).min() > 1e-8
            assert len({tuple(sorted(row)) for row in L.top_k_experts(probs, 2)}) >= 2


@needs.transformers
@pytest.mark.parametrize(("family", "switches"), [
    ("mixtral", {"n_experts": 4, "top_k": 2}),
    ("qwen2_moe", {"n_experts": 4, "top_k": 3, "d_expert": 8, "d_shared_expert": 12, "dense_layers": (1,)}),
    ("phi3", {"rotary_dim": 4, "n_kv_heads": 2}),
    ("glm", {"rotary_dim": 6, "head_dim": 10, "qkv_bias": True}),
])  # fmt: skip
def test_the_issue27_trace_stages_equal_transformers_modules(family: str, switches: dict[str, Any]) -> None:
    """router_probs (the softmax of transformers' router logits), a MoE layer's mlp_out, q/k/v sliced from
    the fused qkv_proj, gate/up halves of gate_up_proj, and q_rope/k_rope of partial rotary (rotate-half or
    interleaved), read from transformers' modules and its own apply_rotary_pos_emb."""
    import importlib

    config = family_configs_example(family, **{"n_layers": 2, **switches})
    weights = init_weights(config, seed=12, scale=0.5)
    tokens = np.random.default_rng(10).integers(0, config.vocab_size, 10)
    trace = NumpyModel(config, weights, np.float64).trace(tokens)
    assert list(trace) == list(stages.stage_shapes(config, len(tokens)))
    model = _transformers_model(config, weights, "float64")
    captured: dict[str, np.ndarray] = {}
    T, q_end, kv = len(tokens), config.n_heads * config.d_head, config.n_kv_heads * config.d_head
    half, n_heads, n_kv = config.d_ff, config.n_heads, config.n_kv_heads

    def heads(x: np.ndarray, n: int) -> np.ndarray:
        return x.reshape(T, n, -1).transpose(1, 0, 2)

    def keep(path: str, read: Any) -> None:
        """Capture `read(output as NumPy, batch row 0)` (a {stage: array} dict) from module `path`."""
        model.get_submodule(path).register_forward_hook(lambda m, a, out: captured.update(read(out[0].numpy())))

    for i in range(config.n_layers):
        at, layer = functools.partial(stages.layer_stage, i), f"model.layers.{i}."
        if config.is_moe_layer(i):  # the router returns its logits first
            keep(layer + "mlp.gate", lambda logits, at=at: {at("router_probs"): L.softmax(logits)})
        keep(layer + "mlp", lambda out, at=at: {at("mlp_out"): out})
        if config.fused_qkv:  # rows q, then k, then v
            q, k, v = (at(op) for op in "qkv")
            keep(layer + "self_attn.qkv_proj", lambda out, q=q, k=k, v=v: {
                q: heads(out[:, :q_end], n_heads), k: heads(out[:, q_end : q_end + kv], n_kv),
                v: heads(out[:, q_end + kv :], n_kv),
            })  # fmt: skip
        if config.fused_gate_up:  # the gate's rows first
            gate, up = at("mlp_gate"), at("mlp_up")
            keep(layer + "mlp.gate_up_proj", lambda out, g=gate, u=up: {g: out[:, :half], u: out[:, half:]})
    module = importlib.import_module(type(model).__module__)
    rotate, calls = module.apply_rotary_pos_emb, []

    def rotated(*args: Any, **kwargs: Any) -> Any:
        q, k = rotate(*args, **kwargs)
        i = len(calls)
        calls.append(i)
        captured.update({stages.layer_stage(i, "q_rope"): q[0].numpy(), stages.layer_stage(i, "k_rope"): k[0].numpy()})
        return q, k

    with mock.patch.object(module, "apply_rotary_pos_emb", rotated):
        logits = _transformers_logits(model, tokens, "float64")
    np.testing.assert_allclose(trace[stages.LOGITS], logits, rtol=0, atol=1e-12)
    ops = {stages.split_stage(name)[1] for name in captured}
    assert {"mlp_out", "q_rope", "k_rope"} <= ops and ("router_probs" in ops) == (config.n_experts > 0)
    assert ({"q", "k", "v"} <= ops) == config.fused_qkv and ({"mlp_gate", "mlp_up"} <= ops) == config.fused_gate_up
    for name, value in captured.items():
        np.testing.assert_allclose(trace[name], value, rtol=0, atol=1e-12, err_msg=name)


def test_a_trace_takes_routes_as_logits_does() -> None:
    config = family_configs_example("mixtral", n_experts=4, top_k=2, n_layers=2)
    model = NumpyModel(config, init_weights(config, seed=13, scale=0.5), np.float64)
    tokens = np.random.default_rng(11).integers(0, config.vocab_size, 9)
    routes = {1: _other_choice(model.router_probs(tokens)[1], config.top_k)}
    trace = model.trace(tokens, routes=routes)
    np.testing.assert_array_equal(trace[stages.LOGITS], model.logits(tokens, routes=routes))
    assert not np.array_equal(trace[stages.LOGITS], model.logits(tokens))
    np.testing.assert_array_equal(trace["layers.1.router_probs"], model.router_probs(tokens)[1])


@pytest.mark.parametrize("rounding", [None, R.BFLOAT16])
def test_the_experts_stage_holds_the_experts_each_token_uses(rounding: R.Rounding | None) -> None:
    """Each MoE layer's `experts` stage is int [T, top_k]: the router's top-k, most probable first, or the
    experts `routes` gives the layer; never rounded (in bfloat16 too), and absent from a dense layer."""
    config = family_configs_example("qwen2_moe", n_experts=4, top_k=2, n_layers=2, dense_layers=(1,))
    model = NumpyModel(config, init_weights(config, seed=15, scale=0.5), np.float32, rounding=rounding)
    tokens = np.random.default_rng(12).integers(0, config.vocab_size, 9)
    trace = model.trace(tokens)
    chosen = trace["layers.0.experts"]
    assert chosen.shape == (9, 2) and np.issubdtype(chosen.dtype, np.integer) and "layers.1.experts" not in trace
    np.testing.assert_array_equal(chosen, L.top_k_experts(trace["layers.0.router_probs"], 2))
    routes = {0: _other_choice(trace["layers.0.router_probs"], config.top_k)}
    np.testing.assert_array_equal(model.trace(tokens, routes=routes)["layers.0.experts"], routes[0])


def test_router_probabilities_stay_float32_in_a_bfloat16_pass() -> None:
    """transformers takes the router's softmax in float32 (`.float()`, dtype=torch.float) whatever the
    model's dtype: rounded to bfloat16, probabilities 0.3 apart by less than 2^-9 would tie, and the
    top-k choice would read ties no model has. The stages around it are rounded as before."""
    config = family_configs_example("qwen2_moe", n_experts=8, top_k=2)
    trace = NumpyModel(config, init_weights(config, seed=14), np.float32, rounding=R.BFLOAT16).trace(np.arange(12))
    probs, h = trace["layers.0.router_probs"], trace["layers.0.mlp_norm"]
    assert not np.array_equal(R.to_bfloat16(probs), probs)
    np.testing.assert_array_equal(R.to_bfloat16(h), h)


@pytest.mark.parametrize("rounding", [R.BFLOAT16, R.FLOAT16, R.TF32, R.q8_0_rounding(8, float16_scales=True)])
def test_one_expert_of_one_is_a_dense_mlp_at_every_precision_bit_for_bit(rounding: R.Rounding) -> None:
    """A Mixtral layer with a single expert (weight exactly 1) computes what a Llama MLP with the same weights
    does, rounded the same way: each expert's gate, up and product rounded as a dense layer's stages are."""
    llama_config = family_configs_example("llama", n_layers=2)
    mixtral_config = family_configs_example("mixtral", n_layers=2, n_experts=1, top_k=1)
    dense = init_weights(llama_config, seed=15, scale=0.5)
    expert = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
    routed = {}
    for name, array in dense.items():
        layer, _, rest = name.removeprefix("model.layers.").partition(".")
        if rest.startswith("mlp."):
            routed[f"model.layers.{layer}.block_sparse_moe.experts.0.{expert[rest[4:-7]]}.weight"] = array
            routed[f"model.layers.{layer}.block_sparse_moe.gate.weight"] = np.ones((1, 16), np.float32)
        else:
            routed[name] = array
    tokens = np.arange(10) % llama_config.vocab_size
    expected = NumpyModel(llama_config, dense, np.float32, rounding=rounding).logits(tokens)
    found = NumpyModel(mixtral_config, routed, np.float32, rounding=rounding).logits(tokens)
    np.testing.assert_array_equal(found, expected)
