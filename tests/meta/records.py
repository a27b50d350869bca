"""Guarantees kept as data: what the search tier (`python -m tests.meta.search`) found, replayed in
every default run in-process, in milliseconds.

A record says: property P, run on model M with this example (its config, weight seed and scale,
tokens, and whatever else the property draws), fails, and its failure says what the record says (the
first divergent stage, the class the error behaves like, phrases of its message); and, where the record
names a base (the catalog's correct implementation at the same class), the same example on the base
passes. Replaying runs the property's own code (its Hypothesis test's body, with the example as its
only one) under the suite's own recording, so the assertion is the one the search saw fail.

Records live in `tests/meta/records/guarantees.jsonl`, one JSON object a line, sorted by name. An
example is stored as JSON with a type tag on each of the suite's input types (`Case`, `Edited`, ...),
and `ModelConfig` by its fields that differ from the defaults; nothing else is decoded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.meta.mutants.base import Transformer
from tests.meta.mutants.catalog import MUTANTS
from verifier.model.config import ModelConfig, RopeScaling
from verifier.model.params import count_parameters
from verifier.plugin.registry import ModelSpec
from verifier.properties import harness
from verifier.properties.cases import Batched, Case, Chunked, Edited, Prompted


class Drawn(NamedTuple):
    """The values a property drew interactively (`st.data()`), in order (`Replaying` gives them back)."""

    values: tuple[Any, ...]


class Replaying:
    """`st.data()`'s object for a replay: each `draw` gives the next recorded value."""

    def __init__(self, drawn: Drawn) -> None:
        self.left = list(drawn.values)

    def draw(self, strategy: object, label: object = None) -> Any:
        if not self.left:
            raise RecordError("the property draws more values than the record holds")
        return self.left.pop(0)


class Recording:
    """`st.data()`'s object, keeping what each `draw` gave (the recorder hands it to the property)."""

    def __init__(self, data: Any) -> None:
        self.data, self.values = data, []  # type: list[Any]

    def draw(self, strategy: Any, label: Any = None) -> Any:
        value = self.data.draw(strategy, label=label)
        self.values.append(value)
        return value

    def drawn(self) -> Drawn:
        return Drawn(tuple(self.values))


RECORDS = Path(__file__).resolve().with_name("records") / "guarantees.jsonl"
# The suite's input types a record may hold, by tag. A tag outside this table is an error, never an import.
TYPES: dict[str, type] = {
    t.__name__: t for t in (Case, Chunked, Edited, Batched, Prompted, ModelConfig, RopeScaling, Drawn)
}
CATALOG = {cls.__name__: cls for cls in MUTANTS}


class RecordError(ValueError):
    """A record that cannot be read (an unknown type, a malformed line)."""


