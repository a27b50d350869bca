"""The guards under every reader and writer: bounded reads and all-or-nothing writes."""

from __future__ import annotations

import threading
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
    ahead.wait()
    assert asked == [100, 200, 300]  # up to 250 bytes ahead (the last one crosses it)
    ahead.after("w1")
    ahead.wait()
    assert asked == [100, 200, 300, 400]  # w2, w3 were asked already: only what tops up the window
    ahead.after("w2")
    ahead.after("w3")
    ahead.after("w5")
    ahead.wait()
    assert asked == [100, 200, 300, 400, 500]  # each once
    asked.clear()
    ahead.after("w0")  # a new pass asks again
    ahead.wait()
    assert asked == [100, 200, 300]


def test_read_ahead_reads_in_a_thread_while_the_pass_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """posix_fadvise(WILLNEED) alone read nothing on this project's machine: the reads are a thread's,
    and the pass does not wait for them."""
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(range(256)) * 40)
    release, read = threading.Event(), []

    def slow_read(p: Path, offset: int, length: int) -> None:
        release.wait(10)
        with open(p, "rb") as f:
            f.seek(offset)
            read.append((threading.current_thread() is not threading.main_thread(), f.read(length)))

    monkeypatch.setattr(fileio, "read_ahead", slow_read)
    ahead = fileio.ReadAhead({"a": (path, 0, 4096), "b": (path, 4096, 4096)})
    ahead.after("a")  # returns while the read waits
    assert read == []
    release.set()
    ahead.wait()
    assert read == [(True, path.read_bytes()[4096:8192])]


def test_a_new_pass_drops_the_reads_the_last_one_still_had_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, asked = threading.Event(), []

    def blocked(path: Path, offset: int, length: int) -> None:
        asked.append(offset)
        release.wait(10)

    monkeypatch.setattr(fileio, "read_ahead", blocked)
    extents = {f"w{i}": (tmp_path / "f", 100 * i, 100) for i in range(6)}
    ahead = fileio.ReadAhead(extents, window=1000)
    ahead.after("w0")  # asks for w1 .. w5; the thread blocks in w1's read
    ahead.after("w0")  # a new pass: w2 .. w5 of the last one are dropped, then asked for again
    release.set()
    ahead.wait()
    assert asked == [100, 200, 300, 400, 500]


def test_read_ahead_of_a_file_that_is_gone_is_left_to_the_pass_to_report(tmp_path: Path) -> None:
    fileio.read_ahead(tmp_path / "missing.bin", 0, 100)  # no exception: the pass's own read reports it
