"""Named configs of published models: the GPT-2 family and llama2.c's TinyStories models.

GPT-2 sizes are from OpenAI's released hparams. llama2.c's are its README table (dim, n_layers,
n_heads, n_kv_heads, max context length; the Llama 2 tokenizer's 32,000 tokens, or 512 for the
260K model's own) and `model.py`'s hidden size rule (`llama2c_hidden_dim`; the 260K model was
trained with `--multiple_of=4`, the others with the default 32), with llama2.c's RMSNorm eps 1e-5.
"""

from __future__ import annotations

from verifier.messages import quoted
from verifier.model.config import ModelConfig


def gpt2_d_ff(d_model: int) -> int:
    """GPT-2's MLP width: 4 x d_model."""
    return 4 * d_model


def _gpt2(d_model: int, n_layers: int, n_heads: int) -> ModelConfig:
    return ModelConfig(
        family="gpt2",
        vocab_size=50257,
        n_ctx=1024,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        d_ff=gpt2_d_ff(d_model),
        norm_eps=1e-5,
        tie_embeddings=True,
    )


def llama2c_hidden_dim(dim: int, multiple_of: int = 32) -> int:
    """llama2.c `model.py`'s FFN size: int(2/3 of 4 * dim), rounded up to a multiple of `multiple_of`."""
    hidden_dim = int(2 * (4 * dim) / 3)
    return multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)


def _llama2c(
    d_model: int, n_layers: int, n_heads: int, n_kv_heads: int, n_ctx: int, vocab_size: int, multiple_of: int = 32
) -> ModelConfig:
    return ModelConfig(
        family="llama",
        vocab_size=vocab_size,
        n_ctx=n_ctx,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=llama2c_hidden_dim(d_model, multiple_of),
        norm_eps=1e-5,
        tie_embeddings=True,
    )


PRESETS: dict[str, ModelConfig] = {
    "gpt2": _gpt2(768, 12, 12),
    "gpt2-medium": _gpt2(1024, 24, 16),
    "gpt2-large": _gpt2(1280, 36, 20),
    "gpt2-xl": _gpt2(1600, 48, 25),
    # llama2.c's README table: dim, n_layers, n_heads, n_kv_heads, max context length; vocabulary.
    "llama2c-stories260K": _llama2c(64, 5, 8, 4, 512, 512, multiple_of=4),
    "llama2c-stories15M": _llama2c(288, 6, 6, 6, 256, 32000),
    "llama2c-stories42M": _llama2c(512, 8, 8, 8, 1024, 32000),
    "llama2c-stories110M": _llama2c(768, 12, 12, 12, 1024, 32000),
}


class UnknownPresetError(KeyError):
    """A preset name that is not in PRESETS."""

    def __str__(self) -> str:
        return f"unknown preset {quoted(self.args[0], literal=True)}; known presets: {', '.join(PRESETS)}"


def preset(name: str) -> ModelConfig:
    """The config of a named preset (see PRESETS)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPresetError(name) from None
