"""The search tier: can the suite find each catalog bug from scratch, in the `ci` profile, within its
budget; and the records (`tests/meta/records.py`) that keep what it found, replayed in every default run.

    python -m tests.meta.search                  # every search; exit 1 naming each hole
    python -m tests.meta.search --write          # ... and rewrite the records of the searches run
    python -m tests.meta.search --share 3/4      # the searches of share 3 of 4 (CI: a share a commit)
    python -m tests.meta.search --changed        # those without a record or whose code changed, alone
    python -m tests.meta.search --share 3/8 --changed  # ... and with a share (CI)
    python -m tests.meta.search --only ScaleByDHead RopeTheta1000 --kinds kill,stage

Each search plugs its models in as a user does (`verifier check --model module:factory`, pytest
underneath, a chunk of models a run) with `tests.meta.recorder` keeping each failure's example. What a
search must find, by kind:
- kill/CLASS/M: mutant M computing at CLASS (and declaring it) fails a property; the first one is kept
  (`--model-maxfail 1`). Every mutant at every class, but those a class cannot resolve (UNDETECTABLE).
- constrained/M: the same on M as constrained real code runs it (`tests/meta/mutants/constrained.py`).
- stage/M: M's failure of the traced-stage property names the stage where its bug is (STAGES).
- cached/M: M's failure of a decode property names the chunk and position, not a stage (CACHED).
- catch/P/M: property P fails for M, the bug it targets: every property can fail (CATCHES).
- hint/M/P: M declaring no class fails P with no precision hint (the localizing properties, the
  `checkpoint` profile: a hint is given or not on a failure as found).
- hinted/CLASS: the correct base computing at CLASS and declaring none is told CLASS.
- conforms/CLASS, conforms/constrained: the correct base, at each class and as constrained code runs it,
  fails no property (a correct model never fails); it keeps no record (a pass has no example to replay:
  every record's replay runs its example on the base too).
A search that does not find what it must is a hole in the suite: sharpen a property, never the mutant.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks._machine import describe
from benchmarks.results_file import write_section
from tests.meta import records
from tests.meta.mutants.catalog import FLOAT32_INVISIBLE, MUTANTS, PRECISIONS
from tests.meta.mutants.constrained import BATCH_BUGS, EXPLAINED
from tests.meta.suite_runs import (
    CONSTRAINED_CORRECT,
    ROOT,
    constrained_spec,
    junit_failures,
    mutant_spec,
    run_suite,
)
from verifier.analysis.divergence import stage_label
from verifier.report.results import Report

CLASSES = ("float32", *PRECISIONS)
NAMES = [cls.__name__ for cls in MUTANTS]
# Bugs a class's rounding hides: the same computation in float32, judged by the class's bounds, has a
# worst error of this much of the bound over the whole suite (`exact_at.CLASS.NAME`; measured by
# benchmarks/mutation_report.py, RESULTS.md "Mutation report per precision class", and the 2026-12-02
# rows by its `measure_effect` on the holes of the first whole search): below 1 no property at that class
# sees it. NormaliserUnrounded's bug exists only where the model's dtype is narrower than float32 (see
# FLOAT32_INVISIBLE): computed in float32 it is the correct model, so its figure is the class's own noise,
# and at tf32 and q8_0, which keep float32 activations, it computes what the correct model does.
UNDETECTABLE = {
    ("GeluExactErf", "tf32"): 0.26,
    ("GeluExactErf", "float16"): 0.26,
    ("GeluExactErf", "bfloat16"): 0.26,
    ("GeluExactErf", "q8_0"): 0.41,
    ("Float16Accumulation", "float16"): 0.26,
    ("StateLeaksBetweenCalls", "bfloat16"): 0.91,
    ("StateLeaksBetweenCalls", "q8_0"): 0.90,
    ("RoutingRenormalisedWhereNot", "bfloat16"): 0.81,
    ("TopKLogitsThenSoftmax", "bfloat16"): 0.81,
    ("GeGLUWithErfGelu", "tf32"): 0.26,
    ("GeGLUWithErfGelu", "float16"): 0.26,
    ("GeGLUWithErfGelu", "bfloat16"): 0.26,
    ("GeGLUWithErfGelu", "q8_0"): 0.78,
    ("NormaliserUnrounded", "tf32"): 0.26,
    ("NormaliserUnrounded", "float16"): 0.26,
    ("NormaliserUnrounded", "bfloat16"): 0.26,
    ("NormaliserUnrounded", "q8_0"): 0.78,
    ("RoutingNotRenormalised", "bfloat16"): 0.80,
    ("RoutingNotRenormalised", "q8_0"): 0.94,
}
# Where each mutant's bug first shows in a trace (its own `trace`, compared with the oracle's).
# Mutants whose bug a single full pass cannot show (KV cache, batches, masks, generation, state,
# sequences past 128 tokens) are not listed: their failures come from other properties.
STAGES = {
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
    "NopeLayersRotated": "layers.0.q_rope",  # drawn NoPE layers shrink to layer 0
    "NopeLayersInverted": "layers.0.q_rope",
    "QKNormPerHead": "layers.0.q_norm",
    "NormsBeforeSublayers": "layers.0.q",  # attention's input normed: the first stage it reads it into
}
TRACED = "test_agreement.py::test_every_traced_stage_agrees_with_the_oracle"
# Mutants whose full pass is right and whose KV-cached decode is not, and the property that catches
# each: its failure names the first divergent chunk and position and says the bug is in the cached
# path; no trace stage is blamed (the trace is a full pass, and agrees).
CACHED = {
    "CacheChunkMaskNotOffset": "test_kv_cache.py::test_decoding_in_chunks_gives_the_logits_of_one_full_pass",
    "CacheKeptInModel": "test_kv_cache.py::test_two_sequences_decoded_alternately_each_give_their_own_full_pass",
}
CACHED_SAYS = ("first divergent chunk: chunk ", "; first divergent position ", "so the bug is in decode's cached path")
# Every property can fail: (property, a catalog mutant with the bug it is meant to catch).
CATCHES = [
    ("test_shapes.py::test_every_traced_stage_has_its_formula_shape", "TraceHeadsAxisSwapped"),
    ("test_shapes.py::test_logits_are_t_by_vocab_for_a_sequence_and_b_by_t_by_vocab_for_a_batch", "RMSNormOverBatch"),
    ("test_shapes.py::test_gpt2_124m_on_5_tokens_reproduces_the_articles_table", "TraceHeadsAxisSwapped"),
    ("test_rope.py::test_rope_preserves_the_norm_of_every_pair_and_head_vector", "RopeInterleavedOnRotateHalf"),
    ("test_rope.py::test_rope_is_the_identity_at_position_0", "RopePositionsFromOne"),
    ("test_rope.py::test_rope_turns_pair_i_at_position_p_by_p_times_theta_to_the_minus_2i_over_d_head",
     "RopeTheta1000"),
    ("test_rope.py::test_rope_rotations_compose_r_m_times_r_n_is_r_m_plus_n", "RopePositionsFromOne"),
    ("test_rope.py::test_rope_layer_0_scores_depend_only_on_the_distance_m_minus_n", "RopeMissingOnK"),
    ("test_rope.py::test_rope_interleaved_and_rotate_half_pairings_give_the_same_scores",
     "RopeInterleavedOnRotateHalf"),
    ("test_causal_masking.py::test_logits_before_an_edited_token_do_not_change", "MaskMissing"),
    ("test_causal_masking.py::test_logits_from_an_edited_token_on_do_change", "MaskOnlyDiagonal"),
    ("test_causal_masking.py::test_attention_probabilities_are_zero_above_the_diagonal_and_rows_sum_to_1",
     "MaskAfterSoftmax"),
    ("test_causal_masking.py::test_logits_before_an_edited_token_do_not_change", "SoftcapAfterMask"),
    ("test_moe.py::test_identical_experts_make_the_moe_block_one_dense_mlp", "RoutingNotRenormalised"),
    ("test_moe.py::test_identical_experts_make_the_moe_block_one_dense_mlp", "ExpertCapacityDropsTokens"),
    ("test_moe.py::test_permuting_the_experts_with_the_router_rows_leaves_the_output_unchanged", "ExpertBySlot"),
    ("test_moe.py::test_each_token_uses_exactly_top_k_experts", "TopOneInsteadOfTopK"),
    ("test_agreement.py::test_batch_rows_equal_the_rows_run_alone", "ExpertCapacityDropsTokens"),
    ("test_partial_rotary.py::test_partial_rotary_passes_the_dimensions_past_rotary_dim_unchanged",
     "PartialRotaryWholeHead"),
    ("test_partial_rotary.py::test_partial_rotary_passed_part_ignores_m_minus_n_and_rotated_part_is_relative",
     "PartialRotaryWholeHead"),
    ("test_fused_layout.py::test_swapping_the_blocks_of_a_fused_matrix_changes_the_output", "FusedGateUpNotLoaded"),
    ("test_agreement.py::test_logits_agree_with_the_oracle", "RoutingRenormalisedWhereNot"),
    ("test_agreement.py::test_logits_agree_with_the_oracle", "RouterSoftmaxWrongAxis"),
    ("test_agreement.py::test_logits_agree_with_the_oracle", "SharedExpertUngated"),
    ("test_agreement.py::test_logits_agree_with_the_oracle", "FusedGateUpSwapped"),
    ("test_agreement.py::test_logits_agree_with_the_oracle", "FusedQKSwapped"),
    ("test_agreement.py::test_logits_agree_with_the_oracle", "InterleavedPairsAsRotateHalf"),
    ("test_agreement.py::test_logits_agree_with_the_oracle", "TopKLogitsThenSoftmax"),
    ("test_nope.py::test_a_nope_layer_leaves_q_and_k_unrotated", "NopeLayersRotated"),
    ("test_nope.py::test_a_nope_layer_0_score_depends_on_the_tokens_alone", "NopeLayersRotated"),
    ("test_norm_after.py::test_scaling_a_branch_s_last_projection_by_c_leaves_a_model_normed_after_it_unchanged",
     "NormsBeforeSublayers"),
    ("test_agreement.py::test_logits_agree_with_the_oracle", "QKNormPerHead"),
]  # fmt: skip
# The properties that localize (compare with `localize=`): only their failures can carry a precision
# hint. Read from the suite's source, so that a new localizing property is searched too.
LOCALIZING = sorted(
    path.name
    for path in (ROOT / "properties").glob("test_*.py")
    if re.search(r"localize=|localizer\(", path.read_text())
)
# Bugs no localizing property shows (its failures are greedy decoding's): nothing of theirs can carry a hint.
UNLOCALIZED = {"GreedyFromFirstRow": "only generation reads the first row's logits"}
# What the constrained base cannot run: what needs a batch, and what needs a quantized model.
CONSTRAINED_SKIPS = (
    "test_batch_rows_equal_the_rows_run_alone",
    "test_left_padded_rows_with_a_mask_equal_the_rows_run_alone",
    "test_decoding_a_batch_in_chunks_gives_the_logits_of_one_full_pass",
    "test_next_token_distributions_stay_close_to_the_original_weights",
)
HINT_CLASSES = ("tf32", "float16", "bfloat16")
CHUNK = 13  # models a `verifier check` run: most of a run per model was its start-up and collection


@dataclass(frozen=True)
class Search:
    """One search: run `model` (with `select`, a pytest -k, and `profile`) and find `kind`'s failure."""

    kind: str
    name: str
    mutant: str
    model: str
    base: str | None = None
    select: str = ""
    profile: str = "ci"
    stage: str | None = None
    behaves_like: str | None = None
    says: tuple[str, ...] = ()

    @property
    def group(self) -> tuple[str, str, bool]:
        """Searches of a group run together: a `verifier check` of a chunk of their models (each stopped at
        its first failure, `--model-maxfail 1`, where the search needs no other)."""
        return self.select, self.profile, self.kind in ("kill", "constrained", "conforms")


