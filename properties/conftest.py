"""The property suite's pytest hooks: capability skips, and what each test leaves for the report."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from properties import checks, models


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
