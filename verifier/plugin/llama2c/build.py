"""Fetching llama2.c's `run.c` and compiling it once per machine, safely under parallel workers.

The source is the `run.c` of the PyPI sdist llamac2py 0.1.4 (llama2.c's run.c at commit fd68dd2,
2023-07-28, with CRLF line ends): pip fetches the sdist with its sha256 required, so a tampered
or different file is refused before anything in it is used. The sdist, the extracted `run.c` and
the binaries live in one cache directory (VERIFIER_LLAMA2C_CACHE, default
`$XDG_CACHE_HOME/lm-verifier/llama2c` or `~/.cache/lm-verifier/llama2c`); a sdist placed there by
hand is used without the network. A file lock serialises fetching and compiling, so parallel
pytest-xdist workers build once. Everything is written to a temporary name, then renamed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from filelock import FileLock

CACHE_ENV = "VERIFIER_LLAMA2C_CACHE"
SDIST_REQUIREMENT = "llamac2py==0.1.4"
SDIST_FILE = "llamac2py-0.1.4.tar.gz"
SDIST_SHA256 = "87f55b96ba0a9d7430d84578d947bde4ae2c76a54528bee0dbad0dc7fc9aa2ae"
RUN_C_MEMBER = "llamac2py-0.1.4/run.c"
RUN_C_SHA256 = "0b1071ae08dd2af55e43e13826fa81b054930bcac8cf85136cc69934e63e3249"  # after CRLF -> LF
# llama2.c's Makefile builds `run` with -O3 and `runfast` with -Ofast (which allows reassociation).
OPTIMIZATIONS = {"O3": ("-O3",), "Ofast": ("-Ofast",)}
COMPILERS = ("gcc", "cc", "clang")
FETCH_TIMEOUT_S = 300
COMPILE_TIMEOUT_S = 300


class Llama2cUnavailable(RuntimeError):
    """llama2.c's program cannot be had on this machine; the message says why."""


def cache_dir() -> Path:
    """Where the sdist, `run.c` and the binaries are kept."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lm-verifier" / "llama2c"


def compiler() -> str:
    """The C compiler to use: $CC, else the first of gcc, cc, clang on PATH."""
    chosen = os.environ.get("CC") or next((c for c in COMPILERS if shutil.which(c)), None)
    if not chosen or not shutil.which(chosen):
        raise Llama2cUnavailable(
            f"no C compiler found (looked for $CC={os.environ.get('CC')!r}, then {', '.join(COMPILERS)} on PATH)"
        )
    return chosen


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fetch_sdist(cache: Path) -> Path:
    sdist = cache / SDIST_FILE
    if sdist.is_file() and _sha256(sdist) == SDIST_SHA256:
        return sdist
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(f"{SDIST_REQUIREMENT} --hash=sha256:{SDIST_SHA256}\n")
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--require-hashes",
            "-r",
            str(requirements),
            "-d",
            tmp,
            "--quiet",
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Llama2cUnavailable(f"cannot fetch the sdist {SDIST_REQUIREMENT} with pip: {e}") from None
        fetched = Path(tmp) / SDIST_FILE
        if done.returncode != 0 or not fetched.is_file():
            detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise Llama2cUnavailable(
                f"the sdist {SDIST_REQUIREMENT} is not in {cache} and pip could not fetch it: {detail[0]}"
            )
        if _sha256(fetched) != SDIST_SHA256:  # pip checked it already; a second look costs nothing
            raise Llama2cUnavailable(f"the fetched {SDIST_FILE} does not have the sha256 {SDIST_SHA256}")
        os.replace(fetched, sdist)
    return sdist


def _extract_run_c(cache: Path, sdist: Path) -> Path:
    """`run.c` from the sdist with CRLF turned into LF (then it is llama2.c's file byte for byte)."""
    target = cache / "run.c"
    with tarfile.open(sdist, "r:gz") as archive:
        member = archive.extractfile(RUN_C_MEMBER)
        if member is None:
            raise Llama2cUnavailable(f"{sdist} holds no {RUN_C_MEMBER}")
        source = member.read().replace(b"\r\n", b"\n")
    if hashlib.sha256(source).hexdigest() != RUN_C_SHA256:
        raise Llama2cUnavailable(f"{RUN_C_MEMBER} in {sdist} is not llama2.c's run.c at fd68dd2 (sha256 differs)")
    tmp = target.with_suffix(".c.tmp")
    tmp.write_bytes(source)
    os.replace(tmp, target)
    return target


def source() -> Path:
    """The verified `run.c` in the cache, fetched and extracted on first use."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(cache / ".lock"):
        run_c = cache / "run.c"
        if run_c.is_file() and _sha256(run_c) == RUN_C_SHA256:
            return run_c
        return _extract_run_c(cache, _fetch_sdist(cache))


def binary(optimization: str = "O3") -> Path:
    """The compiled `run.c` (`gcc -O3 -o run run.c -lm`, or -Ofast), built once into the cache.

    A binary already in the cache is used as it is; otherwise a compiler is required first, so a
    machine without one fails fast, before anything is fetched.
    """
    if optimization not in OPTIMIZATIONS:
        raise ValueError(f"optimization must be one of {sorted(OPTIMIZATIONS)}, found {optimization!r}")
    target = cache_dir() / f"run-{optimization}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    cc = compiler()
    run_c = source()
    with FileLock(run_c.parent / ".lock"):
        if target.is_file() and os.access(target, os.X_OK):  # built by another process meanwhile
            return target
        tmp = target.with_name(target.name + ".tmp")
        command = [cc, *OPTIMIZATIONS[optimization], "-o", str(tmp), str(run_c), "-lm"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Llama2cUnavailable(f"compiling run.c failed: {' '.join(command)}: {e}") from None
        if done.returncode != 0:
            raise Llama2cUnavailable(f"compiling run.c failed: {' '.join(command)}:\n{done.stderr.strip()}")
        os.replace(tmp, target)
        return target