def _k(prop: str) -> str:
    return prop.partition("::")[2]


def searches() -> list[Search]:
    """Every search of the tier (those but `conforms` are the records the default run must hold)."""
    found = [Search("conforms", f"conforms/{precision}", "correct", mutant_spec("correct", precision))
             for precision in CLASSES]  # fmt: skip
    found.append(Search("conforms", "conforms/constrained", "correct", CONSTRAINED_CORRECT, says=CONSTRAINED_SKIPS))
    for precision in CLASSES:
        for name in NAMES:
            invisible = precision == "float32" and name in FLOAT32_INVISIBLE
            if not invisible and (name, precision) not in UNDETECTABLE:
                found.append(Search("kill", f"kill/{precision}/{name}", name, mutant_spec(name, precision),
                                    mutant_spec("correct", precision)))  # fmt: skip
    for name in NAMES:
        if name not in EXPLAINED:
            base = f"{CONSTRAINED_CORRECT}_batched" if name in BATCH_BUGS else CONSTRAINED_CORRECT
            found.append(Search("constrained", f"constrained/{name}", name, constrained_spec(name), base))
    for name, stage in STAGES.items():
        says = (f"first divergent stage: {stage_label(stage)}:",)
        found.append(Search("stage", f"stage/{name}", name, mutant_spec(name), mutant_spec("correct"), _k(TRACED),
                            stage=stage, says=says))  # fmt: skip
    for name, prop in CACHED.items():
        found.append(Search("cached", f"cached/{name}", name, mutant_spec(name), mutant_spec("correct"), _k(prop),
                            stage="-", says=CACHED_SAYS))  # fmt: skip
    for prop, name in CATCHES:
        found.append(Search("catch", f"catch/{_k(prop)}/{name}", name, mutant_spec(name), mutant_spec("correct"),
                            _k(prop)))  # fmt: skip
    for name in NAMES:
        if name not in FLOAT32_INVISIBLE and name not in UNLOCALIZED:
            found.append(Search("hint", f"hint/{name}", name, f"tests.meta.undeclared:mutants.{name}", None,
                                " or ".join(p.removesuffix(".py") for p in LOCALIZING), "checkpoint",
                                behaves_like="-"))  # fmt: skip
    for precision in HINT_CLASSES:
        found.append(Search("hinted", f"hinted/{precision}", "correct", f"tests.meta.undeclared:at.{precision}", None,
                            "agree_with_the_oracle", behaves_like=precision,
                            says=(f"behaves like {precision} here (if it computes in {precision}",)))  # fmt: skip
    return found


