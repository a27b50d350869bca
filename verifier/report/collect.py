"""A pytest plugin that records every test's outcome for `verifier check`.

The fixtures plugin registers a `Collector` in every run (in the controller under pytest-xdist: it
works from pytest's reports only, so it sees the same results as in a plain run). At the end of a
session that tested models, it probes each model for its capabilities, adds each model's verdict
and counts to the JUnit XML's global properties (`verifier.<model>.verdict`, ...), and prints the
verdicts in the terminal summary. Loaded with `pytest -p verifier.report.collect --verifier-results
PATH` (as `verifier check` does), it writes the `Report` as JSON to PATH instead of printing them,
and with `--verifier-progress-fd N` it writes one character per finished test to descriptor N (the
terminal of `verifier check`, whose pytest output goes to a log file).

With --verifier-results it also keeps a journal beside PATH (`journal_path`): the header, each test
as it starts and each result as it changes, one JSON line each, written as they happen. When
pytest dies of a signal (a native engine's segfault or abort in a model's forward kills the process
running it), or its process ends with an exit status in the middle of a test (a native engine's
exit(), which no Python code sees), and writes no report, `verifier check` makes the report from it
(`recover`): the test that was running fails, naming the signal or the exit status, the property
and the model. Under pytest-xdist the controller survives a crashed worker and reports its test as
failed, naming the signal or exit status too. It also turns SIGTERM into pytest's KeyboardInterrupt,
so that SIGTERM stops the run as Ctrl-C does, and the report says which it was (`Report.stop`);
pytest's own stops, which it ends with Ctrl-C's exit status (a suite file that fails to import:
"Interrupted: 1 error during collection"), are named as they are.

A journal or report it cannot write (a full file system) stops the run at once with one line; under
`verifier check`, which reserved room for it before the run (`reserve_note`), the line goes into a
note (`unwritable`), for a file system too full to take pytest's log.

Under plain pytest, a C-level exit() or _exit() in the middle of a test ends pytest with that status
(0: a CI job passes), and nothing in this process can see it: no Python code runs after it, and a
handler registered with the C library (on_exit) would run after every normal end too, when Python
is gone (the process then dies of SIGSEGV). `verifier check` sees it from outside (`recover`), as
pytest-xdist's controller sees a worker end (`pytest -n 1`).

A failure's message is kept without what Hypothesis adds that a user cannot act on (the repr of the
failing example's arguments, how many other examples failed, `@reproduce_failure` blobs): the
suite's own note of the case (`model '...'; case:` and its `config = ...` lines) goes to the
result's `case`, and pytest's log keeps the whole text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import re
import signal
import subprocess
from collections.abc import Callable, Generator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO

import pytest

from verifier.formats.fileio import atomic_write
from verifier.messages import bounded
from verifier.plugin import checkpoint, registry
from verifier.plugin.command import Command
from verifier.plugin.diagnosis import NOT_RUN_RULES, diagnose
from verifier.plugin.probes import probe as probe_model
from verifier.plugin.registry import PluginError
from verifier.report import render
from verifier.report.output import problem
from verifier.report.results import (
    BEHAVES_LIKE,
    CONTRACT_RULE,
    CTRL_C,
    DEVIATION_NOT_SEEN,
    EXAMPLES,
    FAILURE_MESSAGE,
    FIRST_DIVERGENT_STAGE,
    FIRST_FAILURE_SECONDS,
    INTERRUPTED,
    MODEL,
    NEAR_TIES,
    NOT_SEEN,
    PRECISION,
    STAGE_ERRORS,
    WORST_ERROR_RATIO,
    Header,
    ModelCard,
    Report,
    Result,
    finite,
)

# Distributions whose versions the header shows.
LIBRARIES = ("lm-verifier", "numpy", "torch", "transformers", "hypothesis", "pytest")
# The inference engines built-in models run, shown where installed (the engine matrix names their versions).
ENGINES = ("onnxruntime", "llama-cpp-python", "ctranslate2", "litgpt", "transformer-lens")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--verifier-results", metavar="PATH", default=None, help="write every test's outcome as JSON (verifier check)"
    )
    parser.addoption(
        "--verifier-progress-fd",
        type=int,
        metavar="N",
        default=None,
        help="write one character per finished test to file descriptor N (verifier check's terminal)",
    )


PLUGIN_NAME = "verifier-results-collector"
_UNFINISHED = "the test did not finish"
# A first failure whose test did not end (`Collector.first_failure`): its case as found.
FIRST_LINE = 300  # how much of a first failure's message its terminal line quotes
EARLY_OPTIONS = "--model-maxfail 1 --shrink-seconds 5"  # an early verdict (`verifier check --first-failure`)
UNSHRUNK = "its first failing example, as found: the run was {stopped} while Hypothesis shrank it"
COLLECTION_FAILED = "collection failed"  # a suite file's result that failed to load (import, syntax)
NOTE_BYTES = 4096  # the room a note is given: a line, and a block of any file system


def register(config: pytest.Config) -> Collector | None:
    """The session's collector, registered once, in the controller only (under xdist, only it writes)."""
    if hasattr(config, "workerinput"):
        return None
    collector = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if collector is None:
        collector = Collector(config, None)
        config.pluginmanager.register(collector, PLUGIN_NAME)
    return collector


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("verifier_results")
    collector = register(config)
    if path and collector is not None:
        collector.path = Path(path)
        collector.journal = journal_path(collector.path).open("a", encoding="utf-8", buffering=1)  # line by line
        collector.previous_sigterm = signal.signal(signal.SIGTERM, collector.sigterm)
    fd = config.getoption("verifier_progress_fd", default=None)
    if fd is not None and collector is not None:
        collector.progress = Progress(os.fdopen(fd, "w"))


