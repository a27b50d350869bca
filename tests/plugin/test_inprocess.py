"""The in-process entry points: `check` runs the suite in this process and returns its report (the
reference conforms, a catalog bug fails naming the property, a factory no spec names is tested, a second
run sees its own model and profile and this process is left as it was), and `parametrize_with_checks`
makes a user's test file outside the repository collect one test per property for their model."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.meta.mutants.catalog import mutants
from tests.plugin import broken
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin import checkpoint, isolation
from verifier.plugin.registry import PluginError
from verifier.properties import harness
from verifier.reference import NumpyModel
from verifier.report.inprocess import check
from verifier.report.suite import PytestOptionError

pytest_plugins = ["pytester"]  # registered for this module's test only (the clone's conftest.py does not)

QUIET = ["-q", "-p", "no:cacheprovider"]
STAGES = "test_every_traced_stage_agrees_with_the_oracle"
SAME_INPUT = "test_the_same_input_gives_the_same_output"
SOFTCAP = "test_every_logit_lies_within_the_final_softcap"
ROPE_SCORES = "test_rope_layer_0_scores_depend_only_on_the_distance_m_minus_n"


def test_the_reference_conforms_by_its_registered_name_and_the_reports_are_written(tmp_path: Path) -> None:
    report = check("numpy", pytest_args=[*QUIET, "-k", f"{STAGES} or {SAME_INPUT}"], reports=tmp_path)
    assert report.verdict == "conforms", [(r.property, r.detail) for r in report.failures]
    (verdict,) = report.verdicts()
    assert (verdict.model, verdict.passed, verdict.failed) == ("numpy", 2, 0), verdict
    assert verdict.examples > 2 * 20, verdict  # the ci profile's 20 a property, and the pinned ones
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conformance.html", "conformance.json", "conformance.md"]
    assert json.loads((tmp_path / "conformance.json").read_text())["verdict"] == "conforms"


def test_a_catalog_bug_fails_naming_the_property_and_the_model() -> None:
    report = check(mutants.ScaleByDHead, pytest_args=[*QUIET, "-k", f"{STAGES} or {SAME_INPUT}"])
    assert report.verdict == "fails"
    (failure,) = report.failures
    assert failure.property == f"test_agreement.py::{STAGES}", failure
    assert failure.detail.startswith(f"{STAGES}: model 'build_ScaleByDHead' (float32), trace of "), failure.detail
    assert "first divergent stage: layer 0 scores" in failure.detail
    assert next(r for r in report.results if r.property.endswith(SAME_INPUT)).outcome == "pass"


def test_a_factory_no_spec_names_is_tested_as_it_is_on_the_families_asked_for() -> None:
    def build(config: ModelConfig, weights: Weights) -> Any:  # a closure: no `module:factory` imports it
        return NumpyModel(config, weights)

    report = check(build, families=("gpt2", "llama"), pytest_args=[*QUIET, "-k", SAME_INPUT])
    assert [card.name for card in report.header.models] == ["build@gpt2", "build@llama"]
    assert {card.origin for card in report.header.models} == {"verifier.check"}
    assert [(v.model, v.verdict) for v in report.verdicts()] == [(m, "conforms") for m in ("build@gpt2", "build@llama")]


def test_two_runs_in_a_row_each_judge_their_own_model_with_their_own_profile_and_leave_the_process_as_it_was() -> None:
    before = (dict(os.environ), list(sys.path), settings.get_current_profile_name(), tempfile.gettempdir())
    # A model of this name that did not return in time is not called again in its run; the next run's is another.
    hung = check(broken.hangs_in_logits, name="model", pytest_args=[*QUIET, "--call-timeout=1", "-k", SAME_INPUT])
    assert "did not return within 1 s" in hung.failures[0].detail, hung.failures
    assert isolation.call_timeout() == isolation.DEFAULT_TIMEOUT_S and checkpoint.current() is None
    ci = check(NumpyModel, name="model", pytest_args=[*QUIET, "-k", SAME_INPUT])
    dev = check(NumpyModel, name="model", profile="dev", pytest_args=[*QUIET, "-k", SAME_INPUT])
    assert (dev.verdict, ci.verdict) == ("conforms", "conforms"), (dev.failures, ci.failures)
    # The suite's modules were imported by the first run (or an earlier test): each run has its own profile.
    assert (dev.header.hypothesis_profile, ci.header.hypothesis_profile) == ("dev", "ci")
    assert dev.results[0].examples < ci.results[0].examples, (dev.results, ci.results)  # dev's 8, ci's 20
    after = (dict(os.environ), list(sys.path), settings.get_current_profile_name(), tempfile.gettempdir())
    assert after == before


def test_what_a_run_in_this_process_cannot_do_is_refused_before_it_starts() -> None:
    with pytest.raises(PluginError, match=r"expected module\.path:factory or a registered or installed name"):
        check("no-such-model")
    with pytest.raises(PytestOptionError, match="-n: pytest-xdist's workers are processes of their own"):
        check("numpy", pytest_args=["-n", "2"])
    with pytest.raises(ValueError, match="not one of the suite's Hypothesis profiles"):
        check("numpy", profile="fast")
    raised: list[BaseException] = []
    thread = threading.Thread(target=lambda: _record_raise(raised, lambda: check("numpy")))
    thread.start()
    thread.join()
    assert [str(e) for e in raised] == ["verifier.check runs pytest, which needs the main thread; call it from there"]


def _record_raise(raised: list[BaseException], call: Any) -> None:
    try:
        call()
    except BaseException as e:
        raised.append(e)


USER_TEST_FILE = """
from verifier.reference import NumpyModel
from verifier.testing import parametrize_with_checks


class Doubled:
    '''The reference's logits twice over, and no trace.'''

    def __init__(self, config, weights):
        self.reference = NumpyModel(config, weights)

    def logits(self, tokens):
        return 2 * self.reference.logits(tokens)


def doubled(config, weights):
    return Doubled(config, weights)


@parametrize_with_checks(NumpyModel)
def test_reference(check):
    check()


@parametrize_with_checks(doubled)
def test_doubled(check):
    check()
"""


def test_a_user_s_test_file_collects_every_property_for_its_model_and_runs_them_as_the_suite_does(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_user=USER_TEST_FILE)
    selected = f"{SAME_INPUT} or {SOFTCAP} or {ROPE_SCORES}"
    # A process of its own, in a directory outside the repository: what `pip install lm-verifier` gives a user.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "-rfs", "-k", selected)
    every = 2 * len(harness.model_properties())
    result.assert_outcomes(passed=4, failed=1, skipped=1, deselected=every - 6)
    result.stdout.fnmatch_lines([
        f"E * {SOFTCAP}: model 'test_user:doubled' (float32), how far each logit lies beyond the final soft-cap *",
        f"FAILED test_user.py::test_doubled[[]{SOFTCAP}[]]*",
        "SKIPPED [[]1[]] test_user.py:*: model 'test_user:doubled' has no 'trace' capability *",
    ])  # fmt: skip


def test_the_helper_s_checks_are_the_suite_s_model_properties() -> None:
    names = [p.name for p in harness.model_properties()]
    assert STAGES in names and SAME_INPUT in names and len(names) == len(set(names))
    # The model-independent tests and the slow ones (full-size presets) are not checks of a model.
    assert "test_presets_have_their_published_totals" not in names
    assert "test_padding_gpt2_124m_to_1024_tokens_gives_1024_by_768_and_changes_no_real_position" not in names
