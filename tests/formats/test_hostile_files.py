"""Files that are not what a model's small files are (issue 25): a config.json, shard index or
vocabulary far larger than any published one, a named pipe or a device in their place. Each is one
CheckpointError line (TokenizerError for a tokenizer) before it is read whole: before, a FIFO
config.json made every reader wait forever, /dev/zero read until memory ran out, and a large
flood of JSON was parsed at ~30 times its size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.formats import CheckpointError, load_checkpoint
from verifier.formats.config_json import MAX_CONFIG_BYTES, read_config_json
from verifier.formats.hf_dir import MAX_INDEX_BYTES, SAFETENSORS_INDEX, write_hf_dir
from verifier.formats.tokenizer import MAX_VOCAB_BYTES, TokenizerError, load_gpt2_tokenizer
from verifier.model.presets import preset
from verifier.model.weights import init_weights

LLAMA = preset("llama2c-stories260K").replace(n_layers=2, vocab_size=90, n_ctx=32)


def sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk (all holes)."""
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def test_a_config_json_larger_than_any_is_refused_unread(tmp_path: Path) -> None:
    sparse(tmp_path / "config.json", MAX_CONFIG_BYTES + 1)
    with pytest.raises(CheckpointError, match=r"config\.json: too large for what it is \(expected at most 4,194,304"):
        read_config_json(tmp_path)


def test_a_shard_index_larger_than_any_is_refused_unread(tmp_path: Path) -> None:
    write_hf_dir(tmp_path, LLAMA, init_weights(LLAMA), max_shard_bytes=20_000)
    sparse(tmp_path / SAFETENSORS_INDEX, MAX_INDEX_BYTES + 1)
    with pytest.raises(CheckpointError, match=r"shard index: too large for what it is"):
        load_checkpoint(tmp_path)


def test_a_vocabulary_larger_than_any_is_refused_unread(tmp_path: Path) -> None:
    sparse(tmp_path / "vocab.json", MAX_VOCAB_BYTES + 1)
    (tmp_path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"vocab\.json: vocabulary: too large for what it is"):
        load_gpt2_tokenizer(tmp_path)


def test_a_device_in_place_of_config_json_is_refused(tmp_path: Path) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero on this system")
    (tmp_path / "config.json").symlink_to("/dev/zero")  # read whole, it never ends
    with pytest.raises(CheckpointError, match=r"config\.json: config\.json: not a regular file"):
        read_config_json(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_a_named_pipe_in_place_of_config_json_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "config.json")  # opened for reading, it waits for a writer forever
    # In a child with a timeout, so that the reader waiting forever fails the test rather than hangs it.
    code = "import sys; from verifier.formats.config_json import read_config_json; read_config_json(sys.argv[1])"
    try:
        run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("reading a named pipe as config.json never returned")
    assert "CheckpointError" in run.stderr and "config.json: not a regular file" in run.stderr, run.stderr[-500:]