def in_share(search: Search, share: tuple[int, int]) -> bool:
    """Whether `search` is in share I of N (I in 1..N): a fixed hash of its name, the same on every machine."""
    index, count = share
    return zlib.crc32(search.name.encode()) % count == index - 1


@dataclass
class Found:
    """A search's outcome: its record (none for a `conforms` search), or its hole; `seconds` its share of
    its chunk's run."""

    search: Search
    records: list[records.Record]
    hole: str = ""
    seconds: float = 0.0


def run(group: Sequence[Search], workdir: Path) -> list[Found]:
    """Run one chunk of searches of the same group in one `verifier check`, and read what each found."""
    select, profile, first_failure = group[0].group
    workdir.mkdir(parents=True, exist_ok=True)
    examples = workdir / "examples.jsonl"
    args = ["-p", "tests.meta.recorder", "--record-examples", str(examples)]
    if select:
        args += ["-k", select]
    if first_failure:
        args += ["--model-maxfail", "1"]
    start = time.monotonic()
    try:
        report = run_suite([s.model for s in group], workdir, *args, profile=profile, timeout=3600)
    except AssertionError as e:
        return [Found(s, [], f"the run wrote no report: {str(e)[:300]}") for s in group]
    seconds = (time.monotonic() - start) / len(group)
    messages = junit_failures(workdir)
    kept: dict[tuple[str, str], dict] = {}
    if examples.exists():
        for line in examples.read_text().splitlines():
            entry = json.loads(line)
            found = entry["example"] if "example" in entry else {"error": entry["error"]}
            kept[entry["model"], entry["property"]] = found
    return [replace(_found(s, report, messages, kept), seconds=seconds) for s in group]


