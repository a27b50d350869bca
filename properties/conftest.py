"""The property suite's pytest hooks: capability skips, and what each test leaves for the report."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, note, reject
from hypothesis.errors import FailedHealthCheck, HypothesisException, Unsatisfiable

from verifier.plugin.interface import Unsupported
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models, profiles, strategies

# Loaded when the suite is collected, before its modules bind their settings: `ci` unless a
# profile was chosen. Other Hypothesis tests of the same environment keep their own settings.
profiles.use_suite_default()

# Property examples are tiny models, where intra-op threads cost more in synchronisation than they
# gain: a 2-layer transformers forward took 6 ms on one thread and 36-58 ms on two on this 2-core
# machine (and under pytest-xdist the workers already use every core). Read when torch starts;
# an explicit OMP_NUM_THREADS wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "requires(*capabilities, family=None, switch=None, quantized=False, drawn=None): the property needs these "
        "model capabilities, configs of this family (or these families) with this switch on, (a quantized "
        "class;) configs or weights of its own, not a fixed checkpoint's; models without them skip with the "
        "reason (see properties/models.py)",
    )
    # Installed, the suite runs without the clone's pyproject.toml, which registers these and deselects `slow`.
    config.addinivalue_line("markers", "slow: long-running (full-size presets); run only when -m selects it")
    config.addinivalue_line("markers", "needs_cc: needs a C compiler")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.markexpr:  # -m chose, or the clone's addopts ("-m 'not slow'") did
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        config.hook.pytest_deselected(items=slow)


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("requires")
    spec = getattr(item, "callspec", None) and item.callspec.params.get("model_spec")
    if marker is not None and spec is not None:
        kwargs = marker.kwargs
        reason = models.skip_reason(
            spec,
            marker.args,
            kwargs.get("family"),
            switch=kwargs.get("switch"),
            quantized=kwargs.get("quantized", False),
            drawn=kwargs.get("drawn"),
        )
        if reason:
            pytest.skip(reason)


def _model_under_test(item: pytest.Item) -> ModelSpec | None:
    callspec = getattr(item, "callspec", None)
    spec = callspec.params.get("model_spec") if callspec is not None else None
    return spec if isinstance(spec, ModelSpec) else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Run the test recording what it checked, drawing configs the model runs (its declared or probed
    Constraints). On a model, a test that compared nothing, or whose every drawn case Hypothesis had
    to reject (the model declined each input), is a skip with the reason: it tested nothing."""
    spec = _model_under_test(item)
    model = None if spec is None else spec.name
    shapes = (strategies.FREE_SHAPE,) if spec is None else models.support(spec).constraints
    with checks.recording(item.originalname if isinstance(item, pytest.Function) else item.name) as record:
        record.declared = () if spec is None else spec.deviations
        try:
            with _declined_inputs_rejected(item), _timing_first_failure(item), strategies.drawing_for(shapes):
                outcome = yield
        except Unsupported as declined:  # a test without Hypothesis, on an input the model declines
            if model is None:
                checks.record_failure(record, declined)
                raise
            checks.record_refusal(str(declined) or "it raised Unsupported")
            pytest.skip(record.why_nothing_compared(model))
        except (Unsatisfiable, FailedHealthCheck) as error:
            if record.deviated and _every_draw_rejected(error):  # every example it ran deviated as declared
                pytest.xfail(record.deviation_note() or "")
            if model is None or not _every_draw_rejected(error):
                checks.record_failure(record, error)
                raise
            pytest.skip(f"{record.why_nothing_compared(model)} (Hypothesis: {type(error).__name__})")
        except BaseException as error:
            checks.record_failure(record, error)
            raise
        finally:
            item.user_properties.extend(record.user_properties())
        if model is not None and record.comparisons == 0:
            pytest.skip(record.why_nothing_compared(model))
        if record.deviated:  # the property holds but where the model declared it computes something else
            pytest.xfail(record.deviation_note() or "")
        return outcome


def _every_draw_rejected(error: HypothesisException) -> bool:
    """Unsatisfiable, or the health check that fails when too many draws are filtered out."""
    return isinstance(error, Unsatisfiable) or HealthCheck.filter_too_much.name in str(error)


@contextmanager
def _declined_inputs_rejected(item: pytest.Item) -> Iterator[None]:
    """An example whose model call raises `Unsupported` (an input the model declares it cannot take, as
    a --command program does by its exit status) is rejected, with the reason kept: Hypothesis draws
    another, and a test whose every example is declined is a skip saying why. Wraps the test's
    `hypothesis.inner_test`, as `_timing_first_failure` does."""
    hypothesis_attr = getattr(getattr(item, "obj", None), "hypothesis", None)
    if hypothesis_attr is None:
        yield
        return
    inner = hypothesis_attr.inner_test

    @functools.wraps(inner)
    def declining(*args: object, **kwargs: object) -> object:
        try:
            return inner(*args, **kwargs)
        except Unsupported as e:
            note(f"the model declined this input: {e}")
            checks.record_refusal(str(e) or "it raised Unsupported")
            reject()

    hypothesis_attr.inner_test = declining
    try:
        yield
    finally:
        hypothesis_attr.inner_test = inner


@contextmanager
def _timing_first_failure(item: pytest.Item) -> Iterator[None]:
    """Record ("first_failure_seconds", t): when the first example failed, before any shrinking.

    Wraps the test's `hypothesis.inner_test`, the hook Hypothesis offers plugins for this.
    """
    hypothesis_attr = getattr(getattr(item, "obj", None), "hypothesis", None)
    if hypothesis_attr is None:
        yield
        return
    inner, start, first = hypothesis_attr.inner_test, time.perf_counter(), []

    @functools.wraps(inner)
    def timed(*args: object, **kwargs: object) -> object:
        try:
            return inner(*args, **kwargs)
        except HypothesisException:  # a rejected draw, not a failure
            raise
        except Exception:
            if not first:
                first.append(time.perf_counter() - start)
            raise

    hypothesis_attr.inner_test = timed
    try:
        yield
    finally:
        hypothesis_attr.inner_test = inner
        if first:
            item.user_properties.append(("first_failure_seconds", first[0]))