def pytest_unconfigure(config: pytest.Config) -> None:
    collector = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if collector is not None and collector.path is not None:
        collector.close_journal()
        if collector.previous_sigterm is not None:  # None: a handler not set from Python
            signal.signal(signal.SIGTERM, collector.previous_sigterm)


def journal_path(results: Path) -> Path:
    """The journal of a run that writes its report to `results`: `results.jsonl` beside it."""
    return results.with_suffix(".jsonl")


def note_path(results: Path) -> Path:
    """Where the collector of a run that writes its report to `results` says why it could not."""
    return results.with_suffix(".note")


def reserve_note(results: Path) -> None:
    """Give the collector of a run room for its note before the run (`verifier check`): zeros, which the
    note replaces in place of them. OSError when there is no room, before a run that could write no report."""
    with note_path(results).open("wb") as note:
        note.write(bytes(NOTE_BYTES))
        note.flush()
        os.fsync(note.fileno())  # the blocks allocated now, where a file system allocates them on writing


def unwritable(results: Path) -> str | None:
    """The collector's note: why it could not write its journal or report (`no space left on device`),
    or None when it could, or left no note."""
    try:
        note = note_path(results).read_bytes().strip(b"\0").decode(errors="replace").strip()
    except OSError:
        return None
    return note or None


def signal_name(signum: int) -> str:
    """`SIGSEGV`, or `signal N` for a number that names none here."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def stop_name(status: int) -> str:
    """How a process ended, from its status as `subprocess` gives it: `SIGSEGV` (-11), `exit status 3`."""
    return signal_name(-status) if status < 0 else f"exit status {status}"


def crashed(process: str, status: int, prop: str, model: str | None, who: str = "the test") -> str:
    """A crash's failure message: what ended with which status (negative: died of that signal; else an
    exit, which `who` called) while running which property on which model."""
    on = f" on {model}" if model else ""
    if status >= 0:
        return f"crashed: {who} ended {process} (exit status {status}) while running {prop}{on}"
    described = f" ({signal.strsignal(-status)})" if signal.strsignal(-status) else ""
    return f"crashed: {process} died of {signal_name(-status)}{described} while running {prop}{on}"


def _model_of(nodeid: str, models: list[str]) -> str | None:
    """The model among `models` whose id is in the test's parameters, if any."""
    return next((m for m in models if property_name(nodeid, m) != property_name(nodeid, None)), None)


