"""A pytest plugin that records every test's outcome for `verifier check`.

The fixtures plugin registers a `Collector` in every run (in the controller under pytest-xdist: it
works from pytest's reports only, so it sees the same results as in a plain run). At the end of a
session that tested models, it probes each model for its capabilities, adds each model's verdict
and counts to the JUnit XML's global properties (`verifier.<model>.verdict`, ...), and prints the
verdicts in the terminal summary. Loaded with `pytest -p verifier.report.collect --verifier-results
PATH` (as `verifier check` does), it writes the `Report` as JSON to PATH instead of printing them.
"""

from __future__ import annotations

import platform
from collections.abc import Generator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from verifier.plugin import checkpoint, contract, registry
from verifier.plugin.registry import PluginError
from verifier.report import render
from verifier.report.output import write_atomic
from verifier.report.results import (
    BEHAVES_LIKE,
    CONTRACT_RULE,
    EXAMPLES,
    FIRST_DIVERGENT_STAGE,
    FIRST_FAILURE_SECONDS,
    INTERRUPTED,
    MODEL,
    PRECISION,
    STAGE_ERRORS,
    WORST_ERROR_RATIO,
    Header,
    ModelCard,
    Report,
    Result,
)

# Distributions whose versions the header shows.
LIBRARIES = ("lm-verifier", "numpy", "torch", "transformers", "hypothesis", "pytest")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--verifier-results", metavar="PATH", default=None, help="write every test's outcome as JSON (verifier check)"
    )


PLUGIN_NAME = "verifier-results-collector"
_UNFINISHED = "the test did not finish"


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
    return lines[-1] if lines else ""


class Collector:
    """Accumulates one `Result` per test from its setup, call and teardown reports."""

    def __init__(self, config: pytest.Config, path: Path | None) -> None:
        self.config = config
        self.path = path  # where to write the JSON report; None: print the verdicts instead
        self.results: dict[str, Result] = {}
        self.order: dict[str, int] = {}  # collection order, so that reports list tests as the suite does
        self._report: Report | None = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.order = {item.nodeid: i for i, item in enumerate(session.items)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.order = {nodeid: i for i, nodeid in enumerate(ids)}  # under xdist, the controller collects nothing

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.results[report.nodeid] = Result(
                report.nodeid, None, "error", f"collection failed: {_message(report)}", nodeid=report.nodeid
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props: dict[str, Any] = dict(report.user_properties)
        result = self.results.get(report.nodeid)
        if result is None:
            model = props.get(MODEL)
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
        if STAGE_ERRORS in props:
            result.stage_errors = [(str(stage), float(e), float(b)) for stage, e, b in props[STAGE_ERRORS]]
        xfail = getattr(report, "wasxfail", None)
        if report.when == "call":
            if report.passed:
                result.outcome, result.detail = ("xpass", xfail) if xfail is not None else ("pass", "")
            elif report.skipped:
                result.outcome, result.detail = ("xfail", xfail) if xfail is not None else ("skip", _message(report))
            else:
                result.outcome, result.detail = "fail", _message(report)
        elif report.skipped:  # skipped in setup: a skip mark, or a fixture that skipped
            result.outcome, result.detail = "skip", _message(report)
        elif report.failed and (report.when == "setup" or result.outcome not in ("fail", "error")):
            result.outcome, result.detail = "error", f"{report.when} failed: {_message(report)}"

    def report(self, exitstatus: int) -> Report:
        """The run's report (made once: the header probes every model)."""
        if self._report is None:
            results = sorted(self.results.values(), key=lambda r: self.order.get(r.nodeid, -1))
            if exitstatus == INTERRUPTED:  # stopped by the user: neither a pass nor a failure (nothing conforms)
                for result in results:
                    if result.outcome == "error" and result.detail == _UNFINISHED:
                        result.outcome, result.detail = "skip", "the run was interrupted (Ctrl-C) while this test ran"
            self._report = Report(header(self.config), results, int(exitstatus))
        return self._report

    def _tested_models(self) -> bool:
        return any(r.model for r in self.results.values())

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        """Before pytest writes its JUnit XML, add each model's verdict to its global properties;
        after every other plugin is done, write the JSON report."""
        if self._tested_models():
            self._add_junit_properties(self.report(exitstatus))
        yield
        if self.path is not None:
            write_atomic(self.path, self.report(exitstatus).to_json().encode())

    def _add_junit_properties(self, report: Report) -> None:
        junit = next((p for p in self.config.pluginmanager.get_plugins() if hasattr(p, "add_global_property")), None)
        if junit is None:  # no --junitxml
            return
        for v in report.verdicts():
            counts = {"verdict": v.verdict, "run": v.run, "passed": v.passed, "failed": v.failed}
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


def _model_cards(specs: list[registry.ModelSpec]) -> list[ModelCard]:
    cards = []
    for spec in specs:
        probes = contract.probe(spec)
        built = next((p for p in probes if p.precision), None)
        card = ModelCard(spec.name, spec.origin, {p.kind: p.summary() for p in probes})
        if built is not None:
            card.precision, card.declared = built.precision, built.declared
        cards.append(card)
    return cards


def header(config: pytest.Config) -> Header:
    """The models under test with their capabilities, library versions and the Hypothesis profile."""
    from hypothesis import settings

    current = settings.default
    try:
        chosen = _selection(config)
        models, unavailable = _model_cards(chosen.models), {s.name: s.unavailable for s in chosen.left_out}
    except PluginError as e:  # the run itself would have stopped on it; say so rather than crash
        models, unavailable = [ModelCard("?", "?", {"selection": f"broken ({e})"})], {}
    return Header(
        models=models,
        unavailable=unavailable,
        versions={"python": platform.python_version(), **{name: _version(name) for name in LIBRARIES}},
        hypothesis_profile=settings.get_current_profile_name(),
        hypothesis_settings={name: str(getattr(current, name)) for name in ("max_examples", "derandomize", "deadline")},
        suite=" ".join(str(arg) for arg in config.args) or str(config.rootpath),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        checkpoint=fixed.describe() if (fixed := checkpoint.current()) is not None else None,
    )
