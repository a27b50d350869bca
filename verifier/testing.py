"""The property suite in your own test file: one pytest test per property, run on your model.

In the spirit of scikit-learn's `parametrize_with_checks`: a test file of your project, run by your
pytest with your configuration, collects every property of the installed suite for your factory::

    from verifier.testing import parametrize_with_checks
    from my_package.model import build

    @parametrize_with_checks(build)
    def test_my_model(check):
        check()

`pytest -k rope` then runs the RoPE properties only, `--hypothesis-profile thorough` runs them with
the suite's `thorough` profile, and a failure is your test's, with the property's message and its
falsifying example. Each property runs as it does under `verifier check` (the suite's own hooks,
`verifier.properties.harness`): it skips, saying why, where the model lacks what it needs or refuses
every config drawn, rejects the inputs the model declines, is an xfail where the model deviates only
as it declared. No conftest.py of the suite is needed: this works wherever `lm-verifier` is installed.

For a verdict and a report rather than tests, `verifier.report.inprocess.check` runs the whole suite
on a model in this process; `verifier check` runs it in a process of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from verifier.fixtures.plugin import given_specs
from verifier.plugin import isolation
from verifier.plugin.interface import Factory
from verifier.plugin.registry import ModelSpec
from verifier.properties import harness, profiles

ARGNAME = "check"  # the parameter of the decorated test
ORIGIN = "parametrize_with_checks"


class PropertyCheck:
    """One property of the suite on one model: calling it runs the property, raising what pytest reads
    as a failure, a skip (with the reason) or an xfail. What the property recorded for a report
    (examples, worst error / tolerance, ...) is in `user_properties` after the call."""

    def __init__(self, prop: harness.Property, spec: ModelSpec, profile: str | None = None) -> None:
        self.property = prop
        self.spec = spec
        self.profile = profile
        self.user_properties: list[tuple[str, object]] = []

    @property
    def id(self) -> str:
        """The test's id: the property's name (`test_logits_agree_with_the_oracle`), with `@FAMILY` for a
        model tested on one family only."""
        return self.property.name if self.spec.family is None else f"{self.property.name}@{self.spec.family}"

    def __call__(self) -> None:
        __tracebackhide__ = True
        isolation.reset_output_budget()  # what one test's models may print
        self.user_properties = []
        settings = profiles.suite_settings(self.profile)  # read now: --hypothesis-profile is applied after import
        harness.run(self.property, self.spec, self.user_properties, settings)

    def __repr__(self) -> str:
        return f"check({self.property.file}::{self.property.name}, model={self.spec.name!r})"


def parametrize_with_checks(
    model: str | ModelSpec | Factory,
    *,
    name: str | None = None,
    families: str | Sequence[str] | None = None,
    profile: str | None = None,
) -> pytest.MarkDecorator:
    """A pytest mark that parametrizes the decorated test's `check` argument with every property of the
    installed suite that tests a model (the `slow` ones left out), each a `PropertyCheck` on `model`,
    its test id the property's name.

    Args:
        model: a factory `(config, weights) -> model`, a `module.path:factory` text or a registered or
            installed name (as `--model` takes them), or a `ModelSpec`.
        name: the model's name in the properties' messages (a factory's default: the `module:qualname`
            that imports it, else its name).
        families: test on these families only, each family's properties a test of their own
            (`test_..._oracle@llama`); by default every family the model runs.
        profile: the suite's Hypothesis profile to run the properties with; by default the one chosen
            for the run where it is one of the suite's (`--hypothesis-profile dev`), else `ci`.

    Raises:
        PluginError: `model` names no model, or one that cannot run here (when the test file is collected).
    """
    if profile is not None and profile not in profiles.PROFILES:
        raise ValueError(f"profile={profile!r}: not one of the suite's Hypothesis profiles {profiles.PROFILES}")
    if isinstance(families, str):
        families = (families,)
    specs = given_specs(model, name=name, families=families or (), origin=ORIGIN)
    checks = [PropertyCheck(prop, spec, profile) for spec in specs for prop in harness.model_properties()]
    return pytest.mark.parametrize(ARGNAME, checks, ids=[c.id for c in checks])
