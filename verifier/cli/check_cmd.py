"""`verifier check`: run the property suite and print the conformance table property x model.

The terminal shows a line of progress while pytest runs, then one paragraph per failure, the table
and the verdict last; pytest's whole output goes to `pytest.log` in the reports directory (but with
--pdb or --trace, which talk to the terminal). The reports directory holds one run's files at most
(`verifier.report.output`): the run works in a staging folder there and the reports and log
appear together at its end.

Stops: Ctrl-C or SIGTERM stops pytest as Ctrl-C stops a plain run, and the reports of what ran say
which it was; pytest and everything it started die with this process, even SIGKILLed
(`verifier.report.suite`); a model that kills the process running it (a segfault or abort in
native code) or ends it with an exit status (a native exit()) fails, the report naming the signal
or the status, the property and the model (`verifier.report.collect`).

Exit status: 0 when every model conforms (none of its tests failed, and its properties ran
examples on it) or deviates only as it declared (`verifier.Deviation`), 1 when one does not or was
untested (a crash included), 2 when pytest could not start or the suite not run (a bad --model, a
bad pytest option, an empty --checkpoint, a --reports another run is writing into, a suite file
that fails to load, a reports file system that cannot take the reports: one line says which), 130
when Ctrl-C or SIGTERM stopped the run (after the reports of what ran).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from verifier.cli import arguments
from verifier.plugin import isolation
from verifier.plugin.command import GIVES, CommandTemplateError
from verifier.plugin.command.files import FORMATS
from verifier.plugin.command.options import CHECK_OPTIONS, PYTEST_OPTIONS, SETTINGS, from_options, help_texts
from verifier.plugin.command.program import DEFAULT_TIMEOUT_S, UNSUPPORTED_STATUS
from verifier.plugin.llama2c.checkout import SOURCE_ENV
from verifier.plugin.registry import ENV_VAR, PluginError
from verifier.properties import profiles
from verifier.report import collect, render, suite
from verifier.report.output import LOG, ReportError, cannot_write, only_run, publish, write_reports
from verifier.report.results import INTERRUPTED as PYTEST_INTERRUPTED
from verifier.report.results import Report

# pytest's exit status for a usage error (a bad option, a --model that names nothing).
_PYTEST_USAGE_ERROR = 4
INTERRUPTED = 130  # verifier's exit status for Ctrl-C (128 + SIGINT), as every command's
_LOG_TAIL = 30  # lines of pytest's log shown when it stopped before the suite ran
_INTERACTIVE = ("--pdb", "--trace")  # pytest options that need the terminal: pytest's output stays there


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "check",
        help="run the property suite and print the conformance table",
        description="Run the property suite (pytest underneath) against models and print a conformance table "
        "property x model: pass / fail / skip (with the reason), worst error / tolerance. "
        "Writes it as Markdown, JSON and a self-contained HTML page; exits 1 on any failure.",
        epilog="Arguments after `--` go to pytest, e.g. `verifier check -- -n auto --junitxml=reports/junit.xml`.",
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="SPEC",
        help=f"model under test: a registered name or module.path:factory, or either as NAME@FAMILY to test it on "
        f"that family only (its others are not built); repeatable (default: ${ENV_VAR}, else every registered model)",
    )
    p.add_argument(
        "--command",
        dest="command_template",  # `command` is the subcommand's name in verifier.cli
        metavar="TEMPLATE",
        help="a program under test through the command line, e.g. "
        "'./run {model} -t 0 -n {steps} -i {prompt} -z {tokenizer}' (needs --format and --gives; a relative "
        f"path is found from the current directory; exit status {UNSUPPORTED_STATUS} declines an input)",
    )
    p.add_argument("--format", choices=list(FORMATS), help="the model file the --command program reads")
    p.add_argument("--gives", choices=list(GIVES), help="what the --command program gives back")
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"how long one run of the --command program may take (default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--call-timeout",
        type=arguments.positive_seconds,
        metavar="SECONDS",
        help="how long one call into a Python model under test (its factory, or one of its methods) may take before "
        f"it fails (default {isolation.DEFAULT_TIMEOUT_S:g}); a model whose call did not return is not called again",
    )
    for key, (metavar, text) in help_texts().items():
        p.add_argument(CHECK_OPTIONS[key], dest=key, metavar=metavar, help=text)
    p.add_argument(
        "--checkpoint",
        metavar="PATH|REPO_ID",
        help="run the properties on this checkpoint's config and weights: a Hugging Face directory or file, a "
        "llama2.c .bin, or a repo id in the local Hugging Face cache (never downloaded); Hypothesis then draws "
        "only tokens, lengths, chunkings, batches and edits, and the report names the checkpoint and its sha256",
    )
    p.add_argument(
        "--llama2c-src",
        type=arguments.nonempty,
        metavar="DIR",
        help=f"your llama2.c checkout, whose run.c and runq.c the built-in llama2c and runq build "
        f"(default: ${SOURCE_ENV}; without either, llama2c runs the pinned 2023 run.c and runq skips)",
    )
    p.add_argument(
        "--suite",
        type=arguments.nonempty,
        metavar="DIR",
        help=f"the properties/ folder (default: ${suite.SUITE_ENV_VAR}, else next to the package)",
    )
    p.add_argument(
        "--pytest-config",
        type=arguments.nonempty,
        metavar="PATH",
        help="run pytest with this configuration file (your pytest.ini, pyproject.toml, tox.ini or setup.cfg: its "
        "addopts, filterwarnings, ...); by default the suite runs with its own, whatever is around",
    )
    p.add_argument(
        "--reports",
        type=arguments.nonempty,
        metavar="DIR",
        default="reports",
        help=f"where to write the report and pytest's whole output, {LOG} (default: reports)",
    )
    p.add_argument(
        "--first-failure",
        action="store_true",
        help=f"an early verdict: stop testing each model at its first failing property, shrunk for 5 s at most "
        f"(the plugin's {collect.EARLY_OPTIONS})",
    )
    p.add_argument("--plot", action="store_true", help="also write an error-per-stage SVG for each localized failure")
    p.add_argument(
        "--hypothesis-profile", choices=profiles.PROFILES, help="the suite's Hypothesis profile (default ci)"
    )
    p.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed to pytest as they are")
    p.set_defaults(func=run)


def _command_options(args: argparse.Namespace) -> list[str]:
    """The pytest options of a --command program and a --checkpoint. The program's are checked here
    first, so that an error names the options as `verifier check` spells them (PluginError)."""
    values = {"command": args.command_template, **{key: getattr(args, key) for key in SETTINGS}}
    try:
        from_options(values, CHECK_OPTIONS, Path.cwd())
    except CommandTemplateError as e:
        raise PluginError(str(e)) from None
    options = {PYTEST_OPTIONS[key]: value for key, value in values.items() if value is not None}
    if args.checkpoint == "":  # `--checkpoint "$CKPT"` with the variable unset: not a run on drawn configs
        raise PluginError(
            "--checkpoint '': an empty value names no checkpoint; give a path or repo id, or leave it out"
        )
    if args.checkpoint is not None:
        options["--checkpoint"] = args.checkpoint
    return [f"{name}={value}" for name, value in options.items()]


def _llama2c_tree(path: str) -> str:
    """The absolute path of a llama2.c checkout given with --llama2c-src; PluginError if it holds no run.c."""
    tree = Path(path).resolve()
    if not (tree / "run.c").is_file():
        raise PluginError(f"--llama2c-src {path}: there is no run.c in {tree}; give the folder of a llama2.c checkout")
    return str(tree)


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM outside pytest's run: unwind as Ctrl-C does, removing the staging folder


@contextlib.contextmanager
def _sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM (CI timeouts, cancellations) stops the run as Ctrl-C does (`suite.run` while pytest runs)."""
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    with _sigterm_as_ctrl_c():
        return _run(args)


