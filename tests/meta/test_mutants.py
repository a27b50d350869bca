"""The suite catches bugs: every mutant of the catalog fails at least one property, the correct
implementation passes all of them, and a failure names the stage where the bug is.

Each run plugs the models in through the public path (`verifier check --model module:factory`,
pytest underneath) in a fresh process; the catalog's mutants go in batches, a `--model` each. A
mutant that survives is a hole in the suite: add or sharpen a property, never weaken the mutant.
"""

from __future__ import annotations

import pytest

from tests.meta.mutants.catalog import FLOAT32_INVISIBLE, PRECISIONS
from tests.meta.mutants.constrained import EXPLAINED
from tests.meta.suite_runs import (
    CONSTRAINED_CORRECT,
    CORRECT,
    DOCS,
    Batch,
    constrained_spec,
    junit_failures,
    mutant_spec,
    run_suite,
    session_dir,
)
from verifier.analysis.divergence import stage_label
from verifier.report.results import Report, Result

pytestmark = pytest.mark.slow


KILLABLE = [name for name in DOCS if name not in FLOAT32_INVISIBLE]
# One `verifier check` of many mutants, each stopped at its first failing property (`--model-maxfail
# 1`), takes a few minutes where a run per mutant took twice as long: most of each run was the start-up
# and collection. The batches run a chunk of mutants at a time, each chunk once for all xdist workers.
BATCH = 3600  # seconds a chunk may take before it counts as hung


def _first_failures(batch: Batch, spec: str) -> list[Result]:
    """The failures of the model `spec` in its batched run (`--model-maxfail 1`: its first one)."""
    return [r for r in batch.report(spec).failures if r.model == spec]


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Batch:
    """Every mutant float32 can show, each stopped at its first failure."""
    specs = [mutant_spec(name) for name in KILLABLE]
    return Batch(session_dir(tmp_path_factory) / "killed", specs, "--model-maxfail", "1", timeout=BATCH)


@pytest.mark.parametrize("name", KILLABLE)
def test_mutant_fails_a_property(name: str, killed: Batch) -> None:
    failures = _first_failures(killed, mutant_spec(name))
    assert failures, f"mutant {name} ({DOCS[name]}) passed every property: a hole in the suite"
    failure = failures[0]
    # Killed by a property's own verdict, not by a crash of the suite's machinery.
    assert failure.outcome == "fail" and f"model {mutant_spec(name)!r}" in failure.detail, (
        f"mutant {name} was not failed by a property's message:\n{failure.detail}"
    )


def test_the_correct_implementation_passes_every_property(tmp_path) -> None:
    report = run_suite(CORRECT, tmp_path)
    assert report.conforms, "\n".join(f"{r.property}: {r.detail}" for r in report.failures) or "nothing passed"


CONSTRAINED_KILLABLE = [name for name in DOCS if name not in EXPLAINED]


@pytest.fixture(scope="module")
def constrained_killed(tmp_path_factory: pytest.TempPathFactory) -> Batch:
    """Every constrained mutant, each stopped at its first failure."""
    specs = [constrained_spec(name) for name in CONSTRAINED_KILLABLE]
    return Batch(session_dir(tmp_path_factory) / "constrained", specs, "--model-maxfail", "1", timeout=BATCH)


@pytest.mark.parametrize("name", CONSTRAINED_KILLABLE)
def test_constrained_mutant_fails_a_property(name: str, constrained_killed: Batch) -> None:
    failures = _first_failures(constrained_killed, constrained_spec(name))
    assert failures, f"mutant {name} ({DOCS[name]}), constrained, passed every property: a hole in the suite"
    assert f"model {constrained_spec(name)!r}" in failures[0].detail, failures[0].detail