def hung_call(directory: Path) -> str | None:
    """Where a call into a model was when the process was ended for not coming back from it past its deadline
    (the traceback `verifier.plugin.isolation`'s backstop wrote into `directory`): its innermost frame of the
    model's thread, or None when no process was ended so."""
    for path in sorted(directory.glob("hung-*.txt")):
        text = path.read_text(errors="replace")
        if not text.startswith("Timeout ("):  # armed, never fired
            continue
        frames = [line.strip() for line in text.splitlines() if line.strip().startswith('File "')]
        ours = ("verifier/plugin/isolation.py", "threading.py")
        where = next((frame for frame in frames if not any(name in frame for name in ours)), "an unknown place")
        return where[:300]
    return None


def recover(results: Path, status: int, hung: str | None = None) -> Report | None:
    """The report of a run whose pytest died of signal -`status`, or exited with `status` in the middle
    of a test, before it wrote `results`, made from its journal: the results so far, the test it was
    running a failure naming the signal or the exit status (or, with `hung`, the call that never came
    back, `hung_call`); the run stopped by it (nothing conforms). None when pytest died before its
    session started, or exited in none of its tests (its log says why)."""
    journal = journal_path(results)
    header: dict[str, Any] | None = None
    probed: list[str] = []  # the models built on the probe configs for the header, in order
    found: dict[str, dict[str, Any]] = {}
    running: dict[str, None] = {}  # started and not finished, in order
    first: dict[str, tuple[str, str]] = {}  # a test's first failure before it finished (message, case)
    for line in journal.read_text(errors="replace").splitlines() if journal.exists() else []:
        try:
            record = json.loads(line)
        except ValueError:  # the last line, cut short by the death
            continue
        if "header" in record:
            header = record["header"]
        elif "probing" in record:
            probed.append(record["probing"])
        elif "start" in record:
            running[record["start"]] = None
        elif "first_failure" in record:
            first[record["first_failure"]] = (record["detail"], record["case"])
        else:
            found[record["result"]["nodeid"]] = record["result"]
            if record["done"]:
                running.pop(record["result"]["nodeid"], None)
    if header is None:
        return _probe_crash(probed, status) if probed else None
    if status >= 0 and not running:
        return None
    models = [card["name"] for card in header["models"]]
    process = "pytest" if status < 0 else "the process"
    for nodeid in running:
        model = _model_of(nodeid, models)
        fields = found.get(nodeid) or dataclasses.asdict(Result(property_name(nodeid, model), model, "", nodeid=nodeid))
        detail = crashed(process, status, fields["property"], fields["model"]) + "; the tests after it did not run"
        if hung is not None:
            detail = (
                f"{HUNG}: past its deadline (--call-timeout) it did not give way to the interruption, so the "
                f"process was ended (exit status {status}) while running {fields['property']} on {fields['model']}; "
                f"it was at {hung}; the tests after it did not run"
            )
        if nodeid in first:  # it had failed before: what failed, as found
            detail = f"{detail}; it had failed before: {first[nodeid][0]}"
            fields = {**fields, "case": first[nodeid][1]}
        found[nodeid] = {**fields, "outcome": "fail", "detail": detail}
    so_far = list(found.values())
    return Report.from_dict({"header": header, "results": so_far, "exit_status": status, "stop": stop_name(status)})


HUNG = "a call into the model did not return"  # what a run ended by the backstop of isolation says
PROBE = "(building the model on the probe configs)"  # the row of a model that crashed the run's header