def _failed_to_load(report: Report, suite_dir: Path) -> str | None:
    """`a suite file failed to load: FILE: EXCEPTION` when pytest stopped on suite files it could not
    import, before any test, or None. pytest ends such a run with Ctrl-C's exit status: not the user's stop."""
    unloaded = collect.failed_to_load(report.results)
    if report.exit_status != PYTEST_INTERRUPTED or report.interrupted or not unloaded:
        return None
    lines = unloaded[0].detail.removeprefix(f"{collect.COLLECTION_FAILED}: ").splitlines()
    cause = lines[-1] if lines else "pytest gave no reason"  # the exception's last line
    more = f" (and {len(unloaded) - 1} more)" if len(unloaded) > 1 else ""
    return f"a suite file failed to load: {suite_dir / unloaded[0].nodeid}: {cause}{more}"


def _keep(logs: list[Path], reports: Path) -> None:
    """Publish pytest's log of a run that writes no reports, if it can be: the error that stops the
    run is the one said."""
    with contextlib.suppress(ReportError):
        publish(logs, reports)


def _run(args: argparse.Namespace) -> int:
    suite_dir = suite.find_suite(args.suite)
    config = suite.pytest_config(args.pytest_config) if args.pytest_config else None
    suite.check_pytest_args(args.pytest_args)
    pytest_args = [*_command_options(args), *args.pytest_args]  # a bad --command is a usage error before the run
    if args.first_failure:  # first: a user's own -- --shrink-seconds, later, wins
        pytest_args[:0] = collect.EARLY_OPTIONS.split()
    if args.call_timeout is not None:
        pytest_args.insert(0, f"--call-timeout={args.call_timeout:g}")
    if args.llama2c_src is not None:
        os.environ[SOURCE_ENV] = _llama2c_tree(args.llama2c_src)  # for pytest, which this process starts
    reports = Path(args.reports)
    with only_run(reports) as staging:  # checks the folder before the run, not after it
        return _check(args, suite_dir, config, pytest_args, reports, staging)


