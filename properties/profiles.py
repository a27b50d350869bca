"""Hypothesis settings profiles of the suite: `ci` (the suite's default), `dev`, `thorough`, `ci-shrink`,
`checkpoint`.

Choose one with `pytest --hypothesis-profile NAME` or the HYPOTHESIS_PROFILE environment variable.
`ci-shrink` is `ci` without the pinned `@example`s: generated examples only, shrunk, for measuring
the minimal counterexample a bug leaves (`benchmarks/mutation_report.py`). `checkpoint` is `ci` with
3 examples a property and no shrinking: for `--checkpoint` at full size, where one example is an
oracle pass over every weight (GPT-2 124M: the `ci` profile's 20 took 8 minutes on one core, 4.4 of
them in the 20 full contexts of 1,024 tokens) and every shrinking step is another; a failure shows
the example as drawn.

The plugin registers the profiles in every pytest run (so that `--hypothesis-profile` knows them),
but loads one only for the suite: `use_suite_default` runs when the suite's conftest is imported,
and loads `ci` only if nobody chose a profile, so other Hypothesis tests in the same environment
keep their own settings.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hypothesis import settings

# Hypothesis is imported where a profile is registered or loaded, not here: the CLI reads the names
# below to parse its options, and importing Hypothesis took a third of its start-up.

PROFILE_ENV_VAR = "HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "ci"
PROFILES = ("ci", "ci-shrink", "dev", "thorough", "checkpoint")


def register_profiles() -> None:
    """Register the suite's profiles (again: the same settings), each on Hypothesis's defaults, never on
    the profile loaded now: `dev` and `thorough` registered while `ci` was loaded were derandomized."""
    from hypothesis import HealthCheck, Phase, settings

    base = settings.get_profile("default")

    # Models are built and run per example, so examples are slower than Hypothesis expects; and a
    # model that runs only some configs (one family, no grouped-query attention, one norm eps) rejects
    # the others by design (see properties/models.py), which can be most of them.
    slow_ok = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    settings.register_profile(
        "ci", base, derandomize=True, deadline=None, print_blob=True, database=None, max_examples=20,
        suppress_health_check=slow_ok,
    )  # fmt: skip
    settings.register_profile("ci-shrink", settings.get_profile("ci"), phases=[Phase.generate, Phase.shrink])
    settings.register_profile(
        "checkpoint", settings.get_profile("ci"), max_examples=3, phases=[Phase.explicit, Phase.generate]
    )
    settings.register_profile("dev", base, deadline=None, max_examples=8, suppress_health_check=slow_ok)
    settings.register_profile(
        "thorough", base, deadline=None, print_blob=True, max_examples=1000, suppress_health_check=slow_ok
    )


def load_env_profile() -> None:
    """Load $HYPOTHESIS_PROFILE, when set (`--hypothesis-profile` is applied after this and wins)."""
    from hypothesis import settings

    name = os.environ.get(PROFILE_ENV_VAR)
    if name:
        settings.load_profile(name)


def suite_settings(name: str | None = None) -> settings:
    """The settings of profile `name`; by default of the profile loaded now where it is one of the suite's
    (chosen with --hypothesis-profile or $HYPOTHESIS_PROFILE), else of `ci`. For the properties run in a
    user's own test file (`verifier.testing`), whose loaded profile may be the user's own, made for
    their tests: those settings are not the suite's."""
    from hypothesis import settings

    register_profiles()
    if name is None:
        current = settings.get_current_profile_name()
        name = current if current in PROFILES else DEFAULT_PROFILE
    return settings.get_profile(name)


def use_suite_default() -> None:
    """Load `ci` unless a profile was chosen (by --hypothesis-profile or $HYPOTHESIS_PROFILE)."""
    from hypothesis import settings

    register_profiles()  # a conftest may ask before the plugin's pytest_configure registered them
    if settings.get_current_profile_name() == "default":
        settings.load_profile(DEFAULT_PROFILE)
