"""Hugging Face model directories: `config.json` plus weights, as `save_pretrained` writes them.

Weights are read from, in this order of preference (as `transformers` prefers them):
`model.safetensors`, `model.safetensors.index.json` (shards), `pytorch_model.bin`,
`pytorch_model.bin.index.json`. Pickled `.bin` files are opened only with
`torch.load(weights_only=True)`, which refuses arbitrary objects.

Names are brought to the canonical set: GPT-2 files saved from `GPT2Model` lack the `transformer.`
prefix; non-learned buffers (GPT-2's causal-mask `attn.bias` / `attn.masked_bias`, Llama's
`rotary_emb.inv_freq`) are dropped; a tied classifier stored anyway must equal the embedding.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from verifier import extra
from verifier.formats.checkpoint import Checkpoint, TensorInfo, check_canonical
from verifier.formats.config_json import read_config_json
from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import atomic_write, open_bounded
from verifier.formats.safetensors_file import read_header, read_safetensors, write_safetensors
from verifier.model.config import ModelConfig
from verifier.model.weights import CLASSIFIER, EMBEDDING, Weights, weight_shapes

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH = "pytorch_model.bin"
PYTORCH_INDEX = "pytorch_model.bin.index.json"
WEIGHT_FILES = (SAFETENSORS, SAFETENSORS_INDEX, PYTORCH, PYTORCH_INDEX)

_BUFFERS = {"gpt2": (".attn.bias", ".attn.masked_bias"), "llama": (".rotary_emb.inv_freq",)}  # not learned
_ZIP_MAGIC = b"PK\x03\x04"


def weight_files(directory: Path) -> list[Path]:
    """The weight files (or shard indexes) present in `directory`, most preferred first."""
    return [directory / name for name in WEIGHT_FILES if (directory / name).is_file()]


def _shards(index_path: Path) -> dict[Path, list[str]]:
    """The shard files an index names, each with the tensors it should hold (file names only: no paths)."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(index_path, "shard index", f"not readable JSON: {e}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(index_path, "weight_map", "must be a non-empty object {tensor: shard file}")
    shards: dict[Path, list[str]] = {}
    for name, file in weight_map.items():
        if not isinstance(file, str) or file != Path(file).name or file in ("", ".", ".."):
            raise CheckpointError(
                index_path, f"weight_map[{name!r}]", "must be a file name in the same directory", found=file
            )
        shards.setdefault(index_path.parent / file, []).append(name)
    return shards


