"""A GPT-2 in the style of picoGPT (plain NumPy functions, one sequence at a time, no KV cache), and
its adapter as a new user would write it from the docs: the model is left as it is, the factory
renames the canonical weights into its parameter tree and raises `Unsupported` for what the code
cannot express (an untied classifier, another eps). It declares no constraints: the probes find them.

    --model tests.adapters.picogpt:build
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verifier import Constraints, ModelConfig, Unsupported

# ---- the model: a list of token ids in, [n_seq, n_vocab] out ----------------------------------


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mean, variance = np.mean(x, axis=-1, keepdims=True), np.var(x, axis=-1, keepdims=True)
    return g * (x - mean) / np.sqrt(variance + eps) + b


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:  # [m, in] @ [in, out] + [out]
    return x @ w + b


def ffn(x: np.ndarray, c_fc: dict, c_proj: dict) -> np.ndarray:  # [n_seq, n_embd] -> [n_seq, n_embd]
    return linear(gelu(linear(x, **c_fc)), **c_proj)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return softmax(q @ k.T / np.sqrt(q.shape[-1]) + mask) @ v  # [n_seq, d_head]


def mha(x: np.ndarray, c_attn: dict, c_proj: dict, n_head: int) -> np.ndarray:
    qkv = np.split(linear(x, **c_attn), 3, axis=-1)  # 3 x [n_seq, n_embd]
    heads = [np.split(t, n_head, axis=-1) for t in qkv]  # 3 x n_head x [n_seq, d_head]
    mask = (1 - np.tri(x.shape[0], dtype=x.dtype)) * -1e10  # [n_seq, n_seq]
    out = np.hstack([attention(q, k, v, mask) for q, k, v in zip(*heads, strict=True)])
    return linear(out, **c_proj)


def transformer_block(x: np.ndarray, mlp: dict, attn: dict, ln_1: dict, ln_2: dict, n_head: int) -> np.ndarray:
    x = x + mha(layer_norm(x, **ln_1), **attn, n_head=n_head)
    return x + ffn(layer_norm(x, **ln_2), **mlp)


def gpt2(inputs: list[int], wte: np.ndarray, wpe: np.ndarray, blocks: list, ln_f: dict, n_head: int) -> np.ndarray:
    x = wte[inputs] + wpe[range(len(inputs))]  # [n_seq, n_embd]
    for block in blocks:
        x = transformer_block(x, **block, n_head=n_head)
    return layer_norm(x, **ln_f) @ wte.T  # [n_seq, n_vocab]


# ---- the adapter ----------------------------------------------------------------------------


class PicoGPT:
    capabilities = frozenset({"logits", "unbatched"})  # gpt2() takes one list of ids

    def __init__(self, params: dict[str, Any], n_head: int) -> None:
        self.params, self.n_head = params, n_head

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        return gpt2([int(t) for t in tokens], **self.params, n_head=self.n_head)


def build(config: ModelConfig, weights: dict[str, np.ndarray]) -> PicoGPT:
    if config.family != "gpt2":
        raise Unsupported("picoGPT is GPT-2 only")
    if not config.tie_embeddings:
        raise Unsupported("picoGPT's classifier is the token embedding (wte.T)")
    if config.norm_eps != 1e-5:
        raise Unsupported(f"picoGPT's layer_norm has eps 1e-5, not {config.norm_eps:g}")

    def ln(prefix: str) -> dict[str, np.ndarray]:
        return {"g": weights[f"{prefix}.weight"], "b": weights[f"{prefix}.bias"]}

    def conv(prefix: str) -> dict[str, np.ndarray]:  # transformers' Conv1D stores [in, out], as picoGPT reads it
        return {"w": weights[f"{prefix}.weight"], "b": weights[f"{prefix}.bias"]}

    blocks = [
        {
            "ln_1": ln(f"transformer.h.{i}.ln_1"),
            "attn": {
                "c_attn": conv(f"transformer.h.{i}.attn.c_attn"),
                "c_proj": conv(f"transformer.h.{i}.attn.c_proj"),
            },
            "ln_2": ln(f"transformer.h.{i}.ln_2"),
            "mlp": {"c_fc": conv(f"transformer.h.{i}.mlp.c_fc"), "c_proj": conv(f"transformer.h.{i}.mlp.c_proj")},
        }
        for i in range(config.n_layers)
    ]
    params = {"wte": weights["transformer.wte.weight"], "wpe": weights["transformer.wpe.weight"], "blocks": blocks,
              "ln_f": ln("transformer.ln_f")}  # fmt: skip
    return PicoGPT(params, config.n_heads)


def build_124m_only(config: ModelConfig, weights: dict[str, np.ndarray]) -> PicoGPT:
    """The same, as a user with GPT-2 small's hparams.json hard-coded writes it: it refuses every other size."""
    small = {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12}
    found = {"n_vocab": config.vocab_size, "n_ctx": config.n_ctx, "n_embd": config.d_model,
             "n_head": config.n_heads, "n_layer": config.n_layers}  # fmt: skip
    if found != small:
        raise Unsupported(f"hparams are GPT-2 small's {small}, not {found}")
    return build(config, weights)


def build_in_blocks_of_32(config: ModelConfig, weights: dict[str, np.ndarray]) -> PicoGPT:
    """The same, as a port to a block-quantized format stores it (rows of 32, as llama.cpp's Q8_0):
    it refuses a config whose matrix input widths are not multiples of 32, and declares so."""
    ragged = {name: width for name, width in config.matrix_inputs().items() if width % 32}
    if ragged:
        raise Unsupported(f"rows of 32 cannot hold matrix inputs {ragged}")
    return build(config, weights)


build_in_blocks_of_32.constraints = Constraints(families=("gpt2",), block=32)  # type: ignore[attr-defined]


class _ShortBuffers(PicoGPT):
    def logits(self, tokens: np.ndarray) -> np.ndarray:
        if len(tokens) > 16:  # as CTranslate2's Mistral past its window: a buffer sized for fewer
            raise ValueError(f"buffer to copy is of size {len(tokens)} but current storage size is 16")
        return super().logits(tokens)


def build_short_buffers(config: ModelConfig, weights: dict[str, np.ndarray]) -> PicoGPT:
    """The same with buffers for 16 positions: it raises on a longer sequence (a broken contract)."""
    model = build(config, weights)
    return _ShortBuffers(model.params, model.n_head)
