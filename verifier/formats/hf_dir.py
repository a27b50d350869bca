"""Hugging Face model directories: `config.json` plus weights, as `save_pretrained` writes them.

Weights are read from, in this order of preference (as `transformers` prefers them):
`model.safetensors`, `model.safetensors.index.json` (shards), `pytorch_model.bin`,
`pytorch_model.bin.index.json`. Pickled `.bin` files are opened only with
`torch.load(weights_only=True)`, which refuses arbitrary objects.

Names are brought to the canonical set: GPT-2 files saved from `GPT2Model` lack the `transformer.`
prefix; non-learned buffers (GPT-2's causal-mask `attn.bias` / `attn.masked_bias`, the RoPE families'
`rotary_emb.inv_freq`) are dropped; a tied classifier stored anyway must equal the embedding.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from verifier import extra
from verifier.formats.checkpoint import Checkpoint, TensorInfo, check_array, check_canonical, check_shapes
from verifier.formats.config_json import read_config_json
from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import ReadAhead, atomic_write, is_regular, open_bounded, read_into
from verifier.formats.jsonio import read_json
from verifier.formats.safetensors_file import (
    DTYPES,
    Entry,
    SafetensorsFile,
    byte_range,
    load_tensor,
    read_header,
    read_safetensors,
    write_safetensors,
)
from verifier.model.config import FAMILIES, ModelConfig
from verifier.model.weights import CLASSIFIER, EMBEDDING, LazyWeights, WeightMap, Weights, weight_shapes

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH = "pytorch_model.bin"
PYTORCH_INDEX = "pytorch_model.bin.index.json"
WEIGHT_FILES = (SAFETENSORS, SAFETENSORS_INDEX, PYTORCH, PYTORCH_INDEX)

_DTYPE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
# Not learned: GPT-2's causal mask, the RoPE families' inverse frequencies (older transformers saved them).
_BUFFERS = {f: (".attn.bias", ".attn.masked_bias") if f == "gpt2" else (".rotary_emb.inv_freq",) for f in FAMILIES}

# An index holds a line of under 100 bytes per tensor: 32 MiB is over 300,000 tensors.
MAX_INDEX_BYTES = 2**25


def has_config(directory: Path) -> bool:
    """Whether `directory` holds a config.json; CheckpointError if what has the name is not a regular
    file (a named pipe, a device, a directory), which the message names."""
    return is_regular(directory / CONFIG, CONFIG)


def weight_files(directory: Path) -> list[Path]:
    """The weight files (or shard indexes) present in `directory`, most preferred first; CheckpointError
    for one of their names held by something other than a regular file (a named pipe, a device, ...)."""
    return [directory / name for name in WEIGHT_FILES if is_regular(directory / name, "weight file")]


def _shards(index_path: Path) -> dict[Path, list[str]]:
    """The shard files an index names, each with the tensors it should hold (file names only: no paths)."""
    index = read_json(index_path, "shard index", MAX_INDEX_BYTES)
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
        # Not mmap=True: float32 weights would be views of the mapping, and touching one after the
        # file shrank would kill the process with SIGBUS. The weights are all kept anyway.
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=False)
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
    return [TensorInfo(e.name, e.shape, _DTYPE_NAMES.get(e.dtype, e.dtype.lower())) for e in file.entries], tensors


def _read_weights(source: Path) -> tuple[list[TensorInfo], dict[str, np.ndarray], list[str]]:
    """Every tensor of a weight file or shard index, with the file's own names."""
    if not source.name.endswith(".index.json"):
        infos, tensors = _read_one(source)
        return infos, tensors, []
    infos, tensors = [], {}
    shards = shard_files(source)
    for shard, names in shards.items():
        shard_infos, shard_tensors = _read_one(shard)
        check_shard(shard, names, shard_tensors)
        infos += shard_infos
        tensors |= shard_tensors
    return infos, tensors, [f"{len(shards)} shards listed in {source.name}"]


def shard_files(index_path: Path) -> dict[Path, list[str]]:
    """The shards of an index, each with the tensors it should hold; every shard must exist."""
    shards = _shards(index_path)
    for shard in shards:
        _require_shard(index_path, shard)
    return shards


