"""The mutants' base implementation is correct: in float64 it equals `transformers` (float64, eager
attention) on every family, with every switch the family allows turned on, so that a mutant's
failure is its own bug's. `transformers` is the check here, not the suite's reference: the two
NumPy implementations are independent and neither is checked against the other."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.meta.mutants.base import Transformer
from verifier.model.config import HF_CLASSES, ModelConfig, RopeScaling
from verifier.model.weights import init_weights

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

_SIZES = dict(vocab_size=97, n_ctx=64, d_model=32, n_layers=3, n_heads=4, d_ff=48, norm_eps=1e-6, tie_embeddings=False)
_LLAMA3 = RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_n_ctx=16)
_LAYERS = ("sliding_attention", "full_attention", "sliding_attention")
# Per family, a config with each switch it allows set where it shows: windows shorter than T, caps
# that bite at the test's weight scale, rope scaling whose original context the positions pass.
RICH = {
    "gpt2": ModelConfig(family="gpt2", n_kv_heads=4, **_SIZES),
    "llama": ModelConfig(family="llama", n_kv_heads=2, head_dim=6, rope_scaling=_LLAMA3, qkv_bias=True, o_bias=True,
                         rope_theta=500000.0, **_SIZES),
    "mistral": ModelConfig(family="mistral", n_kv_heads=2, sliding_window=5,
                           rope_scaling=RopeScaling("linear", factor=4.0), **_SIZES),
    "qwen2": ModelConfig(family="qwen2", n_kv_heads=1, qkv_bias=True, sliding_window=4, layer_types=_LAYERS, **_SIZES),
    "qwen3": ModelConfig(family="qwen3", n_kv_heads=2, qk_norm=True, head_dim=10, qkv_bias=True, o_bias=True,
                         sliding_window=6, layer_types=_LAYERS, rope_scaling=_LLAMA3, **_SIZES),
    "gemma": ModelConfig(family="gemma", n_kv_heads=1, head_dim=12, mlp_act="gelu_tanh", norm_plus_one=True,
                         embed_scale=True, qkv_bias=True, o_bias=True, **_SIZES),
    "gemma2": ModelConfig(family="gemma2", n_kv_heads=2, head_dim=8, mlp_act="gelu_tanh", norm_plus_one=True,
                          embed_scale=True, sandwich_norm=True, sliding_window=5, layer_types=_LAYERS,
                          attn_softcap=2.0, final_softcap=3.0, query_scale=20, **_SIZES),
    # issue 27: routed experts (top-2 of 4, renormalised), windows; Qwen2-MoE's top-2 of 4 unnormalised, its
    # own expert size, a shared expert and a dense layer; Phi-3's fused matrices and partial rotary;
    # GLM's interleaved partial rotary with fused gate/up and q/k/v biases
    "mixtral": ModelConfig(family="mixtral", n_kv_heads=2, n_experts=4, top_k=2, norm_topk=True, sliding_window=6,
                           **_SIZES),
    "qwen2_moe": ModelConfig(family="qwen2_moe", n_kv_heads=2, qkv_bias=True, n_experts=4, top_k=2, d_expert=20,
                             d_shared_expert=24, dense_layers=(1,), **_SIZES),
    "phi3": ModelConfig(family="phi3", n_kv_heads=2, fused_qkv=True, fused_gate_up=True, rotary_dim=4, **_SIZES),
    "glm": ModelConfig(family="glm", n_kv_heads=2, head_dim=10, qkv_bias=True, fused_gate_up=True, rotary_dim=6,
                       rope_pairs="interleaved", **_SIZES),
}  # fmt: skip


def _hf_config(config: ModelConfig) -> Any:
    """The `transformers` config of `config`, written here from transformers' config classes for the
    families of issue 27 (independently of `ModelConfig.to_transformers`)."""
    c = config
    if c.family not in ("mixtral", "qwen2_moe", "phi3", "glm"):
        return c.to_transformers()
    fields: dict[str, Any] = dict(
        vocab_size=c.vocab_size, max_position_embeddings=c.n_ctx, hidden_size=c.d_model, num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads, intermediate_size=c.d_ff,
        rms_norm_eps=c.norm_eps, tie_word_embeddings=c.tie_embeddings, hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
    )  # fmt: skip
    if c.family == "mixtral":
        fields |= dict(num_local_experts=c.n_experts, num_experts_per_tok=c.top_k, sliding_window=c.sliding_window,
                       head_dim=c.d_head)  # fmt: skip
    elif c.family == "qwen2_moe":
        fields |= dict(num_experts=c.n_experts, num_experts_per_tok=c.top_k, moe_intermediate_size=c.expert_d_ff,
                       norm_topk_prob=c.norm_topk, shared_expert_intermediate_size=c.d_shared_expert,
                       mlp_only_layers=list(c.dense_layers), decoder_sparse_step=1,
                       use_sliding_window=False)  # fmt: skip
    else:
        fields["rope_parameters"]["partial_rotary_factor"] = c.rotated_dims / c.d_head
        if c.family == "glm":
            fields |= dict(head_dim=c.d_head, attention_bias=c.qkv_bias, pad_token_id=0, eos_token_id=0, bos_token_id=0)
        else:
            fields |= dict(sliding_window=c.sliding_window, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    return getattr(transformers, HF_CLASSES[config.family][0])(**fields)


def _transformers(config: ModelConfig) -> Any:
    model = getattr(transformers, HF_CLASSES[config.family][1])._from_config(
        _hf_config(config), dtype=torch.float64, attn_implementation="eager", experts_implementation="eager"
    )
    if config.family == "mixtral":  # its router takes `router_logits.float()`: here in the logits' dtype
        for layer in model.model.layers:
            router = layer.mlp.gate

            def forward(h: Any, r: Any = router) -> Any:
                logits = torch.nn.functional.linear(h.reshape(-1, r.hidden_dim), r.weight)
                top, index = torch.topk(torch.softmax(logits, dim=-1), r.top_k, dim=-1)
                return logits, top / top.sum(-1, keepdim=True), index

            router.forward = forward
    return model


def _stacked(config: ModelConfig, state: dict[str, Any]) -> dict[str, Any]:
    """The published expert names as transformers 5 holds them in memory: each layer's experts stacked
    into `mlp.experts.gate_up_proj` [E, 2 f, d] (gate rows first) and `mlp.experts.down_proj` [E, d, f],
    Mixtral's `block_sparse_moe` named `mlp`."""
    if config.n_experts == 0:
        return state
    out = {}
    for name, w in state.items():
        out[name.replace(".block_sparse_moe.", ".mlp.")] = w
    for i in range(config.n_layers):
        if not config.is_moe_layer(i):
            continue
        m = f"model.layers.{i}.mlp.experts."
        names = ("w1", "w3", "w2") if config.family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        gate, up, down = ([out.pop(f"{m}{e}.{n}.weight") for e in range(config.n_experts)] for n in names)
        out[m + "gate_up_proj"] = torch.stack([torch.cat([g, u]) for g, u in zip(gate, up, strict=True)])
        out[m + "down_proj"] = torch.stack(down)
    return out


