"""One small config per family with every switch the family has turned on, for the format tests.

Sizes are small but not degenerate: d_head 16 spans the three bands of Llama 3's RoPE scaling
(original context 64: wavelengths 6.3 high, 19.9 and 62.8 between, the rest low), windows are
shorter than the context, Gemma 2 alternates sliding and global layers as its checkpoints do.
"""

from __future__ import annotations

from verifier.model.config import ModelConfig, RopeScaling

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
}  # fmt: skip
