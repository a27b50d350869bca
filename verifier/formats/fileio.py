"""Bounded reads, reads at an offset and all-or-nothing writes, shared by every format.

Readers never trust a size they read from a file: `BoundedReader` knows the file size and
refuses to read (or allocate for) more bytes than remain, so a hostile header fails before any
large allocation. `read_array` reads a checked byte range when a weight is looked up (into
memory, not mapped: a mapping of a file that shrinks kills the process); `ReadAhead` reads the
ranges a pass will need next in a thread of its own, while the pass computes. Writers go through `atomic_write`: a
temporary file beside the target, renamed over it only once complete, so a failed write leaves
nothing half-written.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from verifier.formats.errors import CheckpointError


class BoundedReader:
    """Reads exact byte counts from a file whose size is known up front."""

    def __init__(self, path: Path, handle: io.BufferedReader) -> None:
        self.path = path
        self.handle = handle
        self.size = os.fstat(handle.fileno()).st_size

    @property
    def offset(self) -> int:
        return self.handle.tell()

    def require(self, n_bytes: int, what: str) -> None:
        """Raise CheckpointError unless `n_bytes` more bytes remain for `what`."""
        remaining = self.size - self.offset
        if n_bytes > remaining:
            raise CheckpointError(
                self.path,
                what,
                f"file is truncated: {n_bytes:,} bytes needed at offset {self.offset:,}",
                expected=f"at least {self.offset + n_bytes:,} bytes",
                found=f"{self.size:,} bytes",
            )

    def read(self, n_bytes: int, what: str) -> bytes:
        self.require(n_bytes, what)
        return self.handle.read(n_bytes)

    def array(self, dtype: np.dtype, shape: tuple[int, ...], what: str) -> np.ndarray:
        """A new array of `shape` read from the current offset; the size is checked first."""
        count = int(np.prod(shape, dtype=object))
        self.require(count * dtype.itemsize, what)
        out = np.empty(shape, dtype=dtype)
        if self.handle.readinto(out.data.cast("B")) != out.nbytes:
            raise CheckpointError(self.path, what, "short read: the file changed while it was read")
        return out


def read_array(path: Path, offset: int, dtype: np.dtype, shape: tuple[int, ...], what: str) -> np.ndarray:
    """A new array of `shape` read from the file at byte `offset` (a range its reader checked).

    Read, not mapped: a mapped page whose file shrank since kills the process with SIGBUS when
    touched, which no Python code can catch; a file that shrank is a short read here instead.
    """
    out = np.empty(shape, dtype=dtype)
    read_into(path, offset, out, what)
    return out


def read_into(path: Path, offset: int, out: np.ndarray, what: str) -> None:
    """Fill the contiguous array `out` with its size in bytes read from the file at byte `offset` (a
    range its reader checked), as `read_array` reads."""
    view = out.data.cast("B")
    try:
        with open(path, "rb", buffering=0) as handle:
            handle.seek(offset)
            done = 0
            while done < len(view):  # one read returns at most ~2 GiB on Linux
                n = handle.readinto(view[done:])
                if not n:
                    break
                done += n
    except OSError as e:  # the file vanished or cannot be read since it was checked
        raise CheckpointError(path, what, f"cannot be read: {e.strerror or e}") from None
    if done != len(view):
        raise CheckpointError(
            path,
            what,
            "short read: the file changed while it was read",
            expected=f"{len(view):,} bytes at offset {offset:,}",
            found=f"{done:,} bytes",
        )


def read_ahead(path: Path, offset: int, length: int) -> None:
    """Read `length` bytes at `offset` of `path` and drop them: they stay in the page cache for the
    pass that reads them next. A file that cannot be read is left to that pass to report."""
    with contextlib.suppress(OSError), open(path, "rb", buffering=0) as handle:
        buffer = memoryview(bytearray(min(length, _READ_AHEAD_CHUNK)))
        handle.seek(offset)
        while length > 0:
            n = handle.readinto(buffer[:length])  # the GIL is released while it reads
            if not n:
                return
            length -= n


READ_AHEAD_BYTES = 512 * 2**20
_READ_AHEAD_CHUNK = 8 * 2**20


class ReadAhead:
    """Keeps the disk reading ahead of a pass that looks up tensors in a known order: after each
    lookup, the tensors that follow it, up to `window` bytes, are read (`read_ahead`) by a thread of
    its own while the pass computes, each once per pass. `extents` maps each name, in that order, to
    (file, offset, length).

    A thread that reads, not posix_fadvise(WILLNEED): the kernel may ignore that advice, and on this
    project's machine it did (a 1 GiB file advised, then read 3 s later, read at disk speed)."""

    def __init__(self, extents: dict[str, tuple[Path, int, int]], window: int = READ_AHEAD_BYTES) -> None:
        self._extents = list(extents.values())
        self._index = {name: i for i, name in enumerate(extents)}
        self._window = window
        self._last = -1  # the index looked up last
        self._asked = 0  # the tensors before this index have been asked for in this pass
        self._pending: queue.Queue[tuple[Path, int, int] | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def after(self, name: str) -> None:
        """`name` is being read: ask for what follows it."""
        i = self._index[name]
        if i <= self._last:  # back to an earlier tensor: a new pass, and the last pass's reads are moot
            self._asked = 0
            self._drop_pending()
        self._last = i
        ahead = sum(length for _, _, length in self._extents[i + 1 : self._asked])
        while self._asked < len(self._extents) and ahead < self._window:
            if self._asked > i:
                self._ask(self._extents[self._asked])
                ahead += self._extents[self._asked][2]
            self._asked += 1

    def wait(self) -> None:
        """Until every read asked for is done (or dropped)."""
        self._pending.join()

    def _ask(self, extent: tuple[Path, int, int]) -> None:
        if self._thread is None:  # started by the first request: most checkpoints are never streamed
            self._thread = threading.Thread(target=_read_ahead_loop, args=(self._pending,), daemon=True)
            self._thread.start()
        self._pending.put(extent)

    def _drop_pending(self) -> None:
        with contextlib.suppress(queue.Empty):
            while True:
                self._pending.get_nowait()
                self._pending.task_done()

    def __del__(self) -> None:
        if self._thread is not None:
            self._pending.put(None)  # the thread's signal to end


def _read_ahead_loop(pending: queue.Queue[tuple[Path, int, int] | None]) -> None:
    """The read-ahead thread: reads what it is asked for, in order, until told to stop (None). It holds
    the queue, not the ReadAhead, so that the ReadAhead can be collected (and tell it to stop)."""
    while (extent := pending.get()) is not None:
        try:
            read_ahead(*extent)
        finally:
            pending.task_done()


# What a file that is not a regular file is, as messages name it.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_regular(mode: int) -> str:
    """The problem of a file of `mode` that should be a regular file: `not a regular file: it is a
    named pipe (FIFO)`, so that a message says what is there rather than that nothing is."""
    kind = next((name for is_kind, name in _KINDS if is_kind(mode)), None)
    return f"not a regular file: it is {kind}" if kind else "not a regular file"


def is_regular(path: Path, what: str, where: Path | None = None) -> bool:
    """Whether a regular file is at `path` (following links): False when nothing is; CheckpointError
    when something else is (a named pipe, a device, a directory, a link to nothing) or it cannot be
    looked up, naming `where` (the file that names `path`, such as a shard index) or else `path`. For
    the files a model directory names: "holds no config.json" where a named pipe is named config.json
    would send a user looking for a file that is there."""
    where = path if where is None else where
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if not os.path.islink(path):
            return False
        raise CheckpointError(where, what, f"a symbolic link to {os.readlink(path)}, which does not exist") from None
    except OSError as e:  # a name longer than the file system allows (ENAMETOOLONG), a link loop, ...
        raise CheckpointError(where, what, f"cannot be looked up: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(where, what, not_regular(mode))
    return True


def open_regular(path: Path, what: str = "file") -> io.BufferedReader:
    """`path` opened for reading; CheckpointError if it is missing, unreadable or not a regular file
    (opening a named pipe waits for a writer forever; a device such as /dev/zero never ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a named pipe opens at once, refused below
    except OSError as e:
        raise CheckpointError(path, what, f"cannot be opened: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise CheckpointError(path, what, not_regular(mode))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def open_bounded(path: Path) -> Iterator[BoundedReader]:
    """A BoundedReader over `path`; a missing, unreadable or special file is a CheckpointError."""
    with open_regular(path) as handle:
        yield BoundedReader(path, handle)


def read_small(path: Path, what: str, max_bytes: int) -> bytes:
    """The whole of a file that is small by its nature (a config, an index, a vocabulary);
    CheckpointError if it is longer than `max_bytes`, before reading more than that."""
    with open_regular(path, what) as handle:
        size = os.fstat(handle.fileno()).st_size  # a regular file's: read as much, not a buffer of max_bytes
        if size > max_bytes:
            raise CheckpointError(
                path, what, "too large for what it is", expected=f"at most {max_bytes:,} bytes", found=f"{size:,} bytes"
            )
        return handle.read(size)


def read_head(path: Path, n_bytes: int) -> bytes:
    """The first `n_bytes` of `path` (fewer if it is shorter); an unreadable file is a CheckpointError."""
    with open_bounded(path) as reader:
        return reader.handle.read(n_bytes)


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside `path` for a writer that opens its file by name: the file replaces
    `path` only if the block completes, and is removed otherwise."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp makes the file 0600; a saved model is read by others as any file the user writes.
        os.chmod(tmp, 0o666 & ~_umask())
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file handle whose contents replace `path` only if the block completes."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        yield handle
