"""The results of one run of the suite: a header (models, versions, profile) and one row per test.

Tests tell the report more through `item.user_properties` (pytest's `record_property`), under
these keys; each also shows in pytest's own JUnit XML:

- `model`: the name of the model under test (set by the fixtures plugin for every test of a model);
- `worst_error_ratio`: float, the largest error / tolerance bound over a property's examples;
- `first_divergent_stage`: str, on a failure localized by a trace, e.g. `layers.0.scores`;
- `stage_errors`: [(stage, max |error|, tolerance bound), ...] in compute order, on a failure
  localized by a trace, for the error-per-stage plot (error inf: the stage has the wrong shape);
- `first_failure_seconds`: float, on a failed Hypothesis property, the time from the test's start
  to its first failing example (before shrinking), for the mutation report;
- `examples`: int, the cases a property built the model for and ran (the suite's conftest counts them);
- `contract_rule`: str, on a failure that is a contract breach, the rule broken (e.g. `shape`);
- `precision`: str, the precision class the model was judged at (`verifier.analysis.precision`);
- `behaves_like`: str, on a failure of a model that declares no class, the coarser floating class
  whose rounding the reported failure's error follows (the class the model behaves like);
- `near_ties`: str, on a MoE model's property that met router near-ties (`properties/oracle.py`): its
  first line how many and how they were judged (`2 router near-ties met; either choice accepted, ...`,
  what the terminal and the HTML page show), its second the first ones, each with its judgement;
- `failure_message`: str, on a failure raised as a group (Hypothesis' distinct failures, whose title
  is all pytest's one-line message says), the exception line(s) and notes of the reported one.

A registered model that cannot run here (the built-in `transformers` without its extra) is not
under test: the header names it with the reason (`Header.unavailable`); it has no verdict and
changes none.

A model **conforms** when none of its tests failed and at least one of its properties passed: the
suite turns a property that ran no example or compared nothing into a skip, so a pass means the
property checked the model. A model with no failure and no pass is **untested**; a run conforms
only when every model under test conforms and no model-independent test failed. A run stopped
before it finished (Ctrl-C, SIGTERM, pytest killed by a signal or its process ended by an exit in
the middle of a test: a crash, or pytest's own stop) conforms in nothing: each model that would is
untested.

Non-finite numbers (an infinite error ratio) are written to JSON as the strings "inf" and "nan",
so the file stays standard JSON.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.plugin.registry import NOT_SELECTED

MODEL = "model"
WORST_ERROR_RATIO = "worst_error_ratio"
FIRST_DIVERGENT_STAGE = "first_divergent_stage"
STAGE_ERRORS = "stage_errors"
FIRST_FAILURE_SECONDS = "first_failure_seconds"
EXAMPLES = "examples"
CONTRACT_RULE = "contract_rule"
PRECISION = "precision"
BEHAVES_LIKE = "behaves_like"
FAILURE_MESSAGE = "failure_message"
NEAR_TIES = "near_ties"
DEVIATION_NOT_SEEN = "deviation_not_seen"  # a declared deviation's reasons, where it did not happen
NOT_SEEN = "the declared deviation did not happen"

# pytest's exit status for a run stopped by Ctrl-C (pytest.ExitCode.INTERRUPTED), and by pytest itself:
# collection errors ("Interrupted: 1 error during collection"), pytest.exit(), --stepwise.
INTERRUPTED = 2
CTRL_C = "Ctrl-C"  # `Report.stop` of an interrupted run, unless SIGTERM stopped it
USER_STOPS = (CTRL_C, "SIGTERM")  # the stops that are the user's: an interrupted run (exit status 130)

# Outcomes, in the order a summary lists them; the first two fail a run.
FAILING = ("fail", "error")
OUTCOMES = (*FAILING, "pass", "skip", "xfail", "xpass")


@dataclass
class Result:
    """The outcome of one test: a property, for one model (None for model-independent tests)."""

    property: str
    model: str | None
    outcome: str
    detail: str = ""  # the skip or xfail reason, or the failure message
    worst_error_ratio: float | None = None
    first_divergent_stage: str | None = None
    stage_errors: list[tuple[str, float, float]] | None = None
    nodeid: str = ""
    duration: float = 0.0
    first_failure_seconds: float | None = None
    examples: int | None = None  # None: the test did not count its examples
    contract_rule: str | None = None
    precision: str | None = None
    behaves_like: str | None = None
    near_ties: str = ""  # the router near-ties the property met, and how each was judged (see NEAR_TIES above)
    case: str = ""  # a failure's case, as the suite noted it (`config = ...` lines), to reproduce it


@dataclass
class ModelVerdict:
    """One model's verdict: `conforms`, `fails` or `untested`, its counts, and why when untested (for a
    model that conforms or fails, the probe kinds, families, it refused and so was not tested on)."""

    model: str
    verdict: str
    passed: int
    failed: int
    skipped: int
    examples: int
    reason: str = ""
    precision: str = "float32"  # the class it was judged at
    declared: bool = False  # whether the model declared it
    behaves_like: str = ""  # undeclared: the one class its failures' errors follow, and in how many
    deviated: int = 0  # properties where a deviation it declared happened (`verifier.Deviation`)

    @property
    def run(self) -> int:
        """Properties that ran on the model: passed, deviated as declared, or failed."""
        return self.passed + self.deviated + self.failed


@dataclass
class ModelCard:
    """A model under test as the header shows it: what building it on each probe config gave."""

    name: str
    origin: str
    probes: dict[str, str]  # probe kind -> "logits, decode, ..." or "unsupported (...)" / "broken (...)"
    precision: str = "float32"  # the precision class the model declares (built on the probes)
    declared: bool = False
    not_run: str = ""  # a failing model: what it accepts but does not run (`verifier.plugin.diagnosis`)
    declare: str = ""  # ... and the declaration of what it runs


@dataclass
class Header:
    """What was tested, with what: models, library versions, the Hypothesis profile, the suite."""

    models: list[ModelCard]
    versions: dict[str, str]
    hypothesis_profile: str
    hypothesis_settings: dict[str, str]
    suite: str
    created: str
    unavailable: dict[str, str] = field(default_factory=dict)  # models left out (cannot run here) -> why
    checkpoint: str | None = None  # what every model ran on (--checkpoint), with its sha256; None: drawn weights


@dataclass
class Report:
    """A whole run: the header, the results in run order, pytest's exit status (negative: pytest was
    killed by that signal, a crash), and what stopped the run before its end: `Ctrl-C` or `SIGTERM`
    (interrupted), the signal pytest died of (`SIGSEGV`), `exit status N` (the process ended in the
    middle of a test: a model's native code called exit()), pytest's own reason (`1 error during
    collection`, `pytest.exit('...')`), or "" when it ran to its end."""

    header: Header
    results: list[Result] = field(default_factory=list)
    exit_status: int = 0
    stop: str = ""

    def verdicts(self) -> list[ModelVerdict]:
        """Per model under test (the header's, then any other the results name), in that order."""
        names = [card.name for card in self.header.models]
        names += [m for m in dict.fromkeys(r.model for r in self.results if r.model) if m not in names]
        return [self._verdict(name) for name in names]

    def _verdict(self, model: str) -> ModelVerdict:
        mine = [r for r in self.results if r.model == model]
        failed = sum(r.outcome in FAILING for r in mine)
        passed = sum(r.outcome in ("pass", "xpass") for r in mine)
        deviated = [r for r in mine if r.outcome == "xfail"]  # properties where a declared deviation happened
        examples = sum(r.examples or 0 for r in mine if r.outcome in (*FAILING, "pass", "xpass", "xfail"))
        verdict, reason = ("fails", "") if failed else ("conforms", "") if passed else ("untested", "")
        if verdict in ("conforms", "untested") and deviated:  # (untested: every property it ran deviated)
            verdict = "deviates"
            reason = "; ".join(f"{property_short(r.property)}: {r.detail}" for r in deviated)
        elif verdict == "untested":
            reason = self._why_untested(model, mine)
        elif verdict == "conforms" and self.stopped:
            verdict, reason = "untested", f"the run was {self.stopped} before every property ran on it"
        card = next((c for c in self.header.models if c.name == model), None)
        refused = [
            kind
            for kind, probe in (card.probes if card else {}).items()
            if probe.startswith("unsupported") and NOT_SELECTED not in probe  # `NAME@FAMILY` says what it left out
        ]
        if verdict != "untested" and refused:  # what it conforms on is not every family: say which it was not tested on
            not_tested = f"not tested on {', '.join(refused)}: refused by the model (see the header)"
            reason = "; ".join(filter(None, [reason, not_tested]))
        if verdict == "fails" and card is not None and card.not_run:  # first: the failures may all be this
            hint = (
                f"it accepts but does not run as the oracle does: {card.not_run}; if it is not meant to run these, "
                f"declare what it runs ({card.declare}) and it is tested on that; if it is, its failures are there"
            )
            reason = "; ".join(filter(None, [hint, reason]))
        not_seen = [f"{property_short(r.property)}: {r.detail}" for r in mine if r.detail.startswith(NOT_SEEN)]
        if not_seen:
            reason = "; ".join(filter(None, [reason, *not_seen]))
        judged = next((r.precision for r in mine if r.precision), "float32")
        precision, declared = (card.precision, card.declared) if card else (judged, judged != "float32")
        return ModelVerdict(
            model, verdict, passed, failed, len(mine) - passed - failed - len(deviated), examples, reason, precision,
            declared, "" if declared else _behaves_like(mine), len(deviated),
        )  # fmt: skip

    def _why_untested(self, model: str, results: list[Result]) -> str:
        card = next((c for c in self.header.models if c.name == model), None)
        probed = {k: p for k, p in (card.probes if card else {}).items() if NOT_SELECTED not in p}
        refused = {k: p for k, p in probed.items() if p.startswith(("unsupported", "broken"))}
        if not results:
            why = (
                f"the run was {self.stopped} before any property ran on it" if self.stopped else "no property ran on it"
            )
        elif len(results) == 1:
            why = "its only property ran no example (it skipped)"
        else:
            why = f"none of its {len(results)} properties ran an example (all skipped)"
        kinds_by_probe: dict[str, list[str]] = {}  # kinds refused for the same reason, named together
        for kind, probe in refused.items():
            kinds_by_probe.setdefault(probe, []).append(kind)
        listed = "; ".join(f"{', '.join(kinds)}: {probe}" for probe, kinds in kinds_by_probe.items())
        if refused and len(refused) == len(probed):
            return f"{why}: it refused every config family probed ({listed})"
        if refused:
            return f"{why}; refused: {listed} (see the skip reasons)"
        return f"{why} (see the skip reasons)"

    def counts(self) -> dict[str, int]:
        """Number of results per outcome, in OUTCOMES order, zero counts left out."""
        counts = {outcome: sum(r.outcome == outcome for r in self.results) for outcome in OUTCOMES}
        return {outcome: n for outcome, n in counts.items() if n}

    @property
    def interrupted(self) -> bool:
        """Whether the user stopped the run (Ctrl-C, SIGTERM) before it finished: then nothing conforms.
        pytest's exit status alone does not say: pytest stops on a collection error with Ctrl-C's."""
        return self.exit_status == INTERRUPTED and self.stop in ("", *USER_STOPS)  # "": a report of before `stop`

    @property
    def stopped(self) -> str:
        """How the run stopped before its end, "" if it did not: `interrupted (SIGTERM)`, `stopped by
        SIGSEGV` (pytest died of it), `stopped by exit status 0`, `stopped by 1 error during collection`;
        then nothing conforms."""
        if self.interrupted:
            return f"interrupted ({self.stop or CTRL_C})"
        if self.stop:
            return f"stopped by {self.stop}"
        return f"stopped by signal {-self.exit_status}" if self.exit_status < 0 else ""

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.outcome in FAILING]

    @property
    def verdict(self) -> str:
        """`fails` if any test failed, else `untested` if a model under test is or the run stopped
        before its end, else `conforms`; without models, `conforms` only if a test passed (a run that
        skips everything proves nothing)."""
        verdicts = {v.verdict for v in self.verdicts()}
        if self.failures or "fails" in verdicts:
            return "fails"
        if self.stopped or "untested" in verdicts or not any(r.outcome in ("pass", "xfail") for r in self.results):
            return "untested"
        return "deviates" if "deviates" in verdicts else "conforms"

    @property
    def conforms(self) -> bool:
        return self.verdict == "conforms"

    @property
    def accepted(self) -> bool:
        """Every model conforms, or deviates only where it declared it does (exit status 0)."""
        return self.verdict in ("conforms", "deviates")

    def to_dict(self) -> dict[str, Any]:
        models = [{**dataclasses.asdict(v), "run": v.run} for v in self.verdicts()]
        return {
            **dataclasses.asdict(self),
            "counts": self.counts(),
            "models": models,
            "verdict": self.verdict,
            "conforms": self.conforms,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        header = dict(data["header"])
        header["models"] = [ModelCard(**m) for m in header["models"]]
        results = []
        for fields in data["results"]:
            result = Result(**fields)
            if result.worst_error_ratio is not None:
                result.worst_error_ratio = float(result.worst_error_ratio)
            if result.stage_errors is not None:
                result.stage_errors = [(stage, float(e), float(b)) for stage, e, b in result.stage_errors]
            results.append(result)
        return cls(Header(**header), results, data["exit_status"], data.get("stop", ""))

    def to_json(self) -> str:
        return json.dumps(finite(self.to_dict()), indent=2, allow_nan=False)

    @classmethod
    def read(cls, path: Path) -> Report:
        return cls.from_dict(json.loads(path.read_text()))


def _behaves_like(results: list[Result]) -> str:
    """`bfloat16 (5 of 7 failed properties)`: the class an undeclared model's failures behave like
    (their errors follow its rounding), and how many of its failures do; empty when none does, or
    when two failures name different classes (the verdict then names none: it says only what every
    hinted failure says)."""
    failed = [r for r in results if r.outcome in FAILING]
    named = {r.behaves_like for r in failed if r.behaves_like}
    if len(named) != 1:
        return ""
    (like,) = named
    return f"{like} ({sum(r.behaves_like == like for r in failed)} of {len(failed)} failed properties)"


def finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by its name ("inf", "-inf", "nan")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def property_short(nodeid: str) -> str:
    """`test_x` of `test_file.py::test_x`."""
    return nodeid.rsplit("::", 1)[-1]
