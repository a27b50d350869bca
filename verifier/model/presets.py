"""Named configs of published models: the GPT-2 family and llama2.c's TinyStories models.

GPT-2 sizes are from OpenAI's released hparams; llama2.c sizes are from its README table and
`model.py` (hidden size = multiple_of-rounded 2/3 * 4 * dim), with llama2.c's RMSNorm eps 1e-5.
"""

from __future__ import annotations

from verifier.model.config import ModelConfig


def _gpt2(d_model: int, n_layers: int, n_heads: int) -> ModelConfig:
    return ModelConfig(
        family="gpt2",
        vocab_size=50257,
        n_ctx=1024,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        d_ff=4 * d_model,
        norm_eps=1e-5,
        tie_embeddings=True,
    )


def _llama2c(
    d_model: int, d_ff: int, n_layers: int, n_heads: int, n_kv_heads: int, vocab_size: int, n_ctx: int
) -> ModelConfig:
    return ModelConfig(
        family="llama",
        vocab_size=vocab_size,
        n_ctx=n_ctx,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=d_ff,
        norm_eps=1e-5,
        tie_embeddings=True,
    )


PRESETS: dict[str, ModelConfig] = {
    "gpt2": _gpt2(768, 12, 12),
    "gpt2-medium": _gpt2(1024, 24, 16),
    "gpt2-large": _gpt2(1280, 36, 20),
    "gpt2-xl": _gpt2(1600, 48, 25),
    "llama2c-stories260K": _llama2c(64, 172, 5, 8, 4, 512, 512),
    "llama2c-stories15M": _llama2c(288, 768, 6, 6, 6, 32000, 256),
    "llama2c-stories42M": _llama2c(512, 1376, 8, 8, 8, 32000, 1024),
    "llama2c-stories110M": _llama2c(768, 2048, 12, 12, 12, 32000, 1024),
}


class UnknownPresetError(KeyError):
    """A preset name that is not in PRESETS."""

    def __str__(self) -> str:
        return f"unknown preset {self.args[0]!r}; known presets: {', '.join(PRESETS)}"


def preset(name: str) -> ModelConfig:
    """The config of a named preset (see PRESETS)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPresetError(name) from None
