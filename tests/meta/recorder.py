"""A pytest plugin for the search tier: each failing property's minimal example, kept for its record.

`verifier check ... -- -p tests.meta.recorder --record-examples PATH` appends one JSON line to PATH for
each failing test of a model: its model spec, its property (`module.py::test_name`) and the arguments
of its cheapest failing example (weights times tokens; of equals, the last: Hypothesis runs the shrunk
example last). Not always the one Hypothesis reports: where several pinned examples fail it reports the
first, which may be a published size. The suite's conftest wraps a test's `hypothesis.inner_test` as
this does; each wrapper puts back what it found, so they nest.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Generator
from typing import Any

import pytest
from hypothesis.errors import HypothesisException
from hypothesis.strategies import DataObject

from tests.meta.records import RecordError, Recording, cost, encode
from verifier.plugin.interface import Unsupported
from verifier.plugin.registry import ModelSpec

_FAILED: dict[str, dict[str, Any]] = {}  # a test's node id -> the arguments of its last failing example


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-examples", metavar="PATH", help="append each failing property's example to PATH")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    attr = getattr(getattr(item, "obj", None), "hypothesis", None)
    if not item.config.getoption("record_examples"):
        return (yield)
    if attr is None:  # a property of one fixed example: its failure's example is no arguments
        try:
            return (yield)
        except Exception:
            _FAILED[item.nodeid] = {}
            raise
    inner = attr.inner_test

    @functools.wraps(inner)
    def remembered(*args: object, **kwargs: Any) -> object:
        kwargs = {k: Recording(v) if isinstance(v, DataObject) else v for k, v in kwargs.items()}
        try:
            return inner(*args, **kwargs)
        except (HypothesisException, Unsupported):  # a rejected draw or a declined input: not a failure
            raise
        except Exception:
            example = {k: v.drawn() if isinstance(v, Recording) else v for k, v in kwargs.items() if k != "model_spec"}
            kept = _FAILED.get(item.nodeid)
            if kept is None or cost(example) <= cost(kept):
                _FAILED[item.nodeid] = example
            raise

    attr.inner_test = remembered
    try:
        return (yield)
    finally:
        attr.inner_test = inner


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    path = item.config.getoption("record_examples")
    example = _FAILED.pop(item.nodeid, None)
    spec = getattr(item, "callspec", None) and item.callspec.params.get("model_spec")
    if path and call.when == "call" and report.failed and example is not None and isinstance(spec, ModelSpec):
        line: dict[str, Any] = {
            "model": spec.name,
            "property": item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1] + "::" + getattr(item, "originalname", ""),
        }
        try:
            line["example"] = {k: encode(v) for k, v in example.items()}
        except RecordError as e:  # the search names it as a hole; the run goes on
            line["error"] = str(e)
        with open(path, "a") as f:  # one short write a line: xdist workers append to the same file
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    return report
