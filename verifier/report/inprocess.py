"""`check`: the property suite run on a model in this process, its `Report` returned.

What `verifier check` runs, pytest on the suite with the suite's own configuration and the results
collector (`verifier.report.suite.pytest_arguments`), run by `pytest.main` here rather than in a
process of its own: for tests and notebooks that need a verdict, and for a factory that no
`module.path:factory` text names (a closure, an object built at run time), which is handed to the
run as it is (`verifier.fixtures.plugin.GivenModels`).

    >>> from verifier import check
    >>> report = check("numpy", pytest_args=["-q", "-k", "test_logits_agree"])  # doctest: +SKIP
    >>> report.verdict, [(r.property, r.outcome) for r in report.failures]  # doctest: +SKIP
    ('conforms', [])

The command keeps its subprocess, and a model that is not trusted belongs there; see `check` for what
a run in this process does not protect against.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from verifier.fixtures.plugin import GivenModels, given_specs
from verifier.plugin import processes
from verifier.plugin.interface import Factory
from verifier.plugin.registry import ModelSpec
from verifier.properties import profiles
from verifier.report import suite
from verifier.report.output import JSON, only_run, publish, write_reports
from verifier.report.results import Report

ORIGIN = "verifier.check"  # where a model given as an object comes from, in the report's header
# A second run finds the suite's modules (and `verifier`) imported by the first, too late for pytest's
# assertion rewriting, which warns of each; they were rewritten, or are not test modules, and a user's
# `-W error` must not turn that into a failure. Given after the user's arguments, so that it wins.
_ALREADY_IMPORTED = ["-W", "ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning"]
_PYTEST_USAGE_ERROR = 4


def check(
    model: str | ModelSpec | Factory,
    *,
    families: str | Sequence[str] | None = None,
    profile: str | None = None,
    pytest_args: Sequence[str] = (),
    reports: str | os.PathLike[str] | None = None,
    name: str | None = None,
) -> Report:
    """Run the property suite on `model` in this process and return the report `verifier check` would write.

    Args:
        model: a factory `(config, weights) -> model`, a `module.path:factory` text or a registered or
            installed name (as `--model` takes them), or a `ModelSpec`.
        families: test on these families only, each as a model of its own (`NAME@FAMILY`); by default
            on every family the model runs.
        profile: the suite's Hypothesis profile (`ci`, `dev`, `thorough`, ...); by default, as the
            command chooses it: $HYPOTHESIS_PROFILE, else `ci`.
        pytest_args: passed to pytest as `verifier check -- ARGS` passes them, e.g. `["-q", "-k", "rope"]`.
        reports: a directory to write conformance.md, .json and .html into, as `verifier check --reports`
            does; by default none is written.
        name: the model's name in the report (a factory's default: the `module:qualname` that imports it,
            else its name).

    Returns:
        The `Report`: `report.verdict`, `report.failures`, `report.verdicts()`.

    Raises:
        PluginError: `model` names no model, or one that cannot run here.
        PytestOptionError: pytest could not start with `pytest_args` (its error is printed), or they ask
            for pytest-xdist's workers, which are processes of their own (`verifier check -- -n N`).
        KeyboardInterrupt: Ctrl-C or SIGTERM stopped the run (after the reports of what ran are written).
        RuntimeError: called from another thread than the main one, or pytest wrote no results (its output
            says why).

    What a model may do to the process is undone as under the command (`verifier.plugin.isolation`:
    each call runs in the model's own process-wide state, exits are refused, output is bounded, a
    call past `--call-timeout` is interrupted), and what the run changes is put back when it returns:
    the Hypothesis profile, the environment, `sys.path`, the temporary directory (a private one, removed
    with what the models wrote in it), the call deadline and checkpoint, what the suite learnt about
    models; and programs the model left running in sessions of their own are killed. Modules stay
    imported, as after any import.

    What it does not protect against, and why the command runs pytest in a subprocess: a model that
    crashes the process (a segfault or abort in native code, or an exit() there) ends the caller with
    it, and no report is written; a call that neither returns nor gives way to the interruption past
    its deadline ends the process too (its traceback is printed); memory a model leaks, and threads it
    leaves running, stay in the caller's process.
    """
    if threading.current_thread() is not threading.main_thread():
        # pytest, the results collector (SIGTERM) and the calls' deadlines (SIGALRM) need its signals.
        raise RuntimeError("verifier.check runs pytest, which needs the main thread; call it from there")
    parallel = suite.parallel_args(pytest_args)
    if parallel:  # its workers would collect the suite without the models handed to this run
        raise suite.PytestOptionError(
            f"{parallel[0]}: pytest-xdist's workers are processes of their own, which a model given to "
            "verifier.check does not reach; run `verifier check --model SPEC -- -n N` instead"
        )
    if isinstance(families, str):
        families = (families,)
    specs = given_specs(model, name=name, families=families or (), origin=ORIGIN)
    if profile is not None and profile not in profiles.PROFILES:
        raise ValueError(f"profile={profile!r}: not one of the suite's Hypothesis profiles {profiles.PROFILES}")
    chosen = profile or os.environ.get(profiles.PROFILE_ENV_VAR) or profiles.DEFAULT_PROFILE
    suite_dir = suite.find_suite()
    with contextlib.ExitStack() as stack:
        staging = None if reports is None else stack.enter_context(only_run(Path(reports)))
        private = stack.enter_context(_private_temp())
        results = (staging or private) / "results.json"
        arguments = suite.pytest_arguments(
            suite_dir, results, profile=chosen, pytest_args=[*pytest_args, *_ALREADY_IMPORTED]
        )
        with _put_back(private):
            status = pytest.main(arguments, plugins=[GivenModels(specs)])
        if not results.exists():
            if status == _PYTEST_USAGE_ERROR:
                raise suite.PytestOptionError(f"pytest could not start with {list(pytest_args)}: see its error above")
            raise RuntimeError(f"pytest wrote no results (exit status {int(status)}); see its output above")
        report = Report.read(results)
        if reports is not None and staging is not None:
            publish(write_reports(report, staging, published_to=Path(reports)), Path(reports))
            report = Report.read(Path(reports) / JSON)
    if report.interrupted:  # pytest took the Ctrl-C: this process's caller stops as it asked
        raise KeyboardInterrupt(report.stopped)
    return report


@contextlib.contextmanager
def _private_temp() -> Iterator[Path]:
    """A private temporary directory for the run, removed after it with what the models wrote there."""
    private = Path(tempfile.mkdtemp(prefix="verifier-check-"))
    try:
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


@contextlib.contextmanager
def _put_back(private: Path) -> Iterator[None]:
    """Run with `private` as the temporary directory ($TMPDIR, for the models and what they start, and
    Python's `tempfile`, pytest's `tmp_path` included), then put back what the run changes in this
    process: the environment (the suite sets OMP_NUM_THREADS), `sys.path` (pytest puts the suite's
    parent and the current directory on it), the Hypothesis profile (`--hypothesis-profile` loads one),
    and kill what the models left running in sessions of their own, as `verifier check` kills them."""
    from hypothesis import settings

    environ, path, temp, hypothesis_profile = dict(os.environ), list(sys.path), tempfile.tempdir, None
    with contextlib.suppress(AssertionError):  # Hypothesis asserts a profile is loaded
        hypothesis_profile = settings.get_current_profile_name()
    before = processes.children()
    os.environ["TMPDIR"], tempfile.tempdir = str(private), str(private)
    try:
        yield
    finally:
        processes.kill_trees(processes.strays(before))
        tempfile.tempdir = temp
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        os.environ.update({k: v for k, v in environ.items() if os.environ.get(k) != v})
        sys.path[:] = path
        if hypothesis_profile is not None:
            settings.load_profile(hypothesis_profile)
