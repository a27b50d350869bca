"""One small config per family with every switch the family has turned on, for the format tests.

Sizes are small but not degenerate: d_head 16 spans the three bands of Llama 3's RoPE scaling
(original context 64: wavelengths 6.3 high, 19.9 and 62.8 between, the rest low), windows are
shorter than the context, Gemma 2 alternates sliding and global layers as its checkpoints do.
The MoE examples route 2 of 4 experts (Qwen2-MoE with its shared expert, a smaller expert size and a
dense layer), Phi-3 and GLM rotate half of each head (GLM's pairs interleaved).

`published_config_json` writes the config.json of the issue-27 families and those added since by hand,
under the keys their `transformers` config classes read (MixtralConfig, Qwen2MoeConfig, ..., SmolLM3Config),
so that a test can build `transformers`' own model of an example without the suite's config writer.
"""

from __future__ import annotations

from typing import Any

from verifier.model.config import HF_CLASSES, ModelConfig, RopeScaling

_BASE = ModelConfig(
    family="llama", vocab_size=96, n_ctx=128, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96,
    norm_eps=1e-5, tie_embeddings=False,
)  # fmt: skip
LLAMA3 = RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_n_ctx=64)

FAMILY_EXAMPLES: dict[str, ModelConfig] = {
    "llama3": _BASE.replace(rope_scaling=LLAMA3, rope_theta=500000.0 / 50),
    "llama-linear-bias": _BASE.replace(rope_scaling=RopeScaling("linear", factor=4.0), qkv_bias=True, o_bias=True),
    "mistral": _BASE.replace(family="mistral", sliding_window=8),
    "qwen2": _BASE.replace(family="qwen2", qkv_bias=True, tie_embeddings=True, rope_theta=1e6),
    "qwen3": _BASE.replace(family="qwen3", qk_norm=True, head_dim=32, tie_embeddings=True, norm_eps=1e-6),
    "gemma": _BASE.replace(
        family="gemma", mlp_act="gelu_tanh", norm_plus_one=True, embed_scale=True, head_dim=32, n_kv_heads=1,
        tie_embeddings=True, norm_eps=1e-6,
    ),
    "gemma2": _BASE.replace(
        family="gemma2", mlp_act="gelu_tanh", norm_plus_one=True, embed_scale=True, sandwich_norm=True,
        tie_embeddings=True, sliding_window=8, layer_types=("sliding_attention", "full_attention"),
        attn_softcap=50.0, final_softcap=30.0, norm_eps=1e-6,
    ),
    "mixtral": _BASE.replace(family="mixtral", n_experts=4, top_k=2, norm_topk=True, rope_theta=1e6),
    "qwen2_moe": _BASE.replace(
        family="qwen2_moe", qkv_bias=True, n_experts=4, top_k=2, d_expert=32, d_shared_expert=64,
        dense_layers=(1,), norm_eps=1e-6,
    ),
    "phi3": _BASE.replace(family="phi3", fused_qkv=True, fused_gate_up=True, rotary_dim=8),
    "glm": _BASE.replace(
        family="glm", fused_gate_up=True, rope_pairs="interleaved", rotary_dim=8, qkv_bias=True, head_dim=32,
        norm_eps=1e-6,
    ),
    "qwen3_moe": _BASE.replace(
        family="qwen3_moe", qk_norm=True, head_dim=32, n_experts=4, top_k=2, d_expert=32, norm_topk=True,
        dense_layers=(1,), norm_eps=1e-6, rope_theta=1e6,
    ),
    # as SmolLM3-3B: RoPE off on every fourth layer (llama.cpp's smollm3 holds no other pattern, nor windows)
    "smollm3": _BASE.replace(family="smollm3", n_layers=4, nope_layers=(3,), tie_embeddings=True, norm_eps=1e-6,
                             rope_theta=5e6),
    # as OLMo 2: untied, q/k norms over the whole projection, norms after the sublayers only
    "olmo2": _BASE.replace(family="olmo2", qk_norm=True, qk_norm_whole=True, sandwich_norm=True, pre_norm=False,
                           norm_eps=1e-6, rope_theta=5e5),
}  # fmt: skip
# The examples of the families issue 27 added, and those added since: their config.json is written by hand too.
NEW_FAMILIES = ("mixtral", "qwen2_moe", "phi3", "glm", "qwen3_moe", "smollm3", "olmo2")


