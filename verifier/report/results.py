"""The results of one run of the suite: a header (models, versions, profile) and one row per test.

Tests tell the report more through `item.user_properties` (pytest's `record_property`), under
these keys; each also shows in pytest's own JUnit XML:

- `model`: the name of the model under test (set by the fixtures plugin for every test of a model);
- `worst_error_ratio`: float, the largest error / tolerance bound over a property's examples;
- `first_divergent_stage`: str, on a failure localized by a trace, e.g. `layers.0.scores`;
- `stage_errors`: [(stage, max |error|, tolerance bound), ...] in compute order, on a failure
  localized by a trace, for the error-per-stage plot (error inf: the stage has the wrong shape);
- `first_failure_seconds`: float, on a failed Hypothesis property, the time from the test's start
  to its first failing example (before shrinking), for the mutation report.

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

MODEL = "model"
WORST_ERROR_RATIO = "worst_error_ratio"
FIRST_DIVERGENT_STAGE = "first_divergent_stage"
STAGE_ERRORS = "stage_errors"
FIRST_FAILURE_SECONDS = "first_failure_seconds"

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


@dataclass
class ModelCard:
    """A model under test as the header shows it: what building it on each probe config gave."""

    name: str
    origin: str
    probes: dict[str, str]  # probe kind -> "logits, decode, ..." or "unsupported (...)" / "broken (...)"


@dataclass
class Header:
    """What was tested, with what: models, library versions, the Hypothesis profile, the suite."""

    models: list[ModelCard]
    versions: dict[str, str]
    hypothesis_profile: str
    hypothesis_settings: dict[str, str]
    suite: str
    created: str


@dataclass
class Report:
    """A whole run: the header, the results in run order, and pytest's exit status."""

    header: Header
    results: list[Result] = field(default_factory=list)
    exit_status: int = 0

    def counts(self) -> dict[str, int]:
        """Number of results per outcome, in OUTCOMES order, zero counts left out."""
        counts = {outcome: sum(r.outcome == outcome for r in self.results) for outcome in OUTCOMES}
        return {outcome: n for outcome, n in counts.items() if n}

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.outcome in FAILING]

    @property
    def conforms(self) -> bool:
        """True when nothing failed and at least one test passed (a run that skips everything proves nothing)."""
        return not self.failures and any(r.outcome == "pass" for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "counts": self.counts(), "conforms": self.conforms}

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
        return cls(Header(**header), results, data["exit_status"])

    def to_json(self) -> str:
        return json.dumps(_finite(self.to_dict()), indent=2, allow_nan=False)

    @classmethod
    def read(cls, path: Path) -> Report:
        return cls.from_dict(json.loads(path.read_text()))


def _finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by its name ("inf", "-inf", "nan")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
