"""The suite's Hypothesis profiles: `ci` derandomized and short; `dev` and `thorough` random, whatever
profile is loaded when they are registered."""

from __future__ import annotations

from hypothesis import settings

from verifier.properties import profiles


def test_registering_while_ci_is_loaded_leaves_dev_and_thorough_random() -> None:
    # Registered in pytest_configure, after a conftest had loaded `ci`, they inherited its derandomize:
    # `HYPOTHESIS_PROFILE=thorough` explored the same examples on every run.
    assert settings.get_current_profile_name() == "ci"  # this session's, from the root conftest
    profiles.register_profiles()
    assert settings.get_profile("ci").derandomize and settings.get_profile("ci").max_examples == 20
    assert not settings.get_profile("dev").derandomize and settings.get_profile("dev").max_examples == 8
    assert not settings.get_profile("thorough").derandomize
    assert settings.get_profile("checkpoint").derandomize and settings.get_profile("checkpoint").max_examples == 3