def _probe_crash(probed: list[str], status: int) -> Report:
    """The report of a run whose pytest died while the header built the last of `probed` on the probe
    configs, before any test: that model fails (its crash); the ones before it are untested."""
    *before, model = probed
    detail = crashed("pytest" if status < 0 else "the process", status, PROBE, model, who="the model")
    cards = [ModelCard(name, "?", {"probe": "built; no test ran"}) for name in before]
    cards.append(ModelCard(model, "?", {"probe": f"crashed ({stop_name(status)})"}))
    created = datetime.now(UTC).isoformat(timespec="seconds")
    header = Header(cards, versions={}, hypothesis_profile="?", hypothesis_settings={}, suite="?", created=created)
    result = Result(PROBE, model, "fail", detail=detail + "; no test ran")
    return Report(header, [result], status, stop=stop_name(status))


def failed_to_load(results: list[Result]) -> list[Result]:
    """The results of the suite's files that failed to load (an import error, a syntax error)."""
    return [r for r in results if r.model is None and r.detail.startswith(f"{COLLECTION_FAILED}: ")]


def property_name(nodeid: str, model: str | None) -> str:
    """`test_file.py::test_name[params]` with the model's id left out of the params."""
    path, sep, name = nodeid.partition("::")
    base, bracket, params = f"{path.rsplit('/', 1)[-1]}{sep}{name}".partition("[")
    params = params.removesuffix("]")
    if not bracket or model is None:
        return base + bracket + params + ("]" if bracket else "")
    ids = params.split("-")
    model_ids = model.split("-")
    for start in range(len(ids) - len(model_ids) + 1):
        if ids[start : start + len(model_ids)] == model_ids:
            del ids[start : start + len(model_ids)]
            break
    return f"{base}[{'-'.join(ids)}]" if ids else base


