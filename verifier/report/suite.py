"""Finding the property suite and running pytest on it with the results collector.

The suite is the package `verifier.properties` (the `properties/` folder of a clone, installed under
the project's package); `--suite DIR` or $VERIFIER_SUITE points at another folder of properties.

pytest runs with the suite's own configuration (`OWN_CONFIG`, the suite's folder as rootdir and
confcutdir) and without $PYTEST_ADDOPTS: a user's `filterwarnings = error` or a stray `addopts` in a
pytest.ini, pyproject.toml, tox.ini or setup.cfg around the current directory or the installed
package would otherwise turn a library's deprecation warning into a failure of a model, or every
run into a usage error. A user's configuration applies only when asked for (`config`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import verifier.properties as suite_package
from verifier.plugin import isolation, processes

SUITE_ENV_VAR = "VERIFIER_SUITE"
OWN_CONFIG = Path(__file__).resolve().with_name("pytest.ini")
IGNORED_ENV = ("PYTEST_ADDOPTS",)  # the user's pytest options: `verifier check -- OPTIONS` passes them on
_POLL_S = 0.1  # how often a run checks for Ctrl-C while pytest runs
# SIGTERM (what CI timeouts and cancellations send) stops a run as Ctrl-C does: left to its default
# action it would kill this process alone, leaving pytest (in its own process group) running to the end.
STOPS = (signal.SIGINT, signal.SIGTERM)
# The watchdog of a run: it reads its standard input, the read end of a pipe only `run` holds open for
# writing, to its end, which comes when `run` is done or this process dies in any way, SIGKILL included;
# then it kills its process group, pytest's: pytest, its xdist workers and whatever the model started.
# A process rather than prctl(PR_SET_PDEATHSIG) in pytest: PDEATHSIG is Linux's only and signals pytest
# alone (its workers and the model's processes would run on), and rather than a thread in pytest: a
# native engine holding Python's lock (the GIL) would keep a thread from acting.
# It also removes the run's private temporary folder (its argument), which no handler of a SIGKILLed run
# would: a child of it, in a session of its own from the start (so that the kill spares it), waits for the
# same end of input, then for the group's processes to end, then removes the folder.
_WATCHDOG = """
import os, shutil, signal, sys, time
group = os.getpgrp()
def running():  # a process of the group that has not ended (a zombie has: it waits for init to reap it)
    if not os.path.isdir("/proc"):
        return time.monotonic() < start + 1
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, _, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(pgrp) == group and state != "Z":
            return True
    return False
if os.fork() == 0:
    os.setsid()
    sys.stdin.buffer.read()
    start = time.monotonic()
    while running() and time.monotonic() < start + 30:
        time.sleep(0.05)
    shutil.rmtree(sys.argv[1], ignore_errors=True)
    os._exit(0)
sys.stdin.buffer.read()
os.killpg(group, signal.SIGKILL)
"""


class SuiteNotFound(ValueError):
    """No property suite where one was looked for; the message says where and how to point at one."""


class PytestOptionError(ValueError):
    """A pytest option or configuration `verifier check` cannot run with; the message says what to do."""


# pytest-xdist's options: the runs they ask for need it installed (a core dependency, but an install
# made with --no-deps, or one it was removed from, lacks it).
_XDIST_OPTIONS = ("--numprocesses", "--maxprocesses", "--dist", "--tx")


def parallel_args(pytest_args: Sequence[str]) -> list[str]:
    """The arguments of `pytest_args` that ask for pytest-xdist's parallel workers (`-n 2`, `--dist`, ...)."""
    return [a for a in pytest_args if a.startswith("-n") or a.split("=", 1)[0] in _XDIST_OPTIONS]


def check_pytest_args(pytest_args: Sequence[str]) -> None:
    """Raise PytestOptionError for a parallel run (`-n`, ...) where pytest-xdist is not installed."""
    parallel = parallel_args(pytest_args)
    if parallel and importlib.util.find_spec("xdist") is None:
        raise PytestOptionError(
            f"{parallel[0]} runs the suite in parallel with pytest-xdist, which is not installed here: "
            "pip install pytest-xdist"
        )


def pytest_config(path: str) -> Path:
    """The user's pytest configuration file `path` (--pytest-config), which must be a file."""
    config = Path(path)
    if not config.is_file():
        raise PytestOptionError(f"--pytest-config {path}: no such file (give a pytest.ini, pyproject.toml, "
                                "tox.ini or setup.cfg)")  # fmt: skip
    return config.resolve()


def default_suite() -> Path:
    """The installed suite: the folder of `verifier.properties` (a clone's `properties/` when editable)."""
    return Path(suite_package.__file__).resolve().parent


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


def pytest_command(arguments: Sequence[str]) -> list[str]:
    """The command line that runs pytest with `arguments` (`pytest_arguments`) in a process of its own."""
    return [sys.executable, "-m", "pytest", *arguments]