def _conforms(search: Search, report: Report) -> Found:
    """The correct base: no property fails on it, and it runs every property (`says`: but these)."""
    mine = [r for r in report.results if r.model == search.model]
    failed = [f"{_k(r.property)}: {r.detail[:200]}" for r in mine if r.outcome in ("fail", "error")]
    skipped = {_k(r.property) for r in mine if r.outcome == "skip"}
    holes = failed + ([f"skipped {sorted(skipped)}, expected {sorted(search.says)}"] if search.says and
                      skipped != set(search.says) else []) + ([] if mine else ["nothing ran"])  # fmt: skip
    return Found(search, [], "; ".join(holes))


def _found(search: Search, report: Report, messages: dict[str, str], kept: dict[tuple[str, str], dict]) -> Found:
    if search.kind == "conforms":
        return _conforms(search, report)
    failures = [r for r in report.failures if r.model == search.model and r.outcome == "fail"]
    if search.select and search.kind not in ("hint", "hinted"):
        failures = [r for r in failures if _k(r.property) == search.select]
    if not failures:
        mine = [f"{_k(r.property)}: {r.outcome}" for r in report.results if r.model == search.model]
        return Found(search, [], f"no property failed ({'; '.join(mine[:5]) or 'nothing ran'})")
    if search.kind in ("kill", "constrained"):
        failures = failures[:1]
    found, holes = [], []
    for failure in failures:
        where = f"{_k(failure.property)}"
        example = kept.get((search.model, failure.property))
        if example is None or "error" in example:
            why = (
                example["error"] if example else "its failure was not a property's example (a crash of the machinery?)"
            )
            holes.append(f"{where}: {why}")
            continue
        # a traced or decode failure's whole message (its stage, chunk, position) is in pytest's report
        message = messages.get(search.model, "") if search.kind in ("stage", "cached") else failure.detail
        if search.stage is not None and (failure.first_divergent_stage or "-") != search.stage:
            holes.append(f"{where}: first divergent stage {failure.first_divergent_stage}, expected {search.stage}")
        if search.behaves_like is not None and (failure.behaves_like or "-") != search.behaves_like:
            holes.append(f"{where}: behaves like {failure.behaves_like}, expected {search.behaves_like}")
        holes += [f"{where}: the message does not say {phrase!r}" for phrase in search.says if phrase not in message]
        example_values = {k: records.decode(v) for k, v in example.items()}
        found.append(records.Record(
            search.name, search.mutant, failure.property, search.model, example_values, search.base, search.stage,
            search.behaves_like, search.says, records.digest(failure.property, search.mutant),
        ))  # fmt: skip
    # Of a hint search's failures (every one checked above), the cheapest is replayed: one record a search.
    return Found(search, sorted(found, key=lambda r: records.cost(r.example))[:1], "; ".join(holes))