def _check(
    args: argparse.Namespace, suite_dir: Path, config: Path | None, pytest_args: list[str], reports: Path, staging: Path
) -> int:
    """Run pytest on the suite and write the reports into `staging`, then into `reports` together."""
    log = None if any(arg in _INTERACTIVE for arg in args.pytest_args) else staging / LOG
    if log is not None:
        print(
            f"verifier check: running the property suite; pytest's whole output goes to {reports / LOG} "
            f"(while it runs: {log})",
            flush=True,
        )
    results = staging / "results.json"
    command = suite.pytest_command(
        suite.pytest_arguments(
            suite_dir,
            results,
            models=args.model,
            profile=args.hypothesis_profile,
            pytest_args=pytest_args,
            config=config,
        )
    )
    try:  # room for the one line that says why pytest could not write its results, on a file system that fills up
        collect.reserve_note(results)
    except OSError as e:
        raise cannot_write(e, f"into {reports} before the run") from None
    logs = [] if log is None else [log]
    try:
        status = suite.run(command, log, hang_dir=staging)
    except BaseException:  # a second Ctrl-C: no report, but pytest's output so far
        publish([path for path in logs if path.exists()], reports)
        raise
    unwritable = collect.unwritable(results)
    if unwritable is not None:  # pytest's log, on the same file system, may hold nothing
        _keep(logs, reports)
        raise ReportError(f"{unwritable} writing pytest's results into {reports}")
    if results.exists():
        report = Report.read(results)
    elif (recovered := collect.recover(results, status, hung=collect.hung_call(staging))) is not None:
        report = recovered  # pytest died of a signal or exited in a test (a model's crash): what ran, and that
    else:
        reason = "a usage error" if status == _PYTEST_USAGE_ERROR else f"exit status {status}"
        if status < 0:
            reason = f"killed by {collect.signal_name(-status)}"
        where = "above"
        if log is not None:
            print(*log.read_text(errors="replace").rstrip().splitlines()[-_LOG_TAIL:], sep="\n", file=sys.stderr)
            where = str(publish(logs, reports)[0])
        print(f"verifier check: error: pytest stopped before the suite ran ({reason}); see {where}", file=sys.stderr)
        return 2
    unloaded = _failed_to_load(report, suite_dir)
    if unloaded is not None:
        where = str(publish(logs, reports)[0]) if logs else "above"
        print(f"verifier check: error: {unloaded}; see {where}", file=sys.stderr)
        return 2
    try:
        files = write_reports(report, staging, plots=args.plot, published_to=reports)
    except ReportError:
        _keep(logs, reports)  # pytest's output, whole, without a part of the reports
        raise
    written = publish([*files, *logs], reports)
    print()
    if args.plot:
        for result in report.failures:
            if result.first_divergent_stage and not result.stage_errors:
                print(f"no plot for {result.property} / {result.model}: it recorded no stage errors")
    print(render.text(report, written))
    if report.interrupted:  # the reports of what ran are written; the status says the run did not finish
        print(f"verifier check: {report.stopped}", file=sys.stderr)
        return INTERRUPTED
    return 0 if report.accepted else 1