def test_the_constrained_correct_implementation_conforms(tmp_path) -> None:
    report = run_suite(CONSTRAINED_CORRECT, tmp_path)
    assert report.conforms, "\n".join(f"{r.property}: {r.detail}" for r in report.failures) or "nothing passed"
    skipped = {r.property.split("::")[1] for r in report.results if r.model and r.outcome == "skip"}
    assert skipped == {  # only what needs a batch, and what needs a quantized model: every other one ran on it
        "test_batch_rows_equal_the_rows_run_alone",
        "test_left_padded_rows_with_a_mask_equal_the_rows_run_alone",
        "test_decoding_a_batch_in_chunks_gives_the_logits_of_one_full_pass",
        "test_next_token_distributions_stay_close_to_the_original_weights",
    }, skipped


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_correct_implementation_passes_every_property_at_each_class(precision: str, tmp_path) -> None:
    """Computing at a class and declaring it (the mutation report's baseline at that class)."""
    report = run_suite(mutant_spec("correct", precision), tmp_path)
    assert report.conforms, "\n".join(f"{r.property}: {r.detail}" for r in report.failures) or "nothing passed"
    assert {v.precision for v in report.verdicts()} == {precision}


# Where each mutant's bug first shows in a trace (its own `trace`, compared with the oracle's).
# Mutants whose bug a single full pass cannot show (KV cache, batches, masks, generation, state,
# sequences past 128 tokens) are not listed: their failures come from other properties.
FIRST_DIVERGENT_STAGE = {
    "ScaleByDHead": "layers.0.scores",
    "ScaleByDModel": "layers.0.scores",
    "NoScale": "layers.0.scores",
    "SoftmaxWrongAxis": "layers.0.probs",
    "MaskMissing": "layers.0.probs",
    "MaskExcludesDiagonal": "layers.0.probs",
    "MaskOneFutureToken": "layers.0.probs",
    "MaskAfterSoftmax": "layers.0.probs",
    "MaskOnlyDiagonal": "layers.0.probs",
    "LayerNormUnbiasedVariance": "layers.0.attn_norm",
    "LayerNormEpsOutsideSqrt": "layers.0.attn_norm",
    "RMSNormSumNoEps": "layers.0.attn_norm",
    "NormEpsTooSmall": "layers.0.attn_norm",
    "GeluExactErf": "layers.0.mlp_act",
    "SwiGLUAsSum": "layers.0.mlp_out",  # the mutant computes its MLP without tracing its inner stages
    "SiluOnWrongBranch": "layers.0.mlp_out",
    "AttentionResidualDropped": "layers.0.resid_attn",
    "PostNorm": "layers.0.attn_norm",
    "FinalNormMissing": "final_norm",
    "ClassifierNotTied": "logits",
    "PositionEmbeddingMissing": "embed",
    "PositionEmbeddingOffset": "embed",
    "RopeInterleavedOnRotateHalf": "layers.0.q_rope",
    "RopeTheta1000": "layers.0.q_rope",
    "RopePositionsFromOne": "layers.0.q_rope",
    "RopeFrequenciesOverDModel": "layers.0.q_rope",
    "RopeOnValues": "layers.0.attn",  # v is traced before the rotation, so the first wrong output is attn
    "RopeMissingOnK": "layers.0.k_rope",
    "GQAModuloMapping": "layers.0.scores",
    "OutputProjectionTransposed": "layers.0.attn_out",
    "Conv1DNotTransposed": "layers.0.attn_out",
    "QKVSplitOrder": "layers.0.q",
    "Float16Accumulation": "layers.0.q",
    "TraceHeadsAxisSwapped": "layers.0.q",
    "WindowOffByOne": "layers.0.probs",  # the scores a query uses are the same, their weights are not
    "WindowOneKeyShort": "layers.0.probs",
    "LayerTypesSwapped": "layers.0.probs",
    "RopeScalingOnEveryBand": "layers.0.q_rope",
    "RopeScalingIgnored": "layers.0.q_rope",
    "KeyBiasDropped": "layers.0.k",
    "ValueBiasDropped": "layers.0.v",
    "OutputBiasAdded": "layers.0.attn_out",
    "QKNormAfterRope": "layers.0.q_norm",
    "QKNormSkipped": "layers.0.q_rope",  # the mutant traces no q_norm: the next stage of q is the first it has
    "GemmaNormWithoutPlusOne": "layers.0.attn_norm",
    "GeGLUWithErfGelu": "layers.0.mlp_act",
    "SoftcapAfterMask": "layers.0.scores",  # its traced scores are not capped
    "AttentionSoftcapMissing": "layers.0.scores",
    "WindowedLayersUncapped": "layers.0.scores",
    "FinalSoftcapMissing": "logits",
    "QueryScaleIgnored": "layers.0.scores",
    "SandwichNormMissing": "layers.0.resid_attn",  # the mutant traces no attn_post_norm
    "TopOneInsteadOfTopK": "layers.0.experts",  # the router's probabilities are right, its choice is not
    "RoutingNotRenormalised": "layers.0.mlp_out",
    "RoutingRenormalisedWhereNot": "layers.0.mlp_out",
    "RouterSoftmaxWrongAxis": "layers.0.router_probs",
    "SharedExpertUngated": "layers.0.mlp_out",
    "ExpertBySlot": "layers.0.experts",  # the experts it runs are the slots 0..k-1, not the ones it chose
    "ExpertCapacityDropsTokens": "layers.0.mlp_out",
    "TopKLogitsThenSoftmax": "layers.0.mlp_out",
    "FusedGateUpSwapped": "layers.0.mlp_gate",
    "FusedGateUpNotLoaded": "layers.0.mlp_gate",
    "FusedQKSwapped": "layers.0.q",
    "PartialRotaryWholeHead": "layers.0.q_rope",
    "InterleavedPairsAsRotateHalf": "layers.0.q_rope",
}


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, dict[str, str]]:
    """The traced-stage property on every mutant of FIRST_DIVERGENT_STAGE in one run (40 s here; a run
    per mutant took 261 s of CI's slow tier, mostly start-up), and each failure's whole message."""
    reports = tmp_path_factory.mktemp("first-divergent-stage")
    specs = [mutant_spec(name) for name in FIRST_DIVERGENT_STAGE]
    report = run_suite(specs, reports, "-k", "test_every_traced_stage_agrees_with_the_oracle")
    return report, junit_failures(reports)