def _message(report: pytest.CollectReport | pytest.TestReport) -> str:
    """The exception line(s) of a failure, or the reason of a skip."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    lines = str(longrepr or "").strip().splitlines()
    return _ERROR_MARK.sub("", lines[-1]) if lines else ""


_ERROR_MARK = re.compile(r"^E +")  # pytest's mark of an exception's lines: "E   SyntaxError: expected ':'"


# What Hypothesis adds to a failure's message. Blocks that open with one of these and end in "(" run
# to a line ")": the repr of the example's arguments, which the suite's case note says for a user.
_EXAMPLE_BLOCKS = (
    "Falsifying example:",
    "Falsifying explicit example:",
    "Failing explicit example:",
    "Failing test case:",  # Hypothesis 6.170's heading of a generated example
)
_HYPOTHESIS_LINES = re.compile(
    r"^\(note: .*Verbosity\.verbose to view\)$"  # "(note: 9 other explicit examples also failed ...)"
    r"|^Draw \d+( \(.*\))?: "  # a value drawn with st.data(): "Draw 1 (prefill length (<= W)): 1"
    r"|^You can reproduce this (example|test case) by temporarily adding @reproduce_failure"  # edits the suite's code
)
# Hypothesis's explain phase: "Explanation:" and its indented lines ("These lines were always and only
# run by failing test cases:", the suite's own lines), which point into the suite, not at the model.
_EXPLANATION = "Explanation:"
_CASE_NOTE = re.compile(r"^model .*; case:$")  # properties/models.py's note of the case a model ran
_CASE_LINE = re.compile(r"^\w+ = ")
_SUITE_EXCEPTION = re.compile(r"^verifier(\.\w+)+: ")  # "verifier.properties.checks.PropertyFailure: "


def split_message(message: str) -> tuple[str, str]:
    """(the failure without Hypothesis's additions, the case note's lines): see the module's docstring.
    A case several models were built for is said once."""
    kept: list[str] = []
    cases: list[str] = []
    lines = message.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith(_EXAMPLE_BLOCKS) and line.rstrip().endswith("("):
            while i < len(lines) and lines[i - 1] != ")":
                i += 1
        elif line == _EXPLANATION:
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                i += 1
        elif _CASE_NOTE.match(line):
            start = i
            while i < len(lines) and _CASE_LINE.match(lines[i]):
                i += 1
            case = "\n".join(lines[start:i])
            if case not in cases:
                cases.append(case)
        elif not line.startswith(_EXAMPLE_BLOCKS) and not _HYPOTHESIS_LINES.match(line):
            kept.append(line)
    detail = "\n".join(kept).strip()
    return _SUITE_EXCEPTION.sub("", detail), "\n".join(cases)


_PROGRESS_CHARS = {"pass": ".", "fail": "F", "error": "E", "skip": "s", "xfail": "x", "xpass": "X"}


class Progress:
    """One character per finished test (`.` pass, `F` fail, `E` error, `s` skip, `x` xfail, `X` xpass),
    a count at the end of each line of `WIDTH`."""

    WIDTH = 60

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.done = 0
        self.total = 0

    def test_done(self, outcome: str) -> None:
        self.done += 1
        self.stream.write(_PROGRESS_CHARS.get(outcome, "?"))
        if self.done % self.WIDTH == 0:
            self._count()
        self.stream.flush()

    def note(self, line: str) -> None:
        """`line` on a line of its own between the characters (a first failure, as it is found)."""
        self.stream.write(f"{chr(10) if self.done % self.WIDTH else ''}{line}\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.done % self.WIDTH:
            self._count()
        self.stream.close()

    def _count(self) -> None:
        total = f"/{self.total}" if self.total >= self.done else ""
        self.stream.write(f" {self.done}{total}\n")


class Collector:
    """Accumulates one `Result` per test from its setup, call and teardown reports."""

    def __init__(self, config: pytest.Config, path: Path | None) -> None:
        self.config = config
        self.path = path  # where to write the JSON report; None: print the verdicts instead
        self.results: dict[str, Result] = {}
        self.order: dict[str, int] = {}  # collection order, so that reports list tests as the suite does
        self._report: Report | None = None
        self._header: Header | None = None
        self.progress: Progress | None = None
        self.journal: TextIO | None = None  # see the module's docstring
        self.previous_sigterm: Any = None
        self.stop = CTRL_C  # what interrupted the run, if something does
        self.workers_down: dict[str, int] = {}  # pytest-xdist's crashed workers -> their exit status
        self.unwritable = False  # a journal or report write failed: nothing more is written
        self.first_failures: dict[str, tuple[str, str]] = {}  # nodeid -> a first failure's message, case
        self.told: set[str | None] = set()  # the models whose first failure the terminal was told

    def sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.stop = "SIGTERM"
        raise KeyboardInterrupt  # pytest stops as on Ctrl-C: the test it is in ends, the results are written

    def _record(self, record: dict[str, Any]) -> None:
        if self.journal is None or self.path is None:
            return
        try:
            self.journal.write(json.dumps(finite(record)) + "\n")
        except OSError as e:
            self._cannot_write(journal_path(self.path), e)

    def close_journal(self) -> None:
        """Close the journal; one that cannot take its last line (a full file system) is closed anyway."""
        if self.journal is not None:
            with contextlib.suppress(OSError):  # said when the line failed (`_cannot_write`)
                self.journal.close()
            self.journal = None

    def _cannot_write(self, path: Path, error: OSError) -> NoReturn:
        """Stop the run at once: its journal or report cannot be written (a full file system, a quota),
        and a run whose report cannot be written is not worth running on. The reason goes into the
        note `verifier check` reserved (`reserve_note`), replacing its zeros: pytest's log, on the same
        file system, may not take it."""
        self.unwritable = True
        self.close_journal()
        if self.path is not None and note_path(self.path).exists():
            with contextlib.suppress(OSError):
                note_path(self.path).write_text(problem(error))
        pytest.exit(f"{problem(error)} writing {path}", returncode=pytest.ExitCode.INTERNAL_ERROR)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Name pytest's own stops, which it ends with Ctrl-C's exit status too: a collection error or
        --stepwise (pytest.Session.Interrupted), pytest.exit()."""
        if isinstance(excinfo.value, pytest.Session.Interrupted):
            self.stop = str(excinfo.value)  # "1 error during collection"
        elif isinstance(excinfo.value, pytest.exit.Exception):
            self.stop = f"pytest.exit({excinfo.value.msg!r})"

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.journal is not None:  # the header first, for a report of a run pytest does not live to end
            # Building each model to probe it may crash the process (a native engine): say which one.
            self._header = header(self.config, probing=lambda name: self._record({"probing": name}))
            self._record({"header": dataclasses.asdict(self._header)})

    def first_failure(self, nodeid: str, seconds: float, error: BaseException, case: str) -> None:
        """A property's first failing example as it fails (`verifier.properties.harness.judged`), before
        Hypothesis shrinks it, maybe for minutes: kept for the test's result should the run stop before the
        test ends (the journal too, should pytest die), and for each model's first, said on the terminal."""
        from hypothesis.internal.conjecture import engine  # its shrink budget (--shrink-seconds)

        detail = bounded(str(error) or type(error).__name__).partition("\n")[0]
        self.first_failures[nodeid] = (detail, case)
        self._record({"first_failure": nodeid, "detail": detail, "case": case})
        model = _model_of(nodeid, self._model_names())
        if model in self.told:
            return
        self.told.add(model)
        test = nodeid.rsplit("::", 1)[-1].partition("[")[0]
        detail = detail.removeprefix(f"{test}: ")  # an assertion's message names its test: said once
        early = "verifier check --first-failure" if self.progress is not None else EARLY_OPTIONS
        line = (
            f"first failure{f' of {model}' if model else ''}, {seconds:.1f} s into {test}: "
            f"{detail if len(detail) <= FIRST_LINE else detail[: FIRST_LINE - 1] + '…'} (Hypothesis shrinks it for "
            f"up to {engine.MAX_SHRINKING_SECONDS:g} s; an early verdict: {early})"
        )
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if self.progress is not None:
            self.progress.note(line)
        elif reporter is not None:  # in the middle of a test: around pytest's capture of its output
            with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
                reporter.write_line(line)

    def _model_names(self) -> list[str]:
        """The models under test, as the header names them (before it is made: as selected)."""
        if self._header is not None:
            return [card.name for card in self._header.models]
        try:
            return [spec.name for spec in _selection(self.config).models]
        except PluginError:  # the run says so
            return []

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._record({"start": nodeid})

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """Keep the exit status of a pytest-xdist worker that died, for the message of its test (which
        pytest-xdist reports next). It is read from execnet's process object, a private attribute: where
        that is gone, the message names no signal."""
        popen = getattr(getattr(node.gateway, "_io", None), "popen", None)
        if error is None or popen is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):  # it died: its end of the pipe is closed
            self.workers_down[node.gateway.id] = popen.wait(timeout=10)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.order = {item.nodeid: i for i, item in enumerate(session.items)}
        self._count_tests()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.order = {nodeid: i for i, nodeid in enumerate(ids)}  # under xdist, the controller collects nothing
        self._count_tests()

    def _count_tests(self) -> None:
        if self.progress is not None:
            self.progress.total = len(self.order)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            detail, case = split_message(_message(report))
            self.results[report.nodeid] = Result(
                report.nodeid, None, "error", f"{COLLECTION_FAILED}: {detail}", nodeid=report.nodeid, case=case
            )
            self._record({"result": dataclasses.asdict(self.results[report.nodeid]), "done": True})
            if self.progress is not None:
                self.progress.test_done("error")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props: dict[str, Any] = dict(report.user_properties)
        result = self.results.get(report.nodeid)
        if result is None:
            model = props.get(MODEL)
            if model is None and self._header is not None:  # pytest-xdist's report of a crash has no properties
                model = _model_of(report.nodeid, [card.name for card in self._header.models])
            # An error until its call reports, so a run that stops half-way shows no false pass.
            result = Result(property_name(report.nodeid, model), model, "error", _UNFINISHED)
            result.nodeid = report.nodeid
            self.results[report.nodeid] = result
        result.duration += report.duration
        if WORST_ERROR_RATIO in props:
            result.worst_error_ratio = float(props[WORST_ERROR_RATIO])
        if FIRST_DIVERGENT_STAGE in props:
            result.first_divergent_stage = str(props[FIRST_DIVERGENT_STAGE])
        if FIRST_FAILURE_SECONDS in props:
            result.first_failure_seconds = float(props[FIRST_FAILURE_SECONDS])
        if EXAMPLES in props:
            result.examples = int(props[EXAMPLES])
        if CONTRACT_RULE in props:
            result.contract_rule = str(props[CONTRACT_RULE])
        if PRECISION in props:
            result.precision = str(props[PRECISION])
        if BEHAVES_LIKE in props:
            result.behaves_like = str(props[BEHAVES_LIKE])
        if NEAR_TIES in props:
            result.near_ties = str(props[NEAR_TIES])
        if STAGE_ERRORS in props:
            result.stage_errors = [(str(stage), float(e), float(b)) for stage, e, b in props[STAGE_ERRORS]]
        xfail = getattr(report, "wasxfail", None)
        if report.when == "call":
            if report.passed:
                result.outcome, result.detail = ("xpass", xfail) if xfail is not None else ("pass", "")
                if DEVIATION_NOT_SEEN in props:  # a declared deviation that stopped happening: say so
                    result.outcome, result.detail = "xpass", f"{NOT_SEEN}: {props[DEVIATION_NOT_SEEN]}"
            elif report.skipped:
                result.outcome, result.detail = ("xfail", xfail) if xfail is not None else ("skip", _message(report))
            else:
                result.outcome = "fail"
                result.detail, result.case = split_message(props.get(FAILURE_MESSAGE) or _message(report))
        elif report.skipped:  # skipped in setup: a skip mark, or a fixture that skipped
            result.outcome, result.detail = "skip", _message(report)
        elif report.when not in ("setup", "teardown"):  # pytest-xdist's report of a test whose worker died
            result.outcome, result.detail = "fail", self._worker_crash(report, result)
        elif report.failed and (report.when == "setup" or result.outcome not in ("fail", "error")):
            detail, result.case = split_message(_message(report))
            result.outcome, result.detail = "error", f"{report.when} failed: {detail}"
        done = report.when not in ("setup", "call")
        self._record({"result": dataclasses.asdict(result), "done": done})
        if done and self.progress is not None:
            self.progress.test_done(result.outcome)

    def _worker_crash(self, report: pytest.TestReport, result: Result) -> str:
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None)
        status = self.workers_down.get(str(worker))
        if worker is None or status is None:
            return f"crashed: {_message(report)}"  # "worker 'gw0' crashed while running '...'"
        return crashed(f"pytest-xdist's worker {worker}", status, result.property, result.model)

    def report(self, exitstatus: int) -> Report:
        """The run's report (made once: the header probes every model)."""
        if self._report is None:
            results = sorted(self.results.values(), key=lambda r: self.order.get(r.nodeid, -1))
            stop = self.stop if exitstatus == INTERRUPTED else ""
            self._report = Report(self._header or header(self.config), results, int(exitstatus), stop)
            self._diagnose(self._report)
            if stop:  # stopped: the test that ran is neither a pass nor a failure (nothing conforms)
                for result in results:
                    if result.outcome == "error" and result.detail == _UNFINISHED:
                        result.outcome = "skip"
                        result.detail = f"the run was {self._report.stopped} while this test ran"
                        if result.nodeid in self.first_failures:  # it had failed: a failure, not shrunk
                            detail, result.case = self.first_failures[result.nodeid]
                            result.outcome = "fail"
                            result.detail = f"{detail} ({UNSHRUNK.format(stopped=self._report.stopped)})"
        return self._report

    def _diagnose(self, report: Report) -> None:
        """Put what each failing model does not run of what it accepts on its card, for its verdict
        (`verifier.plugin.diagnosis`): a model that failed by raising or by its numbers, in a run that
        ended, on drawn weights (a checkpoint's switches are its own)."""
        if report.stopped or checkpoint.current() is not None:
            return
        try:
            specs = {spec.name: spec for spec in _selection(self.config).models}
        except PluginError:  # the run said so already
            return
        for card in report.header.models:
            mine = [r for r in report.failures if r.model == card.name]
            spec = specs.get(card.name)
            if not mine or spec is None or any(r.contract_rule not in (None, *NOT_RUN_RULES) for r in mine):
                continue
            found = diagnose(spec)
            card.not_run = found.not_run()
            card.declare = found.declaration(program=isinstance(spec.factory, Command))

    def _tested_models(self) -> bool:
        return any(r.model for r in self.results.values())

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        """Before pytest writes its JUnit XML, add each model's verdict to its global properties;
        after every other plugin is done, write the JSON report."""
        if self.progress is not None:
            self.progress.finish()
        if self._tested_models():
            self._add_junit_properties(self.report(exitstatus))
        yield
        if self.path is not None and not self.unwritable:
            data = self.report(exitstatus).to_json().encode()
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with atomic_write(self.path) as handle:  # all or nothing
                    handle.write(data)
            except OSError as e:
                self._cannot_write(self.path, e)

    def _add_junit_properties(self, report: Report) -> None:
        junit = next((p for p in self.config.pluginmanager.get_plugins() if hasattr(p, "add_global_property")), None)
        if junit is None:  # no --junitxml
            return
        for v in report.verdicts():
            counts = {"verdict": v.verdict, "run": v.run, "passed": v.passed, "failed": v.failed}
            counts |= {"deviated": v.deviated} if v.deviated else {}
            counts |= {"skipped": v.skipped, "examples": v.examples, **({"reason": v.reason} if v.reason else {})}
            counts |= {"precision": v.precision, **({"behaves_like": v.behaves_like} if v.behaves_like else {})}
            for name, value in counts.items():
                junit.add_global_property(f"verifier.{v.model}.{name}", value)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int) -> None:
        """Each model's verdict under plain pytest (`verifier check` prints them with its table)."""
        if self.path is not None or not self._tested_models():
            return
        terminalreporter.write_sep("=", "lm-verifier: verdicts per model")
        report = self.report(exitstatus)
        for line in [*render.verdict_lines(report), *render.left_out_lines(report)]:
            terminalreporter.write_line(line)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _selection(config: pytest.Config) -> registry.Selection:
    from verifier.fixtures.plugin import selection  # the plugin imports this module

    try:  # the models the fixtures plugin selected (with a --command program), else the --model options
        return selection(config)
    except KeyError:
        return registry.select(config.getoption("model", default=None) or [])


