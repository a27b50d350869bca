"""A port that ignores what the families add: for every RoPE family it builds plain Llama (the NumPy
reference on the config with every switch off, reading only the weights plain Llama has, as a
`load_state_dict(strict=False)` would), accepting every config. Fused matrices it splits as it should
(their layout is not what it ignores) and a MoE layer it runs as one dense MLP, its first expert: the
router, top-k and shared expert ignored. Usable as `--model tests.plugin.ignoring:build`; it must fail,
never conform."""

from __future__ import annotations

import numpy as np

from verifier import ModelConfig, NumpyModel, Weights
from verifier.model.config import SWITCH_DEFAULTS
from verifier.model.weights import weight_shapes


def plain(config: ModelConfig) -> ModelConfig:
    """`config` as plain Llama of the same sizes (its head_dim kept, so the weights fit; a MoE config's
    MLP the size of one expert)."""
    if config.family == "gpt2":
        return config
    switches = {name: value for name, value in SWITCH_DEFAULTS.items() if name != "head_dim"}
    return config.replace(family="llama", d_ff=config.expert_d_ff if config.n_experts else config.d_ff, **switches)


def _unfused(config: ModelConfig, weights: Weights) -> Weights:
    """The weights under plain Llama's names: fused q/k/v and gate/up split, expert 0 as the dense MLP."""
    found = dict(weights)
    q, kv = config.n_heads * config.d_head, config.n_kv_heads * config.d_head
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        if config.fused_qkv:
            qkv = weights[p + "self_attn.qkv_proj.weight"]
            for name, rows in zip(("q_proj", "k_proj", "v_proj"), np.split(qkv, [q, q + kv]), strict=True):
                found[f"{p}self_attn.{name}.weight"] = rows
        if config.is_moe_layer(i):
            e = f"{p}block_sparse_moe.experts.0." if config.family == "mixtral" else f"{p}mlp.experts.0."
            names = ("w1", "w3", "w2") if config.family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
            for plain_name, name in zip(("gate_proj", "up_proj", "down_proj"), names, strict=True):
                found[f"{p}mlp.{plain_name}.weight"] = weights[f"{e}{name}.weight"]
        elif config.fused_gate_up:
            gate, up = np.split(weights[p + "mlp.gate_up_proj.weight"], 2)
            found |= {p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up}
    return found


def build(config: ModelConfig, weights: Weights) -> NumpyModel:
    llama = plain(config)
    found = _unfused(config, weights) if config.family != "gpt2" else weights
    # a norm plain Llama has and the family does not (OLMo 2's before the sublayers) keeps its initial gain, 1
    kept = {name: np.ones(shape, np.float32) for name, shape in weight_shapes(llama).items() if name not in found}
    return NumpyModel(llama, {name: found.get(name, kept.get(name)) for name in weight_shapes(llama)})
