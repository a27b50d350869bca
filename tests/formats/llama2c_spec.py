"""llama2.c's exporters as the tests' own spec, written from llama2.c's `export.py` and `model.py`.

Independent of `verifier.formats.llama2c`: weights are held in llama2.c's names and layout
(q/k rows in interleaved pair order), serialised in export.py's order with `struct`, and mapped to
the canonical set with the `permute` of transformers' Llama conversion script.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights

LAYER_KEYS = ("attention_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3")


def random_model(c: ModelConfig, seed: int) -> dict[str, list[np.ndarray] | np.ndarray]:
    """llama2.c-named weights: `tok_embeddings`, `norm`, `output`, and per-layer lists."""
    rng = np.random.default_rng(seed)
    d, kv = c.d_model, c.n_kv_heads * c.d_head

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    shapes = {"attention_norm": (d,), "wq": (d, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, d),
              "ffn_norm": (d,), "w1": (c.d_ff, d), "w2": (d, c.d_ff), "w3": (c.d_ff, d)}  # fmt: skip
    model: dict[str, list[np.ndarray] | np.ndarray] = {
        key: [r(*shape) for _ in range(c.n_layers)] for key, shape in shapes.items()
    }
    model["tok_embeddings"] = r(c.vocab_size, d)
    model["norm"] = r(d)
    model["output"] = model["tok_embeddings"] if c.tie_embeddings else r(c.vocab_size, d)
    return model


def hf_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """transformers' convert_llama_weights_to_hf `permute`: interleaved q/k rows -> rotate-half rows."""
    dim1, dim2 = w.shape
    return w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2).swapaxes(1, 2).reshape(dim1, dim2)


def canonical(c: ModelConfig, m: dict) -> Weights:
    names = {"attention_norm": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
             "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
             "w1": "mlp.gate_proj", "w2": "mlp.down_proj", "w3": "mlp.up_proj"}  # fmt: skip
    out = {"model.embed_tokens.weight": m["tok_embeddings"], "model.norm.weight": m["norm"]}
    for key, name in names.items():
        for i, w in enumerate(m[key]):
            if key in ("wq", "wk"):
                w = hf_permute(w, c.n_heads if key == "wq" else c.n_kv_heads)
            out[f"model.layers.{i}.{name}.weight"] = w
    if not c.tie_embeddings:
        out["lm_head.weight"] = m["output"]
    return out


def freqs(c: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    """model.py's precompute_freqs_cis in float32, as llama2.c computes it (theta 10000)."""
    dim = c.d_head
    f = np.float32(1.0) / (np.float32(c.rope_theta) ** (np.arange(0, dim, 2)[: dim // 2].astype(np.float32) / dim))
    angles = np.outer(np.arange(c.n_ctx, dtype=np.float32), f).astype(np.float32)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _f32(*arrays: np.ndarray) -> bytes:
    return b"".join(np.asarray(a, dtype="<f4").tobytes() for a in arrays)


def _dims(c: ModelConfig) -> tuple[int, ...]:
    return (c.d_model, c.d_ff, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.n_ctx)


def export_legacy(path: Path, c: ModelConfig, m: dict) -> None:
    dims = list(_dims(c))
    dims[5] = dims[5] if c.tie_embeddings else -dims[5]
    out = struct.pack("iiiiiii", *dims) + _f32(m["tok_embeddings"])
    for key in LAYER_KEYS:
        out += _f32(*m[key])
    cos, sin = freqs(c)
    out += _f32(m["norm"], cos, sin)
    if not c.tie_embeddings:
        out += _f32(m["output"])
    path.write_bytes(out)


def _v1_header(c: ModelConfig, version: int) -> bytes:
    return struct.pack("I", 0x616B3432) + struct.pack("i", version) + struct.pack("iiiiiii", *_dims(c))


def export_v1(path: Path, c: ModelConfig, m: dict) -> None:
    header = _v1_header(c, 1) + struct.pack("B", int(c.tie_embeddings))
    out = header + b"\0" * (256 - len(header))
    out += _f32(*m["attention_norm"], *m["ffn_norm"], m["norm"], m["tok_embeddings"])
    for key in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
        out += _f32(*m[key])
    if not c.tie_embeddings:
        out += _f32(m["output"])
    path.write_bytes(out)


def quantize_q80(w: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """export.py's quantize_q80: symmetric int8 per group, scale = max|w| / 127."""
    w = w.reshape(-1, group_size).astype(np.float32)
    scale = np.abs(w).max(axis=1) / np.float32(127.0)
    quant = np.round(w / scale[:, None]).astype(np.int8)
    return quant, scale.astype(np.float32)


def export_v2(path: Path, c: ModelConfig, m: dict, group_size: int = 64) -> int:
    while c.d_model % group_size:
        group_size //= 2
    header = _v1_header(c, 2) + struct.pack("B", int(c.tie_embeddings)) + struct.pack("i", group_size)
    out = header + b"\0" * (256 - len(header))
    out += _f32(*m["attention_norm"], *m["ffn_norm"], m["norm"])
    matrices = [m["tok_embeddings"]] + [w for key in ("wq", "wk", "wv", "wo", "w1", "w2", "w3") for w in m[key]]
    if not c.tie_embeddings:
        matrices.append(m["output"])
    for w in matrices:
        q, s = quantize_q80(w, group_size)
        out += q.tobytes() + _f32(s)
    path.write_bytes(out)
    return group_size
