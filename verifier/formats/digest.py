"""The sha256 of a checkpoint, to name exactly what a report verified.

A llama2.c or GGUF file's is the file's own (what `sha256sum model.bin` prints). A Hugging Face
checkpoint's is that of its manifest: the lines `sha256sum` prints for `config.json` and each weight
file the readers read (an index and every shard it names), in name order, so that
`sha256sum config.json model*.safetensors* | sha256sum` in its directory gives the same digest.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from verifier.formats.hf_dir import shard_files, weight_source
from verifier.formats.load import GGUF, LLAMA2C, detect_format, hf_parts

_BLOCK = 16 * 2**20


def checkpoint_files(path: str | Path) -> list[Path]:
    """The files an HF checkpoint consists of (config.json and the weights read), in name order."""
    directory, weights_file = hf_parts(Path(path))
    source, _ = weight_source(directory, weights_file)
    files = {directory / "config.json", source}
    if source.name.endswith(".index.json"):
        files |= set(shard_files(source))
    return sorted(files, key=lambda p: p.name)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_sha256(path: str | Path) -> str:
    """The sha256 of a checkpoint (see the module docstring)."""
    path = Path(path)
    if detect_format(path) in (LLAMA2C, GGUF):  # one file holds the whole checkpoint
        return file_sha256(path)
    manifest = "".join(f"{file_sha256(f)}  {f.name}\n" for f in checkpoint_files(path))
    return hashlib.sha256(manifest.encode("utf-8")).hexdigest()
