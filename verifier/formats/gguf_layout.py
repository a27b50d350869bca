"""Where each canonical weight goes in llama.cpp's architectures: its GGUF tensor name and how its values
are stored (transposed, q/k rows interleaved, Gemma's 1 + w, experts stacked). Separate from the file's
reading and writing (`verifier.formats.gguf`) so the model mapping is one table to read, with no file I/O."""

from __future__ import annotations

import numpy as np

from verifier.formats.llama2c import to_interleaved, to_rotate_half
from verifier.model.config import ModelConfig
from verifier.model.families import RECORDS
from verifier.model.weights import CLASSIFIER, weight_shapes

# How a canonical matrix is stored: as it is, transposed (GPT-2's Conv1D), or with its q / k rows
# interleaved per head (and the inverse on reading).
_AS_IS, CONV1D, _Q, _K = "as is", "conv1d", "q", "k"

_GPT2_LAYER = {
    "ln_1.weight": ("attn_norm.weight", _AS_IS),
    "ln_1.bias": ("attn_norm.bias", _AS_IS),
    "attn.c_attn.weight": ("attn_qkv.weight", CONV1D),
    "attn.c_attn.bias": ("attn_qkv.bias", _AS_IS),
    "attn.c_proj.weight": ("attn_output.weight", CONV1D),
    "attn.c_proj.bias": ("attn_output.bias", _AS_IS),
    "ln_2.weight": ("ffn_norm.weight", _AS_IS),
    "ln_2.bias": ("ffn_norm.bias", _AS_IS),
    "mlp.c_fc.weight": ("ffn_up.weight", CONV1D),
    "mlp.c_fc.bias": ("ffn_up.bias", _AS_IS),
    "mlp.c_proj.weight": ("ffn_down.weight", CONV1D),
    "mlp.c_proj.bias": ("ffn_down.bias", _AS_IS),
}
# The RoPE families, as llama.cpp's convert_hf_to_gguf.py maps them: the layer's HF name -> GGUF name.
# llama.cpp's `llama` architecture (Llama and Mistral) rotates adjacent pairs (q/k rows interleaved);
# qwen2, qwen3, gemma and gemma2 rotate halves (NEOX), so their q/k are stored as they are.
_ROPE_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    # Phi-3's fused layouts, stored fused (llama.cpp's phi3 splits them: q, k, v rows; gate rows first).
    "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight",
    # A MoE layer: the router, and its shared expert (Qwen2-MoE) with the [1, d_model] gate of its output.
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
# An expert's matrices (Mixtral's w1 gate, w3 up, w2 down; Qwen2-MoE's names) -> the tensor that stacks
# every expert's of a layer, [n_experts, rows, columns], as the converter merges them.
_EXPERT_LAYER = {
    "w1.weight": "ffn_gate_exps.weight",
    "w3.weight": "ffn_up_exps.weight",
    "w2.weight": "ffn_down_exps.weight",
    "gate_proj.weight": "ffn_gate_exps.weight",
    "up_proj.weight": "ffn_up_exps.weight",
    "down_proj.weight": "ffn_down_exps.weight",
}
# Gemma 2's sandwich: its post_attention_layernorm follows attention; pre_feedforward_layernorm is the MLP's.
_SANDWICH_LAYER = _ROPE_LAYER | {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}
_GPT2_TOP = {
    "transformer.wte.weight": "token_embd.weight",
    "transformer.wpe.weight": "position_embd.weight",
    "transformer.ln_f.weight": "output_norm.weight",
    "transformer.ln_f.bias": "output_norm.bias",
}
_ROPE_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}

# The suite's family -> llama.cpp's architecture (`FamilyRecord.gguf`; Mistral is llama.cpp's `llama`, and
# Mixtral `llama` with experts, as its converter writes them).
ARCHITECTURES = {family: record.gguf for family, record in RECORDS.items()}
# the families whose q/k rows llama.cpp's RoPE wants interleaved (convert_hf_to_gguf.py's LlamaModel permutes them)
INTERLEAVED = ("llama", "mistral", "mixtral", "smollm3")
EXPERT = "expert "  # how an expert's matrix is stored: "expert {e}", row e of the layer's stacked tensor
ROPE_FREQS = "rope_freqs.weight"
_PLUS_ONE = "plus one"  # Gemma's norm weights, stored as 1 + w (convert_hf_to_gguf.py adds it; llama.cpp multiplies)