def search_all(chosen: Sequence[Search], workers: int) -> list[Found]:
    """Run `chosen`, a chunk of a group a `verifier check`, `workers` at a time, printing progress."""
    groups: dict[tuple[str, str, bool], list[Search]] = defaultdict(list)
    for s in chosen:
        groups[s.group].append(s)
    chunks = [g[i : i + CHUNK] for g in groups.values() for i in range(0, len(g), CHUNK)]
    done: list[Found] = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="verifier-search-") as tmp, ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(run, chunk, Path(tmp) / str(i)) for i, chunk in enumerate(chunks)]
        for future in futures:
            results = future.result()
            done += results
            holes = sum(1 for f in results if f.hole)
            print(f"[{len(done)}/{len(chosen)} searches, {time.monotonic() - start:.0f} s] {results[0].search.kind} "
                  f"x{len(results)}: {holes} hole(s)", file=sys.stderr, flush=True)  # fmt: skip
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the records of the searches run")
    parser.add_argument("--share", metavar="I/N", help="only share I of N (1 <= I <= N)")
    parser.add_argument(
        "--changed", action="store_true", help="also every search without a record, or whose code changed"
    )
    parser.add_argument("--only", nargs="*", metavar="MUTANT", help="only the searches of these mutants")
    kinds = "kill, constrained, stage, cached, catch, hint, hinted, conforms"
    parser.add_argument("--kinds", help=f"comma-separated kinds: {kinds}")
    parser.add_argument("--workers", type=int, default=2, help="`verifier check` runs at once (default 2)")
    args = parser.parse_args(argv)
    everything, stored = searches(), records.load()
    chosen = [s for s in everything if (not args.only or s.mutant in args.only)
              and (not args.kinds or s.kind in args.kinds.split(","))]  # fmt: skip
    changed = set(stale(everything, stored)) if args.changed else set()
    if args.share:
        index, _, count = args.share.partition("/")
        if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
            parser.error(f"--share {args.share}: expected I/N with 1 <= I <= N, e.g. 3/8")
        share = (int(index), int(count))
        chosen = [s for s in chosen if in_share(s, share) or s.name in changed]
    elif args.changed:  # alone, only those: what a change to a property or a mutant needs searched again
        chosen = [s for s in chosen if s.name in changed]
    print(f"{len(chosen)} of {len(everything)} searches", file=sys.stderr)
    started = time.monotonic()
    results = search_all(chosen, args.workers)
    holes = [f for f in results if f.hole]
    for f in holes:
        print(f"HOLE {f.search.name} ({f.search.model}): {f.hole}")
    if args.write:
        searched = {f.search.name for f in results}
        kept = [r for r in stored if r.name not in searched]
        records.save(kept + [r for f in results for r in f.records])
        print(f"wrote {records.RECORDS.relative_to(ROOT)}", file=sys.stderr)
        if len(results) == len(everything):  # a whole search: its run is the one RESULTS.md reports
            write_section(render(results, time.monotonic() - started, args.workers))
    print(f"{len(results) - len(holes)} of {len(results)} searches found what they must; {len(holes)} hole(s)")
    return 1 if holes else 0


