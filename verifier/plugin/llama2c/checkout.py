"""llama2.c's current C programs (`run.c`, `runq.c`) from a llama2.c source tree, compiled once per source.

The tree is the one $VERIFIER_LLAMA2C_SRC names, else a `shared/llama2c-src` folder beside the
project's root (or beside the current directory) when there is one. Each program is compiled as
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
_SHARED = Path("shared") / "llama2c-src"


def source_tree() -> Path:
    """The llama2.c tree to build from; Llama2cUnavailable says where the suite looked."""
    override = os.environ.get(SOURCE_ENV)
    if override:
        tree = Path(override)
        if not (tree / "run.c").is_file():
            raise Llama2cUnavailable(f"${SOURCE_ENV}={override} holds no run.c")
        return tree
    # Beside the clone's root (an installed package has no clone: site-packages is no project), and
    # beside the current directory.
    project = Path(__file__).resolve().parents[3]
    roots = [project] if (project / "pyproject.toml").is_file() else []
    candidates = list(dict.fromkeys(root.parent / _SHARED for root in [*roots, Path.cwd().resolve()]))
    for tree in candidates:
        if (tree / "run.c").is_file():
            return tree
    looked = ", ".join(str(c) for c in candidates)
    raise Llama2cUnavailable(f"no llama2.c source tree: set ${SOURCE_ENV} to a llama2.c checkout (looked in {looked})")


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
