"""A hostile program for the command-line protocol: `python hostile.py MODE OUT PIDS ...`, where OUT is the
.npy file the suite reads ({out}) and PIDS a file where it writes the pid of each process it leaves
behind, for the test to check that none survives the run. It never answers correctly: each mode is one
way a program can try to hang, flood or outlive the suite. Modes:
  flood-stdout    prints 1 GiB on stdout
  flood-stderr    prints 1 GiB on stderr, then exits with status 3
  claims-2gib     writes a .npy whose header claims 2 GiB of float32 (and holds a few bytes)
  oversized-npy   writes a real .npy of 64 MB, far more than the logits asked for
  fifo-npy        leaves a named pipe where the .npy file should be
  spins           starts two children spinning in its process group, then hangs itself
  holds-stdout    starts a child that sleeps holding stdout, prints words and exits
  escapes         starts a daemon that leaves its session (setsid) and forks again, then exits with status 3
"""

from __future__ import annotations

import os
import sys
import time

GIB = 1 << 30
_LINE = b"1.0 " * 16383 + b"1.0\n"  # 64 KiB of numbers


def _leave(pids: str, pid: int) -> None:
    with open(pids, "a") as f:
        f.write(f"{pid}\n")


def _flood(fd: int) -> None:
    written = 0
    while written < GIB:
        written += os.write(fd, _LINE)


def _npy_header(shape: tuple[int, ...]) -> bytes:
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


def main(mode: str, out: str, pids: str, *rest: str) -> None:
    if mode == "flood-stdout":
        _flood(1)
    elif mode == "flood-stderr":
        _flood(2)
        sys.exit(3)
    elif mode == "claims-2gib":
        with open(out, "wb") as f:
            f.write(_npy_header((1 << 29,)) + b"\x00" * 16)
    elif mode == "oversized-npy":
        with open(out, "wb") as f:
            f.write(_npy_header((1 << 24,)) + b"\x00" * (4 << 24))
    elif mode == "fifo-npy":
        os.mkfifo(out)
    elif mode == "spins":
        for _ in range(2):
            if (child := os.fork()) == 0:
                while True:
                    pass
            _leave(pids, child)
        time.sleep(600)
    elif mode == "holds-stdout":
        if (child := os.fork()) == 0:
            time.sleep(600)
            os._exit(0)
        _leave(pids, child)
        print("hello world", flush=True)
    elif mode == "escapes":
        if os.fork() == 0:
            os.setsid()
            if (daemon := os.fork()) == 0:
                os.close(1)
                os.close(2)
                time.sleep(600)
                os._exit(0)
            _leave(pids, daemon)
            os._exit(0)
        time.sleep(0.2)  # the daemon has written its pid
        sys.exit(3)


if __name__ == "__main__":
    main(*sys.argv[1:])
