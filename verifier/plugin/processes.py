"""Programs a model under test runs, run so that they cannot hang, flood or outlive the suite.

`run` starts a program in a session of its own (so in its own process group), reads its stdout up to a
bound the caller sets from the output it expects (and its stderr's last `STDERR_KEPT` bytes, however
much it prints), stops it at its timeout, and when it is done, however it ended, kills everything it
started: its process group, and on Linux also what left the group (a child that called `setsid()`, a
daemon that forked twice). For those, this process becomes a child subreaper (`prctl`), so that a
descendant whose parent died is reparented here rather than to init, and can be found and killed: any
child of this process in another session that appeared during the run is the program's. Elsewhere
only the process group is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

STDERR_KEPT = 64 * 1024  # the end of what a program prints on stderr: its error, if it has one
_CHUNK = 1 << 16
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_KILL_ROUNDS = 20  # a program forking as fast as it is killed is given up on after this many rounds
_subreaper: bool | None = None  # whether this process is one: None until a program first runs


@dataclass(frozen=True)
class Finished:
    """How a program's run ended: `status` is its exit status (negative: the signal that killed it; None
    when it was stopped for its timeout or for flooding stdout), with what it printed: stdout (at most
    the bound it was run with) and the last STDERR_KEPT bytes of stderr."""

    status: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    flooded: bool = False


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux); whether it is one."""
    global _subreaper
    if _subreaper is None:
        _subreaper = False
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                libc = ctypes.CDLL(None, use_errno=True)
                _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return _subreaper


def children(pid: int | None = None) -> set[int]:
    """The direct children of process `pid` (this one by default), from /proc (empty where there is none)."""
    pid = os.getpid() if pid is None else pid
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{task}/children") as f:
            found.update(int(child) for child in f.read().split())
    return found


def group(pid: int) -> int | None:
    """The process group of process `pid`, or None if it is gone."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def group_members(pgid: int) -> list[int]:
    """The processes of group `pgid` that have not ended, from /proc (none where there is none). A zombie has
    ended: it only waits for its parent, perhaps this process, to reap it."""
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat") as f:
                state, _, pgrp = f.read().rsplit(")", 1)[1].split()[:3]  # after the name: state, ppid, pgrp
                if int(pgrp) == pgid and state != "Z":
                    found.append(int(entry))
    return found


def wait_group_gone(pgid: int, timeout_s: float = 2.0) -> None:
    """Wait until no process of group `pgid` is left (killed processes take a moment to end, and only then
    are their children reparented), or `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)


def kill_trees(roots: Iterable[int]) -> None:
    """SIGKILL each of `roots` and every descendant (found before each round: a killed parent's children
    are reparented, here if this is their subreaper), and reap those that were this process's children."""
    mine = os.getpid()
    pending = set(roots)
    for _ in range(_KILL_ROUNDS):
        tree: list[int] = []
        while pending:
            pid = pending.pop()
            tree.append(pid)
            pending |= children(pid)
        if not tree:
            return
        ours = children(mine)
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in tree:
            if pid in ours:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, 0)
        pending = {pid for pid in children(mine) - ours if pid not in tree}  # adopted while killing


def strays(before: set[int], *started: int) -> set[int]:
    """Children of this process that appeared since `before` (but those it `started`) in another process
    group: processes a program started (reparented here, this being their subreaper), not children other
    code of this process made, which stay in its group."""
    own = os.getpgrp()
    return {pid for pid in children() - before - set(started) if group(pid) not in (own, None)}


def run(argv: Sequence[str], *, cwd: Path, timeout_s: float, max_stdout: int | None) -> Finished:
    """Run `argv` in `cwd` with no stdin, in a session of its own; return how it ended.

    Its stdout is read up to `max_stdout` bytes (None: only its last STDERR_KEPT bytes are kept, as for
    stderr): one byte more stops it (`flooded`). It is stopped at `timeout_s` (`timed_out`). Whatever
    it started is killed when it is done. OSError if it cannot start."""
    become_subreaper()
    before = children()
    process = subprocess.Popen(
        list(argv),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        return _collect(process, timeout_s, max_stdout)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # what it left running in its group
        except OSError:  # nothing was left: no member to wait for
            process.wait()
        else:
            process.wait()
            wait_group_gone(process.pid)
        kill_trees(strays(before, process.pid))
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def _collect(process: subprocess.Popen[bytes], timeout_s: float, max_stdout: int | None) -> Finished:
    """Read the program's two pipes until both end, it floods stdout, or its time is up. A program that
    has exited while something it started still holds a pipe is done (its stragglers are killed)."""
    assert process.stdout is not None and process.stderr is not None
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout_s
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, out)
        selector.register(process.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                return Finished(None, bytes(out[: max_stdout or 0]), bytes(err[-STDERR_KEPT:]), timed_out=True)
            if exited_at is None and process.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:  # a child of it holds the pipe open
                break
            for key, _ in selector.select(timeout=min(0.1, deadline - now)):
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                kept: bytearray = key.data
                kept += chunk
                if kept is out and max_stdout is not None and len(out) > max_stdout:
                    return Finished(None, bytes(out[:max_stdout]), bytes(err[-STDERR_KEPT:]), flooded=True)
                if len(kept) > 2 * STDERR_KEPT and (kept is err or max_stdout is None):
                    del kept[:-STDERR_KEPT]
    status = process.wait()
    return Finished(status, bytes(out if max_stdout is not None else out[-STDERR_KEPT:]), bytes(err[-STDERR_KEPT:]))
