"""The guards under every reader and writer: bounded reads and all-or-nothing writes."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from verifier.formats import CheckpointError
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