def tensor_names(config: ModelConfig) -> dict[str, tuple[str, str]]:
    """Every canonical weight of `config` -> (its GGUF tensor name, how it is stored)."""
    if config.family == "gpt2":
        names = {canonical: (stored, _AS_IS) for canonical, stored in _GPT2_TOP.items()}
        for i in range(config.n_layers):
            names |= {
                f"transformer.h.{i}.{key}": (f"blk.{i}.{stored}", how) for key, (stored, how) in _GPT2_LAYER.items()
            }
    else:
        layer = _SANDWICH_LAYER if config.sandwich_norm else _ROPE_LAYER
        names = {canonical: (stored, _AS_IS) for canonical, stored in _ROPE_TOP.items()}
        for canonical in weight_shapes(config):
            parts = canonical.split(".", 3)  # model.layers.{i}.{key}
            if parts[:2] != ["model", "layers"]:
                continue
            how = _AS_IS
            if ".experts." in parts[3]:  # block_sparse_moe.experts.{e}.w1.weight, mlp.experts.{e}.up_proj.weight
                expert, key = parts[3].split(".experts.", 1)[1].split(".", 1)
                names[canonical] = (f"blk.{parts[2]}.{_EXPERT_LAYER[key]}", EXPERT + expert)
                continue
            if config.family in INTERLEAVED and parts[3].startswith(("self_attn.q_proj.", "self_attn.k_proj.")):
                how = _Q if "q_proj" in parts[3] else _K
            if config.norm_plus_one and canonical.endswith("norm.weight"):
                how = _PLUS_ONE
            names[canonical] = (f"blk.{parts[2]}.{layer[parts[3]]}", how)
        if config.norm_plus_one:
            names["model.norm.weight"] = (_ROPE_TOP["model.norm.weight"], _PLUS_ONE)
    if not config.tie_embeddings:
        names[CLASSIFIER] = ("output.weight", _AS_IS)  # absent: llama.cpp reads token_embd
    return names


def store(config: ModelConfig, w: np.ndarray, how: str) -> np.ndarray:
    if how == CONV1D:
        return np.ascontiguousarray(w.T)
    if how in (_Q, _K):
        heads = config.n_heads if how == _Q else config.n_kv_heads
        return to_interleaved(w, heads) if w.ndim == 2 else to_interleaved(w[:, None], heads)[:, 0]
    if how == _PLUS_ONE:
        return w + np.float32(1)
    return w


def unstore(config: ModelConfig, w: np.ndarray, how: str) -> np.ndarray:
    if how == CONV1D:
        return np.ascontiguousarray(w.T)
    if how in (_Q, _K):
        heads = config.n_heads if how == _Q else config.n_kv_heads
        return to_rotate_half(w, heads) if w.ndim == 2 else to_rotate_half(w[:, None], heads)[:, 0]
    if how == _PLUS_ONE:
        # Exact for stored values from 0.5 up (s - 1 is a multiple of s's ulp, which |s - 1| <= s holds):
        # 1 + the result is the stored value again, so the model computes what the file's 1 + w gives,
        # though w's bits below the ulp of 1 + w are gone.
        return w - np.float32(1)
    return w


def llama3_rope_factors(config: ModelConfig) -> np.ndarray:
    """llama.cpp's `rope_freqs` of a Llama 3 scaling [d_head / 2]: what each inverse frequency is divided
    by (1 in the high band, `factor` in the low band, interpolated between), as convert_hf_to_gguf.py
    computes it, in float64 then stored float32."""
    scaling = config.rope_scaling
    assert scaling is not None and scaling.kind == "llama3"
    d = config.d_head
    inv_freq = 1.0 / config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    wavelen = 2 * np.pi / inv_freq
    low, high = scaling.original_n_ctx / scaling.low_freq_factor, scaling.original_n_ctx / scaling.high_freq_factor
    smooth = (scaling.original_n_ctx / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    between = 1 / ((1 - smooth) / scaling.factor + smooth)
    factors = np.where(wavelen < high, 1.0, np.where(wavelen > low, scaling.factor, between))
    return factors.astype(np.float32)
