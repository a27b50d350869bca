"""The property suite's pytest hooks: capability skips, and what each test leaves for the report (their
bodies are `verifier.properties.harness`'s, which a user's own test file runs too: `verifier.testing`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Generator

import pytest

from verifier.plugin.registry import ModelSpec
from verifier.properties import harness, models, profiles
from verifier.report import collect

# Loaded when the suite is collected: `ci` unless a profile was chosen; each property runs with the
# profile loaded when it runs (`harness.judged`). Other Hypothesis tests of the same environment keep
# their own settings.
profiles.use_suite_default()

# Property examples are tiny models, where intra-op threads cost more in synchronisation than they
# gain: a 2-layer transformers forward took 6 ms on one thread and 36-58 ms on two on this 2-core
# machine (and under pytest-xdist the workers already use every core). Read when torch starts;
# an explicit OMP_NUM_THREADS wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config: pytest.Config) -> None:
    # The suite's markers are registered by the pytest plugin (`verifier.fixtures.plugin`), in every run:
    # a user's own test file imports the suite's modules too (`verifier.testing`).
    models.forget()  # what an earlier run in this process (`verifier.check`) found its models support


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.markexpr:  # -m chose, or the clone's addopts ("-m 'not slow'") did
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        config.hook.pytest_deselected(items=slow)


def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = harness.requirement_unmet(item.get_closest_marker("requires"), _model_under_test(item))
    if reason:
        pytest.skip(reason)


def _model_under_test(item: pytest.Item) -> ModelSpec | None:
    callspec = getattr(item, "callspec", None)
    spec = callspec.params.get("model_spec") if callspec is not None else None
    return spec if isinstance(spec, ModelSpec) else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Run the test as `verifier.properties.harness.judged` says: what it checked recorded, a test that
    compared nothing or whose every draw was refused a skip, declared deviations an xfail."""
    name = item.originalname if isinstance(item, pytest.Function) else item.name
    # The collector of `verifier check` and of a run without pytest-xdist (whose workers have none) prints a
    # first failure as it is found and keeps it in the journal, before Hypothesis shrinks it.
    collector = item.config.pluginmanager.get_plugin(collect.PLUGIN_NAME)
    told = None if collector is None else functools.partial(collector.first_failure, item.nodeid)
    obj = getattr(item, "obj", None)
    with harness.judged(obj, _model_under_test(item), name, item.user_properties, first_failure=told):
        return (yield)