def pytest_arguments(
    suite: Path,
    results: Path,
    *,
    models: Sequence[str] = (),
    profile: str | None = None,
    pytest_args: Sequence[str] = (),
    config: Path | None = None,
) -> list[str]:
    """pytest's arguments for a run of the suite with the results collector loaded, configured by `config` (a
    pytest.ini, pyproject.toml, tox.ini or setup.cfg) or else by the suite's own file: what `pytest.main` takes
    in this process (`verifier.report.inprocess`), and `pytest_command` in a process of its own."""
    arguments = [str(suite), "-p", "verifier.report.collect"]
    # The rootdir and the conftest.py files pytest reads stop at the suite: none from its parents.
    arguments += ["-c", str(config or OWN_CONFIG), f"--rootdir={suite}", f"--confcutdir={suite}"]
    # pytest keeps its cache under the rootdir, here the installed suite: keep it in the user's directory
    # (unless the user turned the cache off, when pytest would warn of an unknown option).
    if not _turned_off("cacheprovider", pytest_args):
        arguments += ["-o", f"cache_dir={Path.cwd() / '.pytest_cache'}"]
    arguments.append(f"--verifier-results={results}")
    arguments += [f"--model={model}" for model in models]
    if profile:
        arguments.append(f"--hypothesis-profile={profile}")
    return [*arguments, *pytest_args]


def _turned_off(plugin: str, pytest_args: Sequence[str]) -> bool:
    """Whether `pytest_args` turn off `plugin` (`-p no:NAME` or `-pno:NAME`)."""
    given = [value for option, value in itertools.pairwise(pytest_args) if option == "-p"]
    given += [a.removeprefix("-p") for a in pytest_args if a.startswith("-p") and a != "-p"]
    return f"no:{plugin}" in given


def run(command: Sequence[str], log: Path | None = None, hang_dir: Path | None = None) -> int:
    """Run pytest in the current directory, so the user's modules import as they do for plain pytest,
    without the variables of `IGNORED_ENV`. With `hang_dir`, a process ended because a call into a model
    never came back leaves its traceback there (`isolation.HANG_DIR_ENV`, read by `collect.hung_call`).

    With `log`, pytest's whole output goes to that file, and the results collector writes its short
    progress to this process's standard output (a descriptor passed down as --verifier-progress-fd).

    Ctrl-C stops pytest as it stops a plain run: pytest (in its own process group, so that it gets
    one interrupt, from here) ends the test it is in and writes the results so far, which say the run
    was interrupted. A second Ctrl-C kills it. Interrupts are recorded from before pytest starts, so
    none can leave it running unwatched. SIGTERM counts as a Ctrl-C (`STOPS`): it is passed on as
    SIGTERM, which the results collector turns into pytest's KeyboardInterrupt, naming it.

    pytest and every process it starts die with this process, even killed (`_WATCHDOG`); and when pytest
    ends, whatever is left of what it started is killed, a process that left its group by `setsid()`
    included (Linux: this process is their subreaper, `verifier.plugin.processes`), and the private
    temporary folder it ran with ($TMPDIR) is removed.
    """
    env = {name: value for name, value in os.environ.items() if name not in IGNORED_ENV}
    with contextlib.ExitStack() as stack:
        private = tempfile.mkdtemp(prefix="verifier-check-")
        stack.callback(shutil.rmtree, private, ignore_errors=True)
        env["TMPDIR"] = private  # what the models write there (exported models, quantized files) goes with the run
        if hang_dir is not None:
            env[isolation.HANG_DIR_ENV] = str(hang_dir)
        output, progress = None, None
        if log is not None:
            output = stack.enter_context(log.open("wb"))
            progress = _terminal()
            if progress is not None:
                stack.callback(os.close, progress)
                command = [*command, f"--verifier-progress-fd={progress}"]
        return _watch(command, env, output, progress, private)


def _terminal() -> int | None:
    """A duplicate of standard output's descriptor for pytest to inherit, or None when it has none."""
    try:
        sys.stdout.flush()
        return os.dup(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # replaced by an object without a descriptor
        return None


def _watch(
    command: Sequence[str], env: dict[str, str], output: IO[bytes] | None, progress: int | None, private: str
) -> int:
    """Start `command` and wait for it, passing Ctrl-C on as `run` says."""
    processes.become_subreaper()
    before = processes.children()
    watched, watching = os.pipe()  # neither end is inherited by pytest (PEP 446)
    try:
        # The watchdog leads the process group pytest joins, from before pytest starts.
        watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHDOG, private],
            stdin=watched,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            process_group=0,
        )
    except BaseException:
        os.close(watching)
        raise
    finally:
        os.close(watched)
    interrupts: list[int] = []
    started = [watchdog.pid]
    previous = {stop: signal.signal(stop, lambda signum, frame: interrupts.append(signum)) for stop in STOPS}
    try:
        process = subprocess.Popen(
            list(command),
            process_group=watchdog.pid,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            pass_fds=() if progress is None else (progress,),
        )
        started.append(process.pid)
        forwarded = False
        while True:
            try:
                status = process.wait(timeout=_POLL_S)
            except subprocess.TimeoutExpired:
                pass
            else:
                if interrupts and status == -interrupts[0]:  # killed by the stop passed on, before it could stop
                    raise KeyboardInterrupt
                return status
            if len(interrupts) > 1:
                process.kill()
                process.wait()
                raise KeyboardInterrupt
            if interrupts and not forwarded:
                process.send_signal(interrupts[0])
                forwarded = True
    finally:
        os.close(watching)  # pytest is done: the watchdog ends what it left running, and itself
        watchdog.wait()
        processes.wait_group_gone(watchdog.pid)  # then what left the group is reparented here: killed too
        processes.kill_trees(processes.strays(before, *started))
        for stop, handler in previous.items():
            signal.signal(stop, handler)