def _rope_in_float64(model: Any) -> np.ndarray:
    """transformers computes RoPE's angles and their cos/sin in float32 whatever the model's dtype
    (which alone moves float64 logits by ~1e-5): here they are computed in float64 from the same
    inverse frequencies, which are returned (float32 values) for the base to use too."""
    rotary = model.model.rotary_emb
    assert rotary.attention_scaling == 1.0  # default, linear and llama3 RoPE leave cos/sin unscaled
    inv_freq = rotary.inv_freq.double()

    def forward(x: Any, position_ids: Any) -> tuple[Any, Any]:
        angles = position_ids[:, :, None].double() * inv_freq[None, None, :]
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    rotary.forward = forward
    return inv_freq.numpy()


def _norms_in_float64(model: Any) -> None:
    """transformers' RMSNorms compute in float32 whatever the model's dtype (`x.to(torch.float32)`):
    here the same formula runs in the input's dtype (Gemma's classes with their 1 + w)."""
    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RMSNorm"):
            eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
            plus_one = name.startswith("Gemma")

            def forward(x: Any, m: Any = module, eps: float = eps, plus_one: bool = plus_one) -> Any:
                gain = 1.0 + m.weight if plus_one else m.weight
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain

            module.forward = forward


@pytest.fixture
def softmax_in_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' eager attention takes its softmax in float32 (`softmax(..., dtype=torch.float32)`):
    for this test, a float64 input keeps its dtype."""
    softmax = torch.nn.functional.softmax

    def in_input_dtype(x: Any, *args: Any, dtype: Any = None, **kwargs: Any) -> Any:
        return softmax(x, *args, dtype=None if x.dtype == torch.float64 else dtype, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "softmax", in_input_dtype)


def _transformers_logits(config: ModelConfig, weights: dict[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    model = _transformers(config)
    if config.uses_rope:
        _rope_in_float64(model)
        _norms_in_float64(model)
    state = _stacked(config, {name: torch.from_numpy(w.astype(np.float64)) for name, w in weights.items()})
    if config.tie_embeddings:
        state["lm_head.weight"] = state[
            "transformer.wte.weight" if config.family == "gpt2" else "model.embed_tokens.weight"
        ]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    with torch.no_grad():
        return model.eval()(torch.from_numpy(tokens)[None]).logits[0].numpy()


class _WithInvFreq(Transformer):
    """The base with RoPE's inverse frequencies given (`table`), the rest its own."""

    table: np.ndarray | None = None

    def inv_freq(self) -> np.ndarray:
        return super().inv_freq() if self.table is None else self.table


