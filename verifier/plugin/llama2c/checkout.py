"""llama2.c's current C programs (`run.c`, `runq.c`) from a llama2.c source tree, compiled once per source.

The tree is the one $VERIFIER_LLAMA2C_SRC names, and only that: the suite never looks around the
current directory or its own install for one (without it, the built-in `llama2c` runs the pinned
2023 run.c from the suite's cache, `verifier.plugin.llama2c.build`). Each program is compiled as
llama2.c's Makefile does (`gcc -O3 -o run run.c -lm`) into the llama2.c cache directory under a
name holding the source's sha256, so an edited source is rebuilt and parallel workers build once.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from filelock import FileLock

from verifier.plugin.llama2c.build import COMPILE_TIMEOUT_S, Llama2cUnavailable, cache_dir, compiler

SOURCE_ENV = "VERIFIER_LLAMA2C_SRC"
PROGRAMS = ("run", "runq")


def source_tree() -> Path:
    """The llama2.c tree $VERIFIER_LLAMA2C_SRC names; Llama2cUnavailable when it names none, or one without run.c."""
    named = os.environ.get(SOURCE_ENV)
    if not named:
        raise Llama2cUnavailable(
            f"no llama2.c source tree: set ${SOURCE_ENV} to a llama2.c checkout (verifier check: --llama2c-src DIR)"
        )
    tree = Path(named)
    if not (tree / "run.c").is_file():
        raise Llama2cUnavailable(f"${SOURCE_ENV}={named} holds no run.c")
    return tree


def program(name: str) -> Path:
    """The compiled `name` (run or runq) from the source tree, built on first use."""
    if name not in PROGRAMS:
        raise ValueError(f"program must be one of {PROGRAMS}, found {name!r}")
    source = source_tree() / f"{name}.c"
    if not source.is_file():
        raise Llama2cUnavailable(f"{source} does not exist")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"{name}-{digest}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    cc = compiler()
    with FileLock(cache / ".lock"):
        if target.is_file() and os.access(target, os.X_OK):  # built by another process meanwhile
            return target
        tmp = target.with_name(target.name + ".tmp")
        command = [cc, "-O3", "-o", str(tmp), str(source), "-lm"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Llama2cUnavailable(f"compiling {source} failed: {' '.join(command)}: {e}") from None
        if done.returncode != 0:
            raise Llama2cUnavailable(f"compiling {source} failed: {' '.join(command)}:\n{done.stderr.strip()}")
        os.replace(tmp, target)
        return target
