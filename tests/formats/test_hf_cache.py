"""The Hugging Face cache, read without huggingface_hub: where it is, and what a repo id finds in it,
checked against huggingface_hub's own lookup where it is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import needs
from verifier.formats.hf_cache import cached_file, cached_snapshot, hub_cache

_VARIABLES = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


def _snapshot(cache: Path, repo: str, commit: str = "0123abcd", files: tuple[str, ...] = ("vocab.json",)) -> Path:
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name in files:
        (snapshot / name).write_text("{}")
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    return snapshot


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"HF_HUB_CACHE": "/a", "HUGGINGFACE_HUB_CACHE": "/b", "HF_HOME": "/c"}, "/a"),
        ({"HUGGINGFACE_HUB_CACHE": "/b", "HF_HOME": "/c"}, "/b"),
        ({"HF_HOME": "/c", "XDG_CACHE_HOME": "/d"}, "/c/hub"),
        ({"XDG_CACHE_HOME": "/d"}, "/d/huggingface/hub"),
        ({}, "~/.cache/huggingface/hub"),
    ],
)
def test_the_cache_is_where_the_variables_say_in_huggingface_hubs_order(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], expected: str
) -> None:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert hub_cache() == Path(os.path.expanduser(expected))


@needs.transformers  # huggingface_hub comes with transformers
@pytest.mark.parametrize(
    "environ", [{"HF_HOME": "{tmp}/home"}, {"XDG_CACHE_HOME": "{tmp}/xdg"}, {"HF_HUB_CACHE": "{tmp}/hub"}]
)
def test_the_cache_is_the_one_huggingface_hub_uses(tmp_path: Path, environ: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in _VARIABLES}
    env |= {name: value.format(tmp=tmp_path) for name, value in environ.items()}
    theirs = subprocess.run(
        [sys.executable, "-c", "import huggingface_hub.constants as c; print(c.HF_HUB_CACHE)"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = subprocess.run(
        [sys.executable, "-c", "from verifier.formats.hf_cache import hub_cache; print(hub_cache())"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert ours == theirs


def test_a_repo_id_finds_the_snapshot_main_points_at(tmp_path: Path) -> None:
    snapshot = _snapshot(tmp_path, "openai-community/gpt2")
    _snapshot(tmp_path, "gpt2", commit="ffff", files=("config.json",))
    assert cached_snapshot("openai-community/gpt2", cache_dir=tmp_path) == snapshot
    assert cached_file("openai-community/gpt2", "vocab.json", cache_dir=tmp_path) == snapshot / "vocab.json"
    assert cached_file("openai-community/gpt2", "merges.txt", cache_dir=tmp_path) is None
    assert cached_file("gpt2", "vocab.json", cache_dir=tmp_path) is None
    assert cached_snapshot("nobody/nothing", cache_dir=tmp_path) is None


@pytest.mark.parametrize("ref", ["", "../../..", "a/b", "deadbeef"])  # empty, paths, a commit not downloaded
def test_a_ref_that_is_not_a_snapshot_here_finds_nothing(tmp_path: Path, ref: str) -> None:
    snapshot = _snapshot(tmp_path, "owner/name")
    (snapshot.parents[1] / "refs" / "main").write_text(ref)
    assert cached_snapshot("owner/name", cache_dir=tmp_path) is None


@needs.transformers
def test_lookups_agree_with_huggingface_hubs(tmp_path: Path) -> None:
    from huggingface_hub import try_to_load_from_cache

    _snapshot(tmp_path, "openai-community/gpt2")
    broken = _snapshot(tmp_path, "owner/broken")
    (broken.parents[1] / "refs" / "main").write_text("deadbeef")
    for repo, name in [("openai-community/gpt2", "vocab.json"), ("openai-community/gpt2", "merges.txt"),
                       ("owner/broken", "vocab.json"), ("nobody/nothing", "vocab.json")]:  # fmt: skip
        theirs = try_to_load_from_cache(repo, name, cache_dir=tmp_path)
        ours = cached_file(repo, name, cache_dir=tmp_path)
        assert (str(ours) if ours else None) == (theirs if isinstance(theirs, str) else None), (repo, name)
