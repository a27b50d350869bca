"""One entry point for every model file: what a path holds, its config, its weights, and writing.

Detection looks at contents, not extensions, except for three names: a `*.json` file is an HF
`config.json` (its directory is the model), `pytorch_model*` is a pickle (legacy pickles have no
magic that a llama2.c header cannot imitate), and a `.bin` file named like `tokenizer*.bin` is a
llama2.c tokenizer, whose layout has no magic to tell it from a model.
"""

from __future__ import annotations

import importlib
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verifier.formats.checkpoint import Checkpoint
from verifier.formats.config_json import read_config_json
from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import read_head
from verifier.formats.hf_dir import check_weight_headers, has_config, map_hf_dir, read_hf_dir, write_hf_dir
from verifier.formats.llama2c import map_llama2c, read_llama2c, read_llama2c_config, write_llama2c
from verifier.formats.llama2c_layout import MAGIC
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights

HF = "hf"  # a directory with config.json, or one of its files
LLAMA2C = "llama2c"
GGUF = "gguf"
TOKENIZER = "llama2c-tokenizer"
WRITE_FORMATS = ("hf", "llama2c", "gguf")
_GGUF_MAGIC = b"GGUF"
_V0_HEADER_BYTES = 28
# Larger than any size of a real model (vocabularies reach 2^18, contexts 2^20), smaller than four
# ASCII characters read as an int32 (at least 0x20202020).
_LARGEST_SIZE = 2**26


def _is_hf_weight_file(path: Path) -> bool:
    """A torch zip archive, a legacy pickle named as transformers names it, or a safetensors file.

    A llama2.c v0 file starts with 7 small int32s, so it never has the zip magic, and read as
    safetensors its "header size" (dim + hidden_dim * 2^32) exceeds the file.
    """
    head = read_head(path, 9)
    if head[:4] == b"PK\x03\x04" or path.name.startswith("pytorch_model"):
        return True
    if len(head) < 9 or head[8:9] != b"{":
        return False
    return 1 < struct.unpack("<Q", head[:8])[0] <= path.stat().st_size - 8


def detect_format(path: str | Path) -> str:
    """`hf`, `llama2c`, `gguf` or `llama2c-tokenizer`; CheckpointError for a path that is none of them."""
    path = Path(path)
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            raise CheckpointError(path, "directory", "cannot be read: permission denied")
        if not has_config(path):  # a named pipe, a device or a directory in its place says so
            raise CheckpointError(
                path,
                "directory",
                "holds no config.json, so it is not a Hugging Face model directory",
                found=sorted(p.name for p in path.iterdir())[:10],
            )
        return HF
    if not path.exists():
        raise CheckpointError(path, "path", "no such file or directory")
    if not path.is_file():
        raise CheckpointError(path, "path", "not a regular file or directory (a device, pipe or socket)")
    if path.suffix == ".safetensors" and not _is_hf_weight_file(path):
        size = path.stat().st_size
        raise CheckpointError(
            path,
            "safetensors header",
            "missing or malformed",
            expected="an 8-byte size, then JSON",
            found=f"{size} bytes",
        )
    if path.suffix == ".json" or _is_hf_weight_file(path):
        return HF
    with open(path, "rb") as handle:
        if handle.read(4) == _GGUF_MAGIC:
            return GGUF
    if path.suffix == ".bin" and path.name.startswith("tokenizer"):
        return TOKENIZER
    if path.suffix == ".bin" or _has_llama2c_header(path):
        return LLAMA2C
    raise CheckpointError(
        path,
        "file",
        "not a checkpoint in any format I read",
        expected="a Hugging Face model directory, its config.json or weight files (safetensors, torch), "
        "a llama2.c .bin model or tokenizer, or a GGUF file",
    )