@pytest.mark.parametrize("family", [f for f in RICH if f != "gpt2"])
def test_base_rope_frequencies_equal_transformers(family: str) -> None:
    """The base's inverse frequencies (default, linear and llama3 scaling: its own formula, in
    float64) equal transformers' (computed in float32) to float32's rounding."""
    config = RICH[family]
    expected = _rope_in_float64(_transformers(config))
    np.testing.assert_allclose(Transformer(config, {}, "float64").inv_freq(), expected, rtol=4e-7, atol=0)


@pytest.mark.parametrize("family", list(RICH))
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.usefixtures("softmax_in_float64")
def test_base_equals_transformers_in_float64(family: str, seed: int) -> None:
    config = RICH[family]
    weights = init_weights(config, seed=seed, scale=0.5, dtype=np.float64)
    tokens = np.random.default_rng(seed).integers(0, config.vocab_size, 40)
    expected = _transformers_logits(config, weights, tokens)
    base = _WithInvFreq(config, weights, "float64")
    if config.uses_rope:  # transformers' float32 inverse frequencies (equal to the base's, next test)
        base.table = _rope_in_float64(_transformers(config))
    found = base.logits(tokens)
    np.testing.assert_allclose(found, expected, rtol=0, atol=1e-9 * max(1.0, np.abs(expected).max()))
    # and decoding in chunks after the cache gives the same logits (windows reach back into the cache)
    out, cache = base.decode(tokens[:17])
    rest = [out]
    for t in range(17, 40, 3):
        out, cache = base.decode(tokens[t : t + 3], cache)
        rest.append(out)
    np.testing.assert_allclose(np.concatenate(rest), expected, rtol=0, atol=1e-9 * max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("family", [f for f in RICH if f != "gpt2"])
def test_every_switch_of_the_rich_config_changes_the_logits(family: str) -> None:
    """The configs above turn each switch on where it shows: turning it off moves the logits."""
    config = RICH[family]
    weights = init_weights(config, seed=0, scale=0.5, dtype=np.float64)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, 40)
    logits = Transformer(config, weights, "float64").logits(tokens)
    for switch, off in (("rope_scaling", None), ("sliding_window", None), ("attn_softcap", None),
                        ("final_softcap", None), ("query_scale", None), ("rotary_dim", None)):  # fmt: skip
        if getattr(config, switch) is None:
            continue
        changes = {switch: off, "layer_types": ()} if switch == "sliding_window" else {switch: off}
        other = Transformer(config.replace(**changes), weights, "float64").logits(tokens)
        assert np.abs(other - logits).max() > 1e-3, f"{family}: {switch} does not show"
