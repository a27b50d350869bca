"""Finding the property suite and running pytest on it with the results collector.

The suite is the package `verifier.properties` (the `properties/` folder of a clone, installed under
the project's package); `--suite DIR` or $VERIFIER_SUITE points at another folder of properties.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import verifier.properties

SUITE_ENV_VAR = "VERIFIER_SUITE"
_POLL_S = 0.1  # how often a run checks for Ctrl-C while pytest runs


class SuiteNotFound(ValueError):
    """No property suite where one was looked for; the message says where and how to point at one."""


def default_suite() -> Path:
    """The installed suite: the folder of `verifier.properties` (a clone's `properties/` when editable)."""
    return Path(verifier.properties.__file__).resolve().parent


def find_suite(option: str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The suite folder: `option`, else $VERIFIER_SUITE, else `default_suite()`; it must hold tests."""
    env = os.environ if environ is None else environ
    if option:
        path, source = Path(option), "--suite"
    elif env.get(SUITE_ENV_VAR):
        path, source = Path(env[SUITE_ENV_VAR]), f"${SUITE_ENV_VAR}"
    else:
        path, source = default_suite(), "the installed verifier.properties"
    if not path.is_dir():
        raise SuiteNotFound(
            f"no property suite at {path} ({source}); point at a folder of properties with --suite DIR "
            f"or ${SUITE_ENV_VAR}, or leave both unset to run the installed suite"
        )
    if not any(path.rglob("test_*.py")) and not any(path.rglob("*_test.py")):
        raise SuiteNotFound(f"{path} ({source}) holds no test_*.py files: not a property suite")
    return path.resolve()


def pytest_command(
    suite: Path,
    results: Path,
    *,
    models: Sequence[str] = (),
    profile: str | None = None,
    pytest_args: Sequence[str] = (),
) -> list[str]:
    """The command line that runs the suite under pytest with the results collector loaded."""
    command = [sys.executable, "-m", "pytest", str(suite), "-p", "verifier.report.collect"]
    # pytest keeps its cache under the rootdir, here the installed suite: keep it in the user's directory.
    command += ["-o", f"cache_dir={Path.cwd() / '.pytest_cache'}"]
    command.append(f"--verifier-results={results}")
    command += [f"--model={model}" for model in models]
    if profile:
        command.append(f"--hypothesis-profile={profile}")
    return [*command, *pytest_args]


def run(command: Sequence[str]) -> int:
    """Run pytest in the current directory, so the user's modules import as they do for plain pytest.

    Ctrl-C stops pytest as it stops a plain run: pytest (in its own process group, so that it gets
    one interrupt, from here) ends the test it is in and writes the results so far, which say the run
    was interrupted. A second Ctrl-C kills it. Interrupts are recorded from before pytest starts, so
    none can leave it running unwatched.
    """
    interrupts: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupts.append(signum))
    try:
        process = subprocess.Popen(list(command), process_group=0)
        forwarded = False
        while True:
            try:
                return process.wait(timeout=_POLL_S)
            except subprocess.TimeoutExpired:
                pass
            if len(interrupts) > 1:
                process.kill()
                process.wait()
                raise KeyboardInterrupt
            if interrupts and not forwarded:
                process.send_signal(signal.SIGINT)
                forwarded = True
    finally:
        signal.signal(signal.SIGINT, previous)