@pytest.mark.parametrize(("name", "stage"), list(FIRST_DIVERGENT_STAGE.items()))
def test_failure_names_the_stage_of_the_bug(name: str, stage: str, traced: tuple[Report, dict[str, str]]) -> None:
    report, messages = traced
    mine = [r for r in report.results if r.model == mutant_spec(name)]
    localized = [r for r in mine if r.outcome == "fail" and r.first_divergent_stage]
    assert localized, f"mutant {name}: no failure named a stage:\n" + "\n".join(r.detail for r in mine)
    found = localized[0]
    assert found.first_divergent_stage == stage, (
        f"mutant {name} ({DOCS[name]}): first divergent stage {found.first_divergent_stage}, expected {stage}"
    )
    message = messages.get(mutant_spec(name), "")
    assert f"first divergent stage: {stage_label(stage)}:" in message, f"the failure message does not name {stage}"


# Mutants whose full pass is right and whose KV-cached decode is not, and the property that catches
# each: its failure names the first divergent chunk and position and says the bug is in the cached
# path; no trace stage is blamed (the trace is a full pass, and agrees).
CACHED_PATH_BUGS = {
    "CacheChunkMaskNotOffset": "test_decoding_in_chunks_gives_the_logits_of_one_full_pass",
    "CacheKeptInModel": "test_two_sequences_decoded_alternately_each_give_their_own_full_pass",
}


@pytest.mark.parametrize(("name", "test"), list(CACHED_PATH_BUGS.items()))
def test_a_cached_path_failure_names_the_chunk_and_position_not_the_trace(name: str, test: str, tmp_path) -> None:
    report = run_suite(mutant_spec(name), tmp_path, "-k", test)
    assert report.failures, f"mutant {name} ({DOCS[name]}) passed {test}"
    assert report.failures[0].first_divergent_stage is None, report.failures[0].first_divergent_stage
    message = (tmp_path / "junit.xml").read_text()
    assert "first divergent chunk: chunk " in message and "; first divergent position " in message, message
    assert "so the bug is in decode's cached path" in message
    assert "logits() and trace() do not compute the same thing" not in message
