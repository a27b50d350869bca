"""What the command line accepts as a model: a preset name, a checkpoint file or directory, a
`config.json`, or a Hugging Face repo id found in the user's Hugging Face cache.

A repo id (`openai-community/gpt2`) is looked up in the local cache only (`verifier.formats.hf_cache`:
HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub), never downloaded unless
`download=True` is asked for (with `huggingface_hub`, installed with the `transformers` extra).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from verifier import extra
from verifier.formats import checkpoint_config
from verifier.formats.config_json import read_config_fields
from verifier.formats.hf_cache import cached_snapshot, hub_cache
from verifier.formats.hf_dir import check_weight_headers, has_config
from verifier.messages import BoundedMessage
from verifier.model.config import ModelConfig
from verifier.model.presets import PRESETS

# What Hugging Face accepts as a model repo id: `name` or `owner/name`.
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class SourceError(BoundedMessage, ValueError):
    """A model argument that names nothing the suite can read."""


class SourceNotFound(SourceError):
    """A model argument that is no preset, no existing path and no cached repo id."""


def _not_found(spec: str) -> SourceNotFound:
    return SourceNotFound(
        f"{spec!r} is not a preset ({', '.join(PRESETS)}), an existing checkpoint file or directory, "
        "or a repo id in the local Hugging Face cache"
    )


def resolve_repo(repo_id: str, *, download: bool = False, cache_dir: str | Path | None = None) -> Path:
    """The local snapshot directory of a Hugging Face model repo, from the cache (or downloaded if asked,
    which needs `huggingface_hub`)."""
    snapshot = cached_snapshot(repo_id, cache_dir=cache_dir)
    if snapshot is not None:
        return snapshot
    where = "it is not in the local Hugging Face cache"
    if not download:
        raise SourceError(f"repo id {repo_id!r}: {where} (pass --download; the cache is {cache_dir or hub_cache()})")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise SourceError(
            f"repo id {repo_id!r}: {where}, and downloading it needs huggingface_hub, which is not installed "
            f"({extra.INSTALL} installs it)"
        ) from None
    try:
        return Path(str(snapshot_download(repo_id, cache_dir=cache_dir or hub_cache())))
    except Exception as e:  # huggingface_hub raises its own errors and OSErrors
        raise SourceError(f"repo id {repo_id!r}: downloading it failed: {type(e).__name__}: {e}") from None


def locate(spec: str, *, download: bool = False, cache_dir: str | Path | None = None) -> Path:
    """The file or directory `spec` names: an existing path, else a cached (or downloaded) HF repo."""
    if not spec.strip():
        raise SourceError(f"{spec!r}: an empty name names no file, directory or repo id")
    path = Path(spec)
    if path.exists():
        return path
    if _REPO_ID.match(spec):
        return resolve_repo(spec, download=download, cache_dir=cache_dir)
    raise SourceError(f"{spec!r}: no such file or directory (and not the form of a Hugging Face repo id)")


def names_preset(spec: str) -> bool:
    """Whether `spec` is a preset's name and no file or directory of that name is here: a local `gpt2/`
    folder is the folder, as `transformers`' from_pretrained("gpt2") reads it."""
    return spec in PRESETS and not Path(spec).exists()


def load_config(spec: str, *, download: bool = False) -> ModelConfig:
    """The config named by `spec`: a preset, or the config of a checkpoint, directory or repo id (a
    path of a preset's name included: `names_preset`)."""
    if names_preset(spec):
        return PRESETS[spec]
    try:
        path = locate(spec, download=download)
    except SourceError:
        raise _not_found(spec) from None
    return checkpoint_config(path)


def hf_config_fields(spec: str, *, download: bool = False) -> tuple[Path, dict[str, Any]] | None:
    """(path, fields) of the `config.json` that `spec` names or holds (a file, an HF directory or a
    cached repo id), or None when `spec` is a preset or another kind of checkpoint."""
    if names_preset(spec):
        return None
    try:
        path = locate(spec, download=download)
    except SourceError:
        raise _not_found(spec) from None
    if path.is_dir() and has_config(path):
        fields = read_config_fields(path / "config.json")
        check_weight_headers(path)  # a model directory: its weight files must be whole too
        return path / "config.json", fields
    if path.suffix != ".json":
        return None
    return path, read_config_fields(path)