def _has_llama2c_header(path: Path) -> bool:
    """The v1/v2 magic, or a legacy v0 header of 7 int32 sizes a model could have (text never does)."""
    head = read_head(path, _V0_HEADER_BYTES)
    if head[:4] == struct.pack("<I", MAGIC):
        return True
    if len(head) < _V0_HEADER_BYTES:
        return False
    dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len = struct.unpack("<7i", head)
    sizes = (dim, hidden_dim, n_layers, n_heads, n_kv_heads, abs(vocab_size), seq_len)
    return all(0 < size <= _LARGEST_SIZE for size in sizes)


def hf_parts(path: Path) -> tuple[Path, Path | None]:
    """(model directory, the weight file the user named, if any)."""
    if path.is_dir():
        return path, None
    if _is_config(path):
        if path.name != "config.json":
            raise CheckpointError(
                path,
                "file",
                "a model's weights are read from the directory of its config.json, and this JSON "
                "file is not named config.json: give the model directory",
            )
        return path.parent, None
    return path.parent, path


def _is_config(path: Path) -> bool:
    """A JSON file that is not a shard index: a config (a model's, or one given alone)."""
    return path.suffix == ".json" and not path.name.endswith(".index.json")


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Config and canonical weights of a model directory or file, in any supported format."""
    return _read(Path(path), read_llama2c, read_hf_dir)


def map_checkpoint(path: str | Path) -> Checkpoint:
    """`load_checkpoint`'s checkpoint, its weights mapped from the file instead of read: each weight is
    read (and converted, and checked finite) when looked up, and nothing is kept. Layout, names and
    shapes are checked here. For models larger than memory; pickled HF weights and GGUF are loaded whole."""
    return _read(Path(path), map_llama2c, map_hf_dir)


def _read(
    path: Path, llama2c: Callable[[Path], Checkpoint], hf: Callable[[Path, Path | None], Checkpoint]
) -> Checkpoint:
    fmt = detect_format(path)
    if fmt == TOKENIZER:
        raise CheckpointError(path, "file", "is a llama2.c tokenizer, not a model (read it with read_tokenizer)")
    if fmt == LLAMA2C:
        return llama2c(path)
    if fmt == GGUF:  # read whole, mapped or not
        return _gguf(path).read_gguf(path)
    return hf(*hf_parts(path))


def checkpoint_config(path: str | Path) -> ModelConfig:
    """The config of a model directory or file, its weight files' headers checked but no weight read
    (a `config.json` named alone: the config only)."""
    path = Path(path)
    fmt = detect_format(path)
    if fmt == TOKENIZER:
        raise CheckpointError(path, "file", "is a llama2.c tokenizer, which has no model config")
    if fmt == LLAMA2C:
        return read_llama2c_config(path)
    if fmt == GGUF:
        return _gguf(path).read_gguf_config(path)
    if _is_config(path):
        return read_config_json(path)
    directory, weights_file = hf_parts(path)
    config = read_config_json(directory)
    check_weight_headers(directory, weights_file)
    return config


def _gguf(path: Path) -> Any:
    """`verifier.formats.gguf`, which needs the optional `gguf` package."""
    try:
        return importlib.import_module("verifier.formats.gguf")
    except ImportError as e:
        raise CheckpointError(path, "GGUF file", f"reading or writing GGUF needs the gguf package ({e})",
                              expected="pip install 'lm-verifier[gguf]'") from None  # fmt: skip


def save_checkpoint(
    path: str | Path, config: ModelConfig, weights: Weights, *, format: str = HF, version: int = 0
) -> None:
    """Write canonical weights as an HF directory (`format="hf"`), a llama2.c file of `version`, or a
    GGUF file in F32 (`format="gguf"`; `verifier.formats.gguf.write_gguf` writes Q8_0 too)."""
    if format == HF:
        write_hf_dir(path, config, weights)
    elif format == LLAMA2C:
        write_llama2c(path, config, weights, version=version)
    elif format == GGUF:
        _gguf(Path(path)).write_gguf(path, config, weights)
    else:
        raise CheckpointError(path, "format", "unknown output format", expected=WRITE_FORMATS, found=format)