def _read_pickle(path: Path) -> tuple[list[TensorInfo], dict[str, np.ndarray]]:
    reason = extra.missing("reading a pickled checkpoint (torch.load)", ("torch",))
    if reason is not None:
        raise CheckpointError(path, "pickle", reason)
    import torch

    try:
        with open(path, "rb") as handle:
            zipped = handle.read(4) == _ZIP_MAGIC
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except Exception as e:  # torch raises many kinds (UnpicklingError, RuntimeError, EOFError, ...)
        first_line = str(e).splitlines()[0] if str(e) else ""
        raise CheckpointError(
            path, "pickle", f"cannot be loaded with torch.load(weights_only=True): {type(e).__name__}: {first_line}"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise CheckpointError(path, "pickle", "must hold a flat dict {name: tensor}", found=type(state).__name__)
    infos = [TensorInfo(k, tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in state.items()]
    tensors = {k: (v.to(torch.float32) if v.is_floating_point() else v).numpy() for k, v in state.items()}
    return infos, tensors


def _read_one(path: Path) -> tuple[list[TensorInfo], dict[str, np.ndarray]]:
    if path.suffix != ".safetensors":
        return _read_pickle(path)
    file, tensors = read_safetensors(path)
    names = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
    return [TensorInfo(e.name, e.shape, names.get(e.dtype, e.dtype.lower())) for e in file.entries], tensors


def _read_weights(source: Path) -> tuple[list[TensorInfo], dict[str, np.ndarray], list[str]]:
    """Every tensor of a weight file or shard index, with the file's own names."""
    if not source.name.endswith(".index.json"):
        infos, tensors = _read_one(source)
        return infos, tensors, []
    infos, tensors = [], {}
    shards = _shards(source)
    for shard, names in shards.items():
        if not shard.is_file():
            raise CheckpointError(source, f"shard {shard.name}", "is named in the index but missing")
        shard_infos, shard_tensors = _read_one(shard)
        unlisted = sorted(set(shard_tensors) - set(names))
        absent = sorted(set(names) - set(shard_tensors))
        if absent:
            raise CheckpointError(
                shard, f"tensor {absent[0]}", f"the index puts it in this shard, which lacks it ({len(absent)} such)"
            )
        if unlisted:
            raise CheckpointError(shard, f"tensor {unlisted[0]}", "is in this shard but not in its index entry")
        infos += shard_infos
        tensors |= shard_tensors
    return infos, tensors, [f"{len(shards)} shards listed in {source.name}"]


def _canonical(path: Path, config: ModelConfig, tensors: dict[str, np.ndarray]) -> tuple[Weights, list[str]]:
    findings: list[str] = []
    weights: Weights = {}
    dropped = []
    for name, array in tensors.items():
        if name.endswith(_BUFFERS[config.family]):
            dropped.append(name)
            continue
        if config.family == "gpt2" and not name.startswith(("transformer.", CLASSIFIER)):
            name = "transformer." + name
        if name in weights:
            raise CheckpointError(
                path, f"tensor {name}", "is stored twice (with and without the 'transformer.' prefix)"
            )
        if array.dtype != np.float32:
            raise CheckpointError(
                path, f"tensor {name}", "wrong dtype", expected="a floating-point dtype", found=array.dtype
            )
        weights[name] = array
    if dropped:
        findings.append(f"dropped {len(dropped)} non-learned buffers ({dropped[0]}, ...)")
    if config.tie_embeddings and CLASSIFIER in weights:
        embedding = weights.get(EMBEDDING[config.family])
        classifier = weights.pop(CLASSIFIER)
        if embedding is None or not np.array_equal(classifier, embedding):
            raise CheckpointError(
                path,
                f"tensor {CLASSIFIER}",
                "config.json ties the classifier to the embedding, but the stored classifier differs from it",
            )
        findings.append(f"{CLASSIFIER} is stored but tied: equal to the embedding, dropped")
    return weights, findings


def check_weight_headers(directory: Path, weights_file: Path | None = None) -> None:
    """Check the headers of the safetensors files `read_hf_dir` would read (each against its file size:
    a truncated or malformed file is a CheckpointError), reading no tensor. A directory without weight
    files passes (a config alone is counted), and pickles are not opened."""
    available = weight_files(directory)
    source = weights_file if weights_file is not None else (available[0] if available else None)
    if source is None:
        return
    files = list(_shards(source)) if source.name.endswith(".index.json") else [source]
    for file in files:
        if file.suffix != ".safetensors":
            continue
        if not file.is_file():
            raise CheckpointError(source, f"shard {file.name}", "is named in the index but missing")
        with open_bounded(file) as reader:
            read_header(reader)


def read_hf_dir(path: str | Path, weights_file: str | Path | None = None) -> Checkpoint:
    """A model directory (or one of its weight files) as config + canonical weights."""
    directory = Path(path)
    config = read_config_json(directory)
    available = weight_files(directory)
    source = Path(weights_file) if weights_file is not None else (available[0] if available else None)
    if source is None:
        raise CheckpointError(
            directory,
            "weights",
            "no weight file in the directory",
            expected=" or ".join(WEIGHT_FILES),
            found=sorted(p.name for p in directory.iterdir()),
        )
    infos, tensors, findings = _read_weights(source)
    if len(available) > 1 and weights_file is None:
        findings.append(f"read {source.name}; also present: {', '.join(p.name for p in available[1:])}")
    converted = sorted({i.dtype for i in infos if i.dtype in ("float64", "float16", "bfloat16")})
    if converted:
        rounding = " (float64 rounded)" if "float64" in converted else ""
        findings.append(f"weights stored as {', '.join(converted)}, converted to float32{rounding}")
    weights, more = _canonical(source, config, tensors)
    check_canonical(source, config, weights)
    fmt = {
        ".json": "hf-safetensors-sharded" if "safetensors" in source.name else "hf-pytorch-sharded",
        ".bin": "hf-pytorch",
    }.get(source.suffix, "hf-safetensors")
    return Checkpoint(directory, fmt, None, config, weights, tuple(infos), tuple(findings + more))


def _shard_groups(tensors: dict[str, np.ndarray], max_shard_bytes: int) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    size = 0
    for name, array in tensors.items():
        if groups[-1] and size + array.nbytes > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += array.nbytes
    return groups


def _write_json(path: Path, value: Any) -> None:
    with atomic_write(path) as handle:
        handle.write((json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def write_hf_dir(
    path: str | Path, config: ModelConfig, weights: Weights, *, max_shard_bytes: int | None = None
) -> None:
    """Write `config.json` and safetensors weights (sharded with an index when `max_shard_bytes` is set).

    Each file is written whole and renamed into place, weights before `config.json`; weight files
    of an earlier save that the new one does not use are removed afterwards.
    """
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {name: np.asarray(w, dtype=np.float32) for name, w in weights.items()}
    check_canonical(directory, config, tensors)
    tensors = {name: tensors[name] for name in weight_shapes(config)}  # state-dict order, whatever the dict's
    metadata = {"format": "pt"}  # transformers refuses safetensors files without it
    written: list[Path] = []
    if max_shard_bytes is None:
        write_safetensors(directory / SAFETENSORS, tensors, metadata)
        written.append(directory / SAFETENSORS)
    else:
        groups = _shard_groups(tensors, max_shard_bytes)
        weight_map: dict[str, str] = {}
        for i, names in enumerate(groups, start=1):
            shard = directory / f"model-{i:05d}-of-{len(groups):05d}.safetensors"
            write_safetensors(shard, {n: tensors[n] for n in names}, metadata)
            written.append(shard)
            weight_map |= dict.fromkeys(names, shard.name)
        total = sum(t.nbytes for t in tensors.values())
        _write_json(directory / SAFETENSORS_INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map})
        written.append(directory / SAFETENSORS_INDEX)
    _write_json(directory / "config.json", config.to_hf_dict())
    _remove_stale(directory, written)


def _remove_stale(directory: Path, keep: Iterable[Path]) -> None:
    keep = set(keep)
    stale = [directory / SAFETENSORS, directory / SAFETENSORS_INDEX, *directory.glob("model-*-of-*.safetensors")]
    for old in stale:
        if old not in keep and old.is_file():
            os.unlink(old)
