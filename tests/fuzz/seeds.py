"""The valid files the fuzzer starts from: one tiny seeded model (or tokenizer) per format the suite
writes, each written by the suite's own writers, held in memory as {relative path: bytes}.

A seed names the paths the readers are given (its targets): a model directory, or the one file a
command would be given. Writing a seed takes about a second in all; `seeds()` caches them.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier.formats import Tokenizer, save_checkpoint, write_tokenizer
from verifier.formats.hf_dir import write_hf_dir
from verifier.model.config import ModelConfig
from verifier.model.presets import preset
from verifier.model.weights import init_weights, weight_shapes

HAVE_GGUF = importlib.util.find_spec("gguf") is not None
NO_GGUF = "the gguf package is not installed (pip install 'lm-verifier[gguf]')"

# As small as each format allows, so a mutation often lands in a header rather than in the weights:
# 2 heads of 8 (one kv head: grouped-query attention), 1 or 2 layers, 16 tokens, 8 positions.
LLAMA = preset("llama2c-stories260K").replace(
    vocab_size=16, n_ctx=8, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32
)
LLAMA_UNTIED = LLAMA.replace(tie_embeddings=False, n_layers=2)
# GPT-2 is written in Q8_0 too, whose blocks are 32 values: its rows are 32 long.
GPT2 = preset("gpt2").replace(vocab_size=16, n_ctx=8, d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32)


@dataclass(frozen=True)
class Seed:
    """A valid input: its files ({relative path: bytes}) and the paths the readers are given ("." is the folder)."""

    format: str
    files: dict[str, bytes]
    targets: tuple[str, ...]

    def __repr__(self) -> str:  # not the bytes
        return f"Seed({self.format}: {', '.join(self.files)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # how Hypothesis shows it
        printer.text(repr(self))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _written(write: object, *args: object, **kwargs: object) -> dict[str, bytes]:
    """The files `write(folder, *args, **kwargs)` leaves in a fresh folder."""
    with tempfile.TemporaryDirectory(prefix="verifier-fuzz-seed-") as tmp:
        write(Path(tmp), *args, **kwargs)  # type: ignore[operator]
        return _files(Path(tmp))


def _hf(folder: Path, config: ModelConfig, max_shard_bytes: int | None = None) -> None:
    write_hf_dir(folder, config, init_weights(config, seed=1), max_shard_bytes=max_shard_bytes)


def _model(folder: Path, name: str, config: ModelConfig, **kwargs: object) -> None:
    save_checkpoint(folder / name, config, init_weights(config, seed=1), **kwargs)  # type: ignore[arg-type]


def _gguf(folder: Path, config: ModelConfig, tensor_type: str) -> None:
    from verifier.formats.gguf import write_gguf

    write_gguf(folder / "model.gguf", config, init_weights(config, seed=1), tensor_type=tensor_type)


def _tokenizer(folder: Path) -> None:
    pieces = (b"<unk>", b"<s>", b"</s>", *(bytes([c]) for c in range(32, 32 + 13)))
    write_tokenizer(folder / "tokenizer.bin", Tokenizer(pieces, tuple(-float(i) for i in range(16)), 5))


def _shard_bytes(config: ModelConfig) -> int:
    """A shard size that cuts `config`'s weights into a few shards."""
    return 4 * sum(math.prod(shape) for shape in weight_shapes(config).values()) // 3


@functools.cache
def seeds() -> dict[str, tuple[Seed, ...]]:
    """Format name -> its valid seeds (GGUF's only where the gguf package is installed)."""
    sharded = _written(_hf, LLAMA_UNTIED, _shard_bytes(LLAMA_UNTIED))  # 4 shards
    first_shard = min(name for name in sharded if name.endswith(".safetensors"))
    found = {
        "safetensors": (
            Seed("safetensors", _written(_hf, LLAMA_UNTIED), (".", "model.safetensors", "config.json")),
            Seed("safetensors", _written(_hf, GPT2), (".", "model.safetensors", "config.json")),
        ),
        "safetensors-sharded": (
            Seed("safetensors-sharded", sharded, (".", "model.safetensors.index.json", first_shard)),
        ),
        "llama2c-v0": (Seed("llama2c-v0", _written(_model, "model.bin", LLAMA, format="llama2c"), ("model.bin",)),),
        "llama2c-v1": (
            Seed(
                "llama2c-v1", _written(_model, "model.bin", LLAMA_UNTIED, format="llama2c", version=1), ("model.bin",)
            ),
        ),
        "llama2c-v2": (
            Seed("llama2c-v2", _written(_model, "model.bin", LLAMA, format="llama2c", version=2), ("model.bin",)),
        ),
        "tokenizer.bin": (Seed("tokenizer.bin", _written(_tokenizer), ("tokenizer.bin",)),),
    }
    if HAVE_GGUF:
        found["gguf"] = (
            Seed("gguf", _written(_gguf, LLAMA, "F32"), ("model.gguf",)),
            Seed("gguf", _written(_gguf, GPT2, "Q8_0"), ("model.gguf",)),
        )
    return found


FORMATS = (
    "safetensors", "safetensors-sharded", "llama2c-v0", "llama2c-v1", "llama2c-v2", "tokenizer.bin", "gguf",
)  # fmt: skip