@dataclasses.dataclass(frozen=True)
class Record:
    """One guarantee about the catalog's `mutant` (a class name; `correct` for the base).

    `property` is `module.py::test_name` of the suite; `model` and `base` are `--model` specs; `example`
    the property's drawn arguments. The expectations: `stage` the failure's first divergent stage (None:
    unchecked; `"-"`: none), `behaves_like` the class it names (the same), `says` phrases its message
    contains. `digest` fingerprints the mutant's and the property's code when it was searched: a record
    whose code changed is searched again (`tests.meta.search --changed`)."""

    name: str
    mutant: str
    property: str
    model: str
    example: dict[str, Any]
    base: str | None = None
    stage: str | None = None
    behaves_like: str | None = None
    says: tuple[str, ...] = ()
    digest: str = ""

    def to_json(self) -> str:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["example"] = {k: encode(v) for k, v in self.example.items()}
        fields["says"] = list(self.says)
        return json.dumps({k: v for k, v in fields.items() if v not in (None, (), [])}, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Record:
        try:
            fields = json.loads(line)
            fields["example"] = {k: decode(v) for k, v in fields["example"].items()}
            fields["says"] = tuple(fields.get("says", ()))
            return cls(**fields)
        except (KeyError, TypeError, ValueError) as e:
            raise RecordError(f"{line[:80]!r}...: {type(e).__name__}: {e}") from e


def encode(value: Any) -> Any:
    """A drawn argument as JSON: the suite's input types tagged, tuples as lists."""
    if isinstance(value, ModelConfig):
        changed = {  # the required fields, and those that differ from their defaults
            f.name: encode(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.default is dataclasses.MISSING or getattr(value, f.name) != f.default
        }
        return {"type": "ModelConfig", **changed}
    if isinstance(value, RopeScaling):
        return {"type": "RopeScaling", **{f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        if type(value).__name__ not in TYPES:
            raise RecordError(f"{type(value).__name__} is not one of the types a record holds: {sorted(TYPES)}")
        return {"type": type(value).__name__, **{k: encode(v) for k, v in value._asdict().items()}}
    if isinstance(value, tuple):
        return [encode(v) for v in value]
    if isinstance(value, list):  # kept apart from a tuple: numpy indexes with the two differently
        return {"type": "list", "items": [encode(v) for v in value]}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise RecordError(f"a value of type {type(value).__name__} is not one a record holds")


def decode(value: Any) -> Any:
    """`encode`'s inverse."""
    if isinstance(value, list):
        return tuple(decode(v) for v in value)
    if isinstance(value, dict):
        fields = dict(value)
        tag = fields.pop("type", None)
        if tag == "list":
            return [decode(v) for v in fields["items"]]
        if tag not in TYPES:
            raise RecordError(f"unknown type {tag!r}: expected one of {sorted(TYPES)}")
        return TYPES[tag](**{k: decode(v) for k, v in fields.items()})
    return value


def cost(example: Mapping[str, Any]) -> int:
    """What running an example costs, roughly: its weights times its tokens."""
    total = 0
    for value in example.values():
        case = value if isinstance(value, Case) else getattr(value, "case", None)
        if isinstance(case, Case):
            total += count_parameters(case.config) * max(case.T, 1)
    return total


def load(path: Path = RECORDS) -> list[Record]:
    """Every record of `path` (none if it does not exist)."""
    if not path.exists():
        return []
    return [Record.from_json(line) for line in path.read_text().splitlines() if line.strip()]


def save(records: Iterable[Record], path: Path = RECORDS) -> None:
    """Write `records` sorted by name, whole or not at all (a temporary file renamed over `path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text("".join(r.to_json() + "\n" for r in sorted(records, key=lambda r: r.name)))
    partial.replace(path)


def property_function(name: str) -> Callable[..., Any]:
    """The suite's property `module.py::test_name`."""
    module, _, test = name.partition("::")
    return getattr(importlib.import_module(f"verifier.properties.{module.removesuffix('.py')}"), test)


def digest(prop: str, mutant: str) -> str:
    """A fingerprint of the code a record rests on: the property's source and the mutant's class's (the
    catalog's correct base for `correct`). Not the library's: a change there is what replaying checks."""
    cls = CATALOG.get(mutant, Transformer)
    parts = [inspect.getsource(inspect.unwrap(property_function(prop))), inspect.getsource(cls)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@dataclasses.dataclass
class Replayed:
    """What replaying one example gave: the failure (None where the property held), the reason where the
    suite calls the run a skip (it compared nothing, or the model declined the example), and what the
    suite recorded for its report (`first_divergent_stage`, `behaves_like`, ...)."""

    failure: Exception | None
    skipped: str | None
    recorded: dict[str, Any]


def replay(prop: str, spec: ModelSpec, example: Mapping[str, Any]) -> Replayed:
    """Run the property `prop` on the model `spec` with `example` as its only example, inside the suite's
    own hooks (`verifier.properties.harness.judged`: its recording, the model's declared shapes, its
    skips): a Hypothesis test of one example, so that the property's notes and rejections work as in a search."""
    function = property_function(prop)
    if not hasattr(function, "hypothesis"):  # a property of one fixed example: it draws nothing
        return _judged(function, spec, prop, lambda: function(model_spec=spec))
    inner = function.hypothesis.inner_test

    # The example as an explicit one: run once (a failing generated example would run twice, to report it).
    @settings(database=None, phases=[Phase.explicit], deadline=None, suppress_health_check=list(HealthCheck))
    @hypothesis.example(drawn=dict(example))
    @given(drawn=st.just(dict(example)))
    def once(drawn: dict[str, Any]) -> None:
        inner(model_spec=spec, **{k: Replaying(v) if isinstance(v, Drawn) else v for k, v in drawn.items()})

    return _judged(once, spec, prop, once)


def _judged(test: object, spec: ModelSpec, prop: str, call: Callable[[], None]) -> Replayed:
    recorded: list[tuple[str, Any]] = []
    try:
        with harness.judged(test, spec, prop.partition("::")[2], recorded):
            call()
    except pytest.skip.Exception as skip:
        return Replayed(None, str(skip.msg), dict(recorded))
    except Exception as failure:  # what the property raised is what the record checks
        return Replayed(failure, None, dict(recorded))
    return Replayed(None, None, dict(recorded))
