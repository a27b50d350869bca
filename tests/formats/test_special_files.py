"""Something other than a regular file in the place of a file a model directory names (issue 45): a named
pipe, a device or a directory where config.json, model.safetensors, the shard index or a shard should
be. Each is one line saying what is there: before, the directory "holds no config.json (found
['config.json', ...])", had "no weight file", or its shard was "named in the index but missing"."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.formats import CheckpointError, load_checkpoint, map_checkpoint
from verifier.formats.hf_dir import SAFETENSORS, SAFETENSORS_INDEX, write_hf_dir
from verifier.model.presets import preset
from verifier.model.weights import init_weights

TINY = preset("gpt2").replace(n_layers=1, d_model=8, n_heads=2, n_kv_heads=2, d_ff=16, vocab_size=64, n_ctx=16)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _device(path: Path) -> None:
    path.symlink_to("/dev/null")  # a character device, reached as a HF cache's snapshot reaches its blobs


def _directory(path: Path) -> None:
    path.mkdir()


# (how to make it, what the message calls it)
KINDS = {
    "fifo": (_fifo, "a named pipe (FIFO)"),
    "device": (_device, "a character device"),
    "directory": (_directory, "a directory"),
}


def _in_place_of(directory: Path, name: str, kind: str) -> Path:
    """`directory/name` replaced by a file of `kind` (see KINDS)."""
    make, _ = KINDS[kind]
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes on this system")
    if kind == "device" and not Path("/dev/null").is_char_device():
        pytest.skip("no /dev/null device on this system")
    (directory / name).unlink()
    make(directory / name)
    return directory / name


def _shard_name(directory: Path) -> str:
    return sorted(p.name for p in directory.glob("model-*-of-*.safetensors"))[1]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(
    ("sharded", "name", "what"),
    [
        pytest.param(False, lambda d: "config.json", "config.json", id="config.json"),
        pytest.param(False, lambda d: SAFETENSORS, "weight file", id="model.safetensors"),
        pytest.param(True, lambda d: SAFETENSORS_INDEX, "weight file", id="shard-index"),
        pytest.param(True, _shard_name, "shard", id="shard"),
    ],
)
@pytest.mark.parametrize("command", ["inspect", "params", "trace"])
def test_a_special_file_in_place_of_a_model_file_is_named(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    sharded: bool,
    name: Callable[[Path], str],
    what: str,
    kind: str,
) -> None:
    model = tmp_path / "model"
    write_hf_dir(model, TINY, init_weights(TINY), max_shard_bytes=2000 if sharded else None)
    path = _in_place_of(model, name(model), kind)
    assert main([command, str(model)]) == 2
    err = capsys.readouterr().err
    where = f"{model / SAFETENSORS_INDEX}: shard {path.name}" if what == "shard" else f"{path}: {what}"
    assert err == f"verifier {command}: error: {where}: not a regular file: it is {KINDS[kind][1]}\n", err


@pytest.mark.parametrize("read", [load_checkpoint, map_checkpoint])
def test_a_dangling_link_in_place_of_config_json_says_so(tmp_path: Path, read: Callable[[Path], object]) -> None:
    # A Hugging Face cache's snapshot links each file to a blob: a blob removed leaves a dangling link.
    write_hf_dir(tmp_path, TINY, init_weights(TINY))
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").symlink_to(tmp_path / "blobs" / "abc123")
    with pytest.raises(CheckpointError) as raised:
        read(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path / 'config.json'}: config.json: a symbolic link to {tmp_path / 'blobs' / 'abc123'}, "
        "which does not exist"
    )