def published_config_json(config: ModelConfig) -> dict[str, Any]:
    """The config.json of a config of one of `NEW_FAMILIES`, keys as `transformers` 5.24 reads them."""
    fields: dict[str, Any] = {
        "architectures": [HF_CLASSES[config.family][1]],
        "model_type": config.family,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.n_ctx,
        "hidden_size": config.d_model,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads,
        "intermediate_size": config.d_ff,
        "rms_norm_eps": config.norm_eps,
        "tie_word_embeddings": config.tie_embeddings,
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    scaling = config.rope_scaling
    if scaling is not None and scaling.kind == "linear":
        fields["rope_parameters"] |= {"rope_type": "linear", "factor": scaling.factor}
    if scaling is not None and scaling.kind == "llama3":
        fields["rope_parameters"] |= {
            "rope_type": "llama3", "factor": scaling.factor, "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor, "original_max_position_embeddings": scaling.original_n_ctx,
        }  # fmt: skip
    if config.rotary_dim is not None:
        fields["rope_parameters"]["partial_rotary_factor"] = config.rotary_dim / config.d_head
    if config.family == "mixtral":
        fields |= {"num_local_experts": config.n_experts, "num_experts_per_tok": config.top_k,
                   "sliding_window": config.sliding_window, "head_dim": config.d_head}  # fmt: skip
    if config.family == "qwen2_moe":
        fields |= {
            "num_experts": config.n_experts,
            "num_experts_per_tok": config.top_k,
            "moe_intermediate_size": config.expert_d_ff,
            "shared_expert_intermediate_size": config.d_shared_expert or 0,
            "norm_topk_prob": config.norm_topk,
            "mlp_only_layers": list(config.dense_layers),
            "decoder_sparse_step": 1,
            "qkv_bias": config.qkv_bias,
            "use_sliding_window": config.sliding_window is not None,
            "sliding_window": config.sliding_window,
            "layer_types": [config.layer_type(i) for i in range(config.n_layers)],
        }
    if config.family == "qwen3_moe":
        fields |= {
            "num_experts": config.n_experts,
            "num_experts_per_tok": config.top_k,
            "moe_intermediate_size": config.expert_d_ff,
            "norm_topk_prob": config.norm_topk,
            "mlp_only_layers": list(config.dense_layers),
            "decoder_sparse_step": 1,
            "head_dim": config.d_head,
            "attention_bias": config.qkv_bias,
            "use_sliding_window": config.sliding_window is not None,
            "sliding_window": config.sliding_window,
        }
    if config.family == "smollm3":  # SmolLM3-3B's keys; pretraining_tp and max_window_layers read by nothing
        fields |= {
            "no_rope_layers": [0 if i in config.nope_layers else 1 for i in range(config.n_layers)],
            "no_rope_layer_interval": 4,
            "use_sliding_window": config.sliding_window is not None,
            "sliding_window": config.sliding_window,
            "layer_types": [config.layer_type(i) for i in range(config.n_layers)],
            "attention_bias": config.o_bias,
            "mlp_bias": False,
            "pretraining_tp": 2,
            "max_window_layers": 28,
        }
    if config.family == "olmo2":
        fields["attention_bias"] = config.o_bias
    if config.family == "phi3":
        fields["sliding_window"] = config.sliding_window
        fields["partial_rotary_factor"] = config.rotated_dims / config.d_head
    if config.family == "glm":
        fields |= {"head_dim": config.d_head, "attention_bias": config.qkv_bias}
        fields["rope_parameters"]["partial_rotary_factor"] = config.rotated_dims / config.d_head
    return fields