def _model_cards(specs: list[registry.ModelSpec], probing: Callable[[str], None] | None = None) -> list[ModelCard]:
    cards = []
    for spec in specs:
        if probing is not None:
            probing(spec.name)
        probes = probe_model(spec)
        built = next((p for p in probes if p.precision), None)
        card = ModelCard(spec.name, spec.origin, {p.kind: p.summary() for p in probes})
        if built is not None:
            card.precision, card.declared = built.precision, built.declared
        cards.append(card)
    return cards


def header(config: pytest.Config, probing: Callable[[str], None] | None = None) -> Header:
    """The models under test with their capabilities, library versions and the Hypothesis profile
    (`probing` is told the name of each model before it is built on the probe configs)."""
    from hypothesis import settings

    current = settings.default
    try:
        chosen = _selection(config)
        models = _model_cards(chosen.models, probing)
        unavailable = {s.name: s.unavailable for s in chosen.left_out}
    except PluginError as e:  # the run itself would have stopped on it; say so rather than crash
        models, unavailable = [ModelCard("?", "?", {"selection": f"broken ({e})"})], {}
    return Header(
        models=models,
        unavailable=unavailable,
        versions={
            "python": platform.python_version(),
            **{name: _version(name) for name in LIBRARIES},
            **{name: v for name in ENGINES if (v := _version(name)) != "not installed"},
        },
        hypothesis_profile=settings.get_current_profile_name(),
        hypothesis_settings={name: str(getattr(current, name)) for name in ("max_examples", "derandomize", "deadline")},
        suite=" ".join(str(arg) for arg in config.args) or str(config.rootpath),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        checkpoint=fixed.describe() if (fixed := checkpoint.current()) is not None else None,
    )
