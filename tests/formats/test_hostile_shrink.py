"""A checkpoint file that shrinks after it was opened (issue 25): weights already handed out stay
valid and the next weight read is a one-line CheckpointError, never the SIGBUS a memory mapping of
the vanished pages raises when touched (which kills Python outright). Run in a child process, so
that the death it guards against cannot take pytest with it."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from verifier.formats.hf_dir import write_hf_dir
from verifier.formats.llama2c import write_llama2c
from verifier.model.presets import preset
from verifier.model.weights import init_weights

LLAMA = preset("llama2c-stories260K").replace(n_layers=2, vocab_size=90, n_ctx=32, tie_embeddings=False)

# Every weight fetched and summed, the file cut to nothing, the weights summed again (they were
# read: their values must not change), then one weight fetched anew: a CheckpointError, exit 2.
CHILD = """
import os, sys
from verifier.formats import CheckpointError, {loader}
path, shrunk = sys.argv[1], sys.argv[2]
weights = {loader}(path).weights
held = {{name: weights[name] for name in weights}}
sums = {{name: float(w.sum()) for name, w in held.items()}}
os.truncate(shrunk, 0)
assert sums == {{name: float(w.sum()) for name, w in held.items()}}, "weights read changed"
print("weights read stay valid", flush=True)
try:
    weights[next(iter(weights))]
except CheckpointError as e:
    print(e)
    sys.exit(2)
"""


def run_child(loader: str, path: Path, shrunk: Path) -> subprocess.CompletedProcess[str]:
    code = CHILD.format(loader=loader)
    return subprocess.run(
        [sys.executable, "-c", code, str(path), str(shrunk)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("hf", {}),
        ("hf", {"max_shard_bytes": 20_000}),
        ("llama2c", {"version": 0}),
        ("llama2c", {"version": 1}),
        ("llama2c", {"version": 2}),
    ],
    ids=["safetensors", "safetensors-sharded", "llama2c-v0", "llama2c-v1", "llama2c-v2"],
)
def test_a_mapped_checkpoint_that_shrinks_is_a_checkpoint_error_not_sigbus(
    tmp_path: Path, fmt: str, options: dict[str, int]
) -> None:
    path = tmp_path / ("model" if fmt == "hf" else "model.bin")
    write = write_hf_dir if fmt == "hf" else write_llama2c
    write(path, LLAMA, init_weights(LLAMA, seed=1), **options)
    # The file holding the first weight (the embedding): in a sharded directory, the first shard.
    shrunk = min(path.glob("model*.safetensors")) if fmt == "hf" else path
    result = run_child("map_checkpoint", path, shrunk)
    assert result.returncode != -signal.SIGBUS, "the child died of SIGBUS touching a mapped page that vanished"
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "weights read stay valid"
    assert len(lines) == 2 and "the file changed while it was read" in lines[1], result.stdout


def write_torch(directory: Path) -> Path:
    import torch

    write_hf_dir(directory, LLAMA, init_weights(LLAMA, seed=1))
    state = {name: torch.from_numpy(w) for name, w in init_weights(LLAMA, seed=1).items()}
    torch.save(state, directory / "pytorch_model.bin")  # a zip archive, as save_pretrained writes
    (directory / "model.safetensors").unlink()
    return directory / "pytorch_model.bin"


def write_gguf_file(directory: Path) -> Path:
    from verifier.formats.gguf import write_gguf

    write_gguf(directory / "model.gguf", LLAMA, init_weights(LLAMA, seed=1))
    return directory / "model.gguf"


@pytest.mark.parametrize(
    ("write", "package"),
    [(write_torch, "torch"), (write_gguf_file, "gguf")],
    ids=["torch zip (was loaded with mmap=True)", "gguf (the package maps the file while it is read)"],
)
def test_weights_loaded_whole_stay_valid_after_the_file_shrinks(tmp_path: Path, write: Any, package: str) -> None:
    """Loaded whole, no weight may remain a view of a mapping: torch's float32 tensors loaded with
    mmap=True were, and touching one after the file shrank killed the process."""
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    shrunk = write(tmp_path)
    result = run_child("load_checkpoint", tmp_path if package == "torch" else shrunk, shrunk)
    assert result.returncode != -signal.SIGBUS, "the child died of SIGBUS touching a mapped page that vanished"
    # Every weight is in memory, so a lookup after the shrink succeeds too (exit 0).
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["weights read stay valid"]
