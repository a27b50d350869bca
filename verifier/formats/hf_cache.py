"""The local Hugging Face hub cache, read in the layout `huggingface_hub` writes, without it.

The cache is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's order, read
at each call). A model repo `owner/name` lives in `models--owner--name/`: `refs/main` holds the
commit whose files are in `snapshots/<commit>/`.
"""

from __future__ import annotations

import os
from pathlib import Path


def hub_cache() -> Path:
    """The hub cache directory the environment names (it may not exist)."""
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if not hub:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        home = os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")
        hub = os.path.join(os.path.expandvars(os.path.expanduser(home)), "hub")
    return Path(os.path.expandvars(os.path.expanduser(hub)))


def cached_snapshot(repo_id: str, *, cache_dir: str | Path | None = None) -> Path | None:
    """The snapshot directory of model repo `repo_id` at `main`, or None when the cache does not hold it."""
    repo = Path(cache_dir or hub_cache()) / ("models--" + repo_id.replace("/", "--"))
    try:
        commit = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if commit in ("", ".", "..") or "/" in commit or "\\" in commit:  # a commit hash, never a path
        return None
    snapshot = repo / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def cached_file(repo_id: str, filename: str, *, cache_dir: str | Path | None = None) -> Path | None:
    """`filename` of model repo `repo_id` at `main` in the cache, or None."""
    snapshot = cached_snapshot(repo_id, cache_dir=cache_dir)
    return snapshot / filename if snapshot is not None and (snapshot / filename).is_file() else None
