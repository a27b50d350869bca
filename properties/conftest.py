"""The property suite's pytest hooks: capability skips, and what each test leaves for the report."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from properties import checks, models

# Property examples are tiny models, where intra-op threads cost more in synchronisation than they
# gain: a 2-layer transformers forward took 6 ms on one thread and 36-58 ms on two on this 2-core
# machine (and under pytest-xdist the workers already use every core). Read when torch starts;
# an explicit OMP_NUM_THREADS wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "requires(capability=None, family=None): the property needs this model capability and configs of this "
        "family; models without them skip with the reason (see properties/models.py)",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("requires")
    spec = getattr(item, "callspec", None) and item.callspec.params.get("model_spec")
    if marker is not None and spec is not None:
        reason = models.skip_reason(spec, marker.kwargs.get("capability"), marker.kwargs.get("family"))
        if reason:
            pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    with checks.recording(item.originalname if isinstance(item, pytest.Function) else item.name) as record:
        try:
            return (yield)
        finally:
            item.user_properties.extend(record.user_properties())