def render(results: Sequence[Found], seconds: float, workers: int) -> str:
    """RESULTS.md's section on the last whole search: by kind, the searches, holes, records and time."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    rows = []
    for kind in dict.fromkeys(f.search.kind for f in results):
        mine = [f for f in results if f.search.kind == kind]
        holes = [f.search.name for f in mine if f.hole]
        rows.append(f"| {kind} | {len(mine)} | {len(holes)}{': ' + ', '.join(holes[:5]) if holes else ''} | "
                    f"{sum(len(f.records) for f in mine)} | {sum(f.seconds for f in mine):.0f} |")  # fmt: skip
    return "\n".join([
        "## Search tier: the mutant catalog searched from scratch",
        "",
        f"Machine: {describe()}. Commit {commit.stdout.strip() or '?'}, {datetime.date.today()}.",
        f"Command: `python -m tests.meta.search --write` ({workers} runs at once), Hypothesis profile `ci` "
        f"(`checkpoint` for the hint searches): {seconds / 60:.1f} min. What each kind must find: "
        "`tests/meta/search.py`; its records are replayed in every default run (`tests/meta/test_records.py`).",
        "",
        "| kind | searches | holes | records | seconds (summed over the runs) |",
        "|---|---:|---|---:|---:|",
        *rows,
        "",
    ])  # fmt: skip


def stale(everything: Sequence[Search], stored: Sequence[records.Record]) -> list[str]:
    """The searches without a record, or with a record whose code (property, mutant) changed since (the
    `conforms` searches keep none: they come with their share)."""
    by_search: dict[str, list[records.Record]] = defaultdict(list)
    for r in stored:
        by_search[r.name].append(r)
    return [s.name for s in everything if (s.kind != "conforms" and not by_search[s.name])
            or any(r.digest != records.digest(r.property, r.mutant) for r in by_search[s.name])]  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
