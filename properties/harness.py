"""What the suite does around each property, in one home for the two ways a property runs.

- Under pytest on the suite (`verifier check`, `pytest --pyargs verifier.properties`), the suite's
  hooks (`properties/conftest.py`) call `requirement_unmet` before the test and wrap its call in `judged`.
- In a user's own test file (`verifier.testing.parametrize_with_checks`), which the suite's conftest
  does not reach, `run` does both around a call of the property's test function.

Either way a property on a model skips with the reason where the model lacks what it `requires`,
rejects the inputs the model declines (`Unsupported`) so that Hypothesis draws others, is a skip when
it compared nothing or every draw was refused, is an xfail where the model deviated only as it
declared, and records what it checked (examples, worst error ratio, the failure) as user properties.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, note, reject, settings
from hypothesis.errors import FailedHealthCheck, HypothesisException, Unsatisfiable

import verifier.properties
from verifier.plugin.interface import Unsupported
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models, strategies

UserProperties = list[tuple[str, Any]]  # pytest's `item.user_properties`
# Told of a property's first failing example as it fails: (seconds since the test started, the error, its case).
FirstFailure = Callable[[float, BaseException, str], None]


def requirement_unmet(marker: pytest.Mark | None, spec: ModelSpec | None) -> str | None:
    """Why a property marked `requires(...)` (`marker`, None if it is not) cannot run on `spec`'s model,
    or None when it can or tests no model (`spec` None)."""
    if marker is None or spec is None:
        return None
    kwargs = marker.kwargs
    return models.skip_reason(
        spec,
        marker.args,
        kwargs.get("family"),
        switch=kwargs.get("switch"),
        quantized=kwargs.get("quantized", False),
        drawn=kwargs.get("drawn"),
    )


@contextmanager
def judged(
    test: object,
    spec: ModelSpec | None,
    name: str,
    user_properties: UserProperties,
    hypothesis_settings: settings | None = None,
    first_failure: FirstFailure | None = None,
) -> Iterator[None]:
    """Run the block (a call of the property `name`'s `test` function) recording what it checked into
    `user_properties`, drawing configs `spec`'s model runs (its declared or probed Constraints). On a
    model, a test that compared nothing, or whose every drawn case Hypothesis had to reject (the model
    declined each input), is a skip with the reason: it tested nothing. A Hypothesis test runs with
    `hypothesis_settings`, by default the profile loaded now (`_run_with`). `first_failure` is told of the
    first example that fails, as it fails, before Hypothesis shrinks it (`_timing_first_failure`)."""
    model = None if spec is None else spec.name
    shapes = (strategies.FREE_SHAPE,) if spec is None else models.support(spec).constraints
    with checks.recording(name) as record:
        record.declared = () if spec is None else spec.deviations
        try:
            with (
                _run_with(test, hypothesis_settings),
                _declined_inputs_rejected(test),
                _timing_first_failure(test, user_properties, first_failure, record),
                strategies.drawing_for(shapes),
            ):
                yield
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
            user_properties.extend(record.user_properties())
        if model is not None and record.comparisons == 0:
            pytest.skip(record.why_nothing_compared(model))
        if record.deviated:  # the property holds but where the model declared it computes something else
            pytest.xfail(record.deviation_note() or "")


def _every_draw_rejected(error: HypothesisException) -> bool:
    """Unsatisfiable, or the health check that fails when too many draws are filtered out."""
    return isinstance(error, Unsatisfiable) or HealthCheck.filter_too_much.name in str(error)


@contextmanager
def _run_with(test: object, hypothesis_settings: settings | None) -> Iterator[None]:
    """Run a Hypothesis test with `hypothesis_settings` (None: the profile loaded now) unless it has
    `@settings` of its own. `@given` binds the profile loaded when the test's module is imported, once
    a process: a second run of the suite in one process (`verifier.check`) would keep the first run's
    profile, and a user's test file that imports the suite before any profile is chosen would run the
    properties with Hypothesis's defaults (a 200 ms deadline, the health checks the suite turns off).
    In a run of its own the profile loaded now is the one the module bound: nothing changes."""
    bound = getattr(test, "_hypothesis_internal_use_settings", None)
    if bound is None or getattr(test, "_hypothesis_internal_settings_applied", False):
        yield
        return
    test._hypothesis_internal_use_settings = hypothesis_settings or settings.default  # type: ignore[attr-defined]
    try:
        yield
    finally:
        test._hypothesis_internal_use_settings = bound  # type: ignore[attr-defined]


@contextmanager
def _declined_inputs_rejected(test: object) -> Iterator[None]:
    """An example whose model call raises `Unsupported` (an input the model declares it cannot take, as
    a --command program does by its exit status) is rejected, with the reason kept: Hypothesis draws
    another, and a test whose every example is declined is a skip saying why. Wraps the test's
    `hypothesis.inner_test`, as `_timing_first_failure` does."""
    hypothesis_attr = getattr(test, "hypothesis", None)
    if hypothesis_attr is None:
        yield
        return
    inner = hypothesis_attr.inner_test

    @functools.wraps(inner)
    def declining(*args: object, **kwargs: object) -> object:
        __tracebackhide__ = True
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
def _timing_first_failure(
    test: object, user_properties: UserProperties, told: FirstFailure | None, record: checks.Record
) -> Iterator[None]:
    """Record ("first_failure_seconds", t): when the first example failed, before any shrinking, and tell
    `told` at once (t, the error, the case `record` holds): Hypothesis may shrink it for minutes.

    Wraps the test's `hypothesis.inner_test`, the hook Hypothesis offers plugins for this.
    """
    hypothesis_attr = getattr(test, "hypothesis", None)
    if hypothesis_attr is None:
        yield
        return
    inner, start = hypothesis_attr.inner_test, time.perf_counter()
    first: list[float] = []  # when the first example failed

    @functools.wraps(inner)
    def timed(*args: object, **kwargs: object) -> object:
        __tracebackhide__ = True
        try:
            return inner(*args, **kwargs)
        except HypothesisException:  # a rejected draw, not a failure
            raise
        except Exception as error:
            if not first:
                first.append(time.perf_counter() - start)
                if told is not None:
                    told(first[0], error, record.case)
            raise

    hypothesis_attr.inner_test = timed
    try:
        yield
    finally:
        hypothesis_attr.inner_test = inner
        if first:
            user_properties.append(("first_failure_seconds", first[0]))


# -- the properties, for a user's own test file ----------------------------------------------------------


@dataclass(frozen=True)
class Property:
    """One property of the installed suite that tests a model: its test function, `test(model_spec=...)`,
    the file that defines it, and its `requires` mark (None if it has none)."""

    file: str  # `test_agreement.py`
    test: Callable[..., None]
    requires: pytest.Mark | None

    @property
    def name(self) -> str:
        """`test_logits_agree_with_the_oracle`: the name the suite's reports give it after its file's."""
        return self.test.__name__


def model_properties() -> list[Property]:
    """Every property of the installed suite (`verifier.properties`) that tests a model (takes
    `model_spec`), in file and definition order, but the `slow` ones (full-size presets), which a
    run of the suite leaves out unless `-m` asks for them. Imports the suite's test modules."""
    found = []
    for info in pkgutil.iter_modules(verifier.properties.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"{verifier.properties.__name__}.{info.name}")
        module_marks = _marks(module)
        for test in vars(module).values():
            defined_here = inspect.isfunction(test) and test.__module__ == module.__name__
            if not defined_here or not test.__name__.startswith("test_"):
                continue
            marks = [*_marks(test), *module_marks]  # the closest first, as pytest's get_closest_marker reads them
            if "model_spec" not in inspect.signature(test).parameters or any(m.name == "slow" for m in marks):
                continue
            requires = next((m for m in marks if m.name == "requires"), None)
            found.append(Property(f"{info.name}.py", test, requires))
    return found


def _marks(obj: object) -> list[pytest.Mark]:
    """The pytest marks applied to a function or module (`pytestmark`), as pytest stores them."""
    marks = getattr(obj, "pytestmark", [])
    marks = [getattr(m, "mark", m) for m in (marks if isinstance(marks, list) else [marks])]  # a MarkDecorator's
    return [m for m in marks if isinstance(m, pytest.Mark)]


def run(
    prop: Property,
    spec: ModelSpec,
    user_properties: UserProperties,
    hypothesis_settings: settings | None = None,
) -> None:
    """Run `prop` on `spec`'s model as the suite's hooks run its test: pytest's skip where the model
    lacks what it requires, then the test judged (`judged`), its user properties added to `user_properties`."""
    __tracebackhide__ = True
    reason = requirement_unmet(prop.requires, spec)
    if reason:
        pytest.skip(reason)
    with judged(prop.test, spec, prop.name, user_properties, hypothesis_settings):
        prop.test(model_spec=spec)
