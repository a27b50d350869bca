"""The guards under every reader and writer: bounded reads and all-or-nothing writes."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from verifier.formats import CheckpointError, fileio
from verifier.formats.fileio import atomic_write, open_bounded


def test_a_read_beyond_the_file_fails_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "small.bin"
    path.write_bytes(bytes(100))
    with open_bounded(path) as reader:
        assert reader.array(np.dtype("<f4"), (5, 5), "first").shape == (5, 5)
        tracemalloc.start()
        try:
            with pytest.raises(CheckpointError, match=r"second: file is truncated.*at least 4,000,000,100 bytes"):
                reader.array(np.dtype("<f4"), (10**9,), "second")
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    assert peak < 64 * 1024


def test_a_missing_file_is_a_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot be opened"), open_bounded(tmp_path / "absent.bin"):
        pass


def test_atomic_write_replaces_only_on_success(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    with atomic_write(path) as handle:
        handle.write(b"first")
    with pytest.raises(RuntimeError), atomic_write(path) as handle:
        handle.write(b"half of the second")
        raise RuntimeError("interrupted")
    assert path.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_read_ahead_asks_for_the_following_tensors_within_the_window_once_per_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []
    monkeypatch.setattr(fileio, "read_ahead", lambda path, offset, length: asked.append(offset))
    extents = {f"w{i}": (tmp_path / "f", 100 * i, 100) for i in range(6)}  # six tensors of 100 bytes
    ahead = fileio.ReadAhead(extents, window=250)
    ahead.after("w0")
    assert asked == [100, 200, 300]  # up to 250 bytes ahead (the last one crosses it)
    ahead.after("w1")
    assert asked == [100, 200, 300, 400]  # w2, w3 were asked already: only what tops up the window
    ahead.after("w2")
    ahead.after("w3")
    assert asked == [100, 200, 300, 400, 500]  # each once
    ahead.after("w5")
    asked.clear()
    ahead.after("w0")  # a new pass asks again
    assert asked == [100, 200, 300]