def _require_shard(index_path: Path, shard: Path) -> None:
    """CheckpointError, the index's (it names the shard), unless `shard` is a regular file."""
    if not is_regular(shard, f"shard {shard.name}", where=index_path):
        raise CheckpointError(index_path, f"shard {shard.name}", "is named in the index but missing")


def check_shard(shard: Path, listed: Iterable[str], stored: Iterable[str]) -> None:
    """CheckpointError unless `shard` holds exactly the tensors its index lists for it."""
    listed, stored = set(listed), set(stored)
    absent, unlisted = sorted(listed - stored), sorted(stored - listed)
    if absent:
        raise CheckpointError(
            shard, f"tensor {absent[0]}", f"the index puts it in this shard, which lacks it ({len(absent)} such)"
        )
    if unlisted:
        raise CheckpointError(shard, f"tensor {unlisted[0]}", "is in this shard but not in its index entry")


def canonical_names(path: Path, config: ModelConfig, names: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """{canonical name: the file's name} of the stored tensors, and the non-learned buffers dropped."""
    renamed: dict[str, str] = {}
    dropped = []
    for name in names:
        if name.endswith(_BUFFERS[config.family]):
            dropped.append(name)
            continue
        canonical = name
        if config.family == "gpt2" and not name.startswith(("transformer.", CLASSIFIER)):
            canonical = "transformer." + name
        if canonical in renamed:
            raise CheckpointError(
                path, f"tensor {canonical}", "is stored twice (with and without the 'transformer.' prefix)"
            )
        renamed[canonical] = name
    return renamed, dropped


def dropped_finding(dropped: list[str]) -> list[str]:
    return [f"dropped {len(dropped)} non-learned buffers ({dropped[0]}, ...)"] if dropped else []


def tied_classifier_finding(path: Path, classifier: np.ndarray, embedding: np.ndarray | None) -> str:
    """The finding for a classifier stored although config.json ties it (CheckpointError unless it is the embedding)."""
    if embedding is None or not np.array_equal(classifier, embedding):
        raise CheckpointError(
            path,
            f"tensor {CLASSIFIER}",
            "config.json ties the classifier to the embedding, but the stored classifier differs from it",
        )
    return f"{CLASSIFIER} is stored but tied: equal to the embedding, dropped"


def _canonical(path: Path, config: ModelConfig, tensors: dict[str, np.ndarray]) -> tuple[Weights, list[str]]:
    renamed, dropped = canonical_names(path, config, tensors)
    weights: Weights = {}
    for name, stored in renamed.items():
        array = tensors[stored]
        if array.dtype != np.float32:
            raise CheckpointError(
                path, f"tensor {name}", "wrong dtype", expected="a floating-point dtype", found=array.dtype
            )
        weights[name] = array
    findings = dropped_finding(dropped)
    if config.tie_embeddings and CLASSIFIER in weights:
        classifier = weights.pop(CLASSIFIER)
        findings.append(tied_classifier_finding(path, classifier, weights.get(EMBEDDING[config.family])))
    return weights, findings


def conversion_findings(source: Path, available: list[Path], chosen: bool, dtypes: Iterable[str]) -> list[str]:
    """What reading `source` implied: other weight files present, dtypes converted to float32."""
    findings = []
    if len(available) > 1 and not chosen:
        findings.append(f"read {source.name}; also present: {', '.join(p.name for p in available[1:])}")
    converted = sorted({d for d in dtypes if d in ("float64", "float16", "bfloat16")})
    if converted:
        rounding = " (float64 rounded)" if "float64" in converted else ""
        findings.append(f"weights stored as {', '.join(converted)}, converted to float32{rounding}")
    return findings


def hf_format(source: Path) -> str:
    """`hf-safetensors`, `hf-safetensors-sharded`, `hf-pytorch` or `hf-pytorch-sharded`, from the weight file's name."""
    return {
        ".json": "hf-safetensors-sharded" if "safetensors" in source.name else "hf-pytorch-sharded",
        ".bin": "hf-pytorch",
    }.get(source.suffix, "hf-safetensors")


def weight_source(directory: Path, weights_file: str | Path | None) -> tuple[Path, list[Path]]:
    """The weight file (or shard index) to read, and every one the directory holds."""
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
    return source, available


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
        _require_shard(source, file)
        with open_bounded(file) as reader:
            read_header(reader)


def read_hf_dir(path: str | Path, weights_file: str | Path | None = None) -> Checkpoint:
    """A model directory (or one of its weight files) as config + canonical weights."""
    directory = Path(path)
    config = read_config_json(directory)
    source, available = weight_source(directory, weights_file)
    infos, tensors, findings = _read_weights(source)
    findings += conversion_findings(source, available, weights_file is not None, (i.dtype for i in infos))
    weights, more = _canonical(source, config, tensors)
    check_canonical(source, config, weights)
    return Checkpoint(directory, hf_format(source), None, config, weights, tuple(infos), tuple(findings + more))


def map_hf_dir(path: str | Path, weights_file: str | Path | None = None) -> Checkpoint:
    """`read_hf_dir`'s checkpoint with weights read from its safetensors files at each lookup.

    Every header, name, shape and dtype is checked here; each tensor's values (finite) when read.
    Pickled weights cannot be mapped: they are loaded whole (`read_hf_dir`).
    """
    directory = Path(path)
    config = read_config_json(directory)
    source, available = weight_source(directory, weights_file)
    if source.suffix != ".safetensors" and source.name != SAFETENSORS_INDEX:
        return read_hf_dir(directory, weights_file)
    findings: list[str] = []
    shards: dict[Path, list[str] | None] = {source: None}
    if source.name == SAFETENSORS_INDEX:
        shards = dict(shard_files(source))
        findings.append(f"{len(shards)} shards listed in {source.name}")
    located: dict[str, tuple[SafetensorsFile, Entry]] = {}
    for shard, listed in shards.items():
        with open_bounded(shard) as reader:
            file = read_header(reader)
        if listed is not None:
            check_shard(shard, listed, (e.name for e in file.entries))
        located |= {e.name: (file, e) for e in file.entries}
    infos = [TensorInfo(e.name, e.shape, _DTYPE_NAMES.get(e.dtype, e.dtype.lower())) for _, e in located.values()]
    findings += conversion_findings(source, available, weights_file is not None, (i.dtype for i in infos))
    renamed, dropped = canonical_names(source, config, located)
    findings += dropped_finding(dropped)
    for name, stored in renamed.items():
        dtype = located[stored][1].dtype
        if DTYPES[dtype][1] is None:
            raise CheckpointError(
                source, f"tensor {name}", "wrong dtype", expected="a floating-point dtype", found=dtype
            )

    def read(name: str) -> np.ndarray:
        return load_tensor(*located[renamed[name]])

    if config.tie_embeddings and CLASSIFIER in renamed:
        embedding = read(EMBEDDING[config.family]) if EMBEDDING[config.family] in renamed else None
        findings.append(tied_classifier_finding(source, read(CLASSIFIER), embedding))
        del renamed[CLASSIFIER]
    check_shapes(source, config, {name: located[stored][1].shape for name, stored in renamed.items()})
    ahead = ReadAhead(
        {name: (located[renamed[name]][0].path, *byte_range(*located[renamed[name]])) for name in weight_shapes(config)}
    )

    def fetch(name: str) -> np.ndarray:
        ahead.after(name)  # the disk reads the next weights while the caller uses this one
        array = read(name)
        check_array(source, name, array)
        return array

    def fetch_into(name: str, out: np.ndarray) -> bool:
        file, entry = located[renamed[name]]
        if out.dtype != np.float32 or out.shape != tuple(entry.shape):
            return False
        ahead.after(name)
        read_into(file.path, byte_range(file, entry)[0], out, f"tensor {entry.name}")
        check_array(source, name, out)
        return True

    # Read into the caller's memory only where every weight is stored as it is used (BF16 and F16
    # tensors are converted on reading, into new arrays).
    float32 = all(located[stored][1].dtype == "F32" for stored in renamed.values())
    weights = LazyWeights(weight_shapes(config), fetch, fetch_into if float32 else None)
    return Checkpoint(directory, hf_format(source), None, config, weights, tuple(infos), tuple(findings))


def _shard_groups(sizes: dict[str, int], max_shard_bytes: int) -> list[list[str]]:
    """Names in order, cut into runs of at most `max_shard_bytes` (a larger tensor alone)."""
    groups: list[list[str]] = [[]]
    size = 0
    for name, nbytes in sizes.items():
        if groups[-1] and size + nbytes > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    return groups


def _write_json(path: Path, value: Any) -> None:
    with atomic_write(path) as handle:
        handle.write((json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8"))


_METADATA = {"format": "pt"}  # transformers refuses safetensors files without it


def write_hf_dir(
    path: str | Path, config: ModelConfig, weights: WeightMap, *, max_shard_bytes: int | None = None
) -> None:
    """Write `config.json` and safetensors weights (sharded with an index when `max_shard_bytes` is set).

    Each file is written whole and renamed into place, weights before `config.json`; weight files
    of an earlier save that the new one does not use are removed afterwards.
    """
    directory = Path(path)
    tensors = {name: np.asarray(w, dtype=np.float32) for name, w in weights.items()}
    check_canonical(directory, config, tensors)
    in_order = ((name, tensors[name]) for name in weight_shapes(config))  # state-dict order, whatever the dict's
    if max_shard_bytes is not None:
        write_hf_shards(directory, config, in_order, max_shard_bytes=max_shard_bytes)
        return
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors(directory / SAFETENSORS, dict(in_order), _METADATA)
    _finish(directory, config, [directory / SAFETENSORS])


def write_hf_shards(
    path: str | Path, config: ModelConfig, tensors: Iterable[tuple[str, np.ndarray]], *, max_shard_bytes: int
) -> None:
    """Write `config.json` and sharded safetensors weights from (name, array) pairs given one at a time
    in state-dict order (e.g. `verifier.model.weights.iter_init_weights`): one shard is held at a
    time, so a model larger than memory can be written. Files are placed as `write_hf_dir` places them."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    shapes = weight_shapes(config)
    groups = _shard_groups({name: 4 * math.prod(shape) for name, shape in shapes.items()}, max_shard_bytes)
    given = iter(tensors)
    written: list[Path] = []
    weight_map: dict[str, str] = {}
    for i, names in enumerate(groups, start=1):
        shard: dict[str, np.ndarray] = {}
        for expected in names:
            name, array = next(given, ("nothing", None))
            if name != expected or array is None:
                raise CheckpointError(
                    directory, f"tensor {expected}", "missing, or not in state-dict order", found=name
                )
            array = np.asarray(array, dtype=np.float32)
            if array.shape != shapes[name]:
                raise CheckpointError(
                    directory, f"tensor {name}", "wrong shape", expected=list(shapes[name]), found=list(array.shape)
                )
            check_array(directory, name, array)
            shard[name] = array
        path_i = directory / f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        write_safetensors(path_i, shard, _METADATA)
        written.append(path_i)
        weight_map |= dict.fromkeys(names, path_i.name)
    extra = next(given, None)
    if extra is not None:
        raise CheckpointError(directory, f"tensor {extra[0]}", "not a weight of this config, or given twice")
    total = sum(4 * math.prod(shape) for shape in shapes.values())
    _write_json(directory / SAFETENSORS_INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map})
    _finish(directory, config, [*written, directory / SAFETENSORS_INDEX])


def _finish(directory: Path, config: ModelConfig, written: list[Path]) -> None:
    """`config.json` last, then the weight files of an earlier save removed."""
    _write_json(directory / "config.json", config.to_hf_dict())
    _remove_stale(directory, written)


def _remove_stale(directory: Path, keep: Iterable[Path]) -> None:
    keep = set(keep)
    stale = [directory / SAFETENSORS, directory / SAFETENSORS_INDEX, *directory.glob("model-*-of-*.safetensors")]
    for old in stale:
        if old not in keep and old.is_file():
            os.unlink(old)
