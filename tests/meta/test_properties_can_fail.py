"""Each property fails for a model with a bug it is meant to catch (see tests/meta/targeted_mutants.py).

Every case runs the suite's property in a fresh pytest process with the mutant plugged in exactly
as the README says (`--model module:factory`) and expects it to fail with the suite's message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KILLS = [
    ("trace_q_tokens_first", "test_shapes.py", "test_every_traced_stage_has_its_formula_shape"),
    (
        "rms_norm_over_batch",
        "test_shapes.py",
        "test_logits_are_t_by_vocab_for_a_sequence_and_b_by_t_by_vocab_for_a_batch",
    ),
    ("trace_q_tokens_first", "test_shapes.py", "test_gpt2_124m_on_5_tokens_reproduces_the_articles_table"),
    ("rope_interleaved_on_rotate_half", "test_rope.py", "test_rope_preserves_the_norm_of_every_pair_and_head_vector"),
    ("rope_positions_from_1", "test_rope.py", "test_rope_is_the_identity_at_position_0"),
    (
        "rope_theta_1000",
        "test_rope.py",
        "test_rope_turns_pair_i_at_position_p_by_p_times_theta_to_the_minus_2i_over_d_head",
    ),
    ("rope_positions_from_1", "test_rope.py", "test_rope_rotations_compose_r_m_times_r_n_is_r_m_plus_n"),
    ("rope_missing_on_k", "test_rope.py", "test_rope_layer_0_scores_depend_only_on_the_distance_m_minus_n"),
    (
        "rope_interleaved_on_rotate_half",
        "test_rope.py",
        "test_rope_interleaved_and_rotate_half_pairings_give_the_same_scores",
    ),
    ("mask_missing", "test_causal_masking.py", "test_logits_before_an_edited_token_do_not_change"),
    ("attend_only_to_self", "test_causal_masking.py", "test_logits_from_an_edited_token_on_do_change"),
    (
        "mask_after_softmax",
        "test_causal_masking.py",
        "test_attention_probabilities_are_zero_above_the_diagonal_and_rows_sum_to_1",
    ),
    ("chunk_appended_twice", "test_kv_cache.py", "test_decoding_in_chunks_gives_the_logits_of_one_full_pass"),
    ("rms_norm_over_batch", "test_kv_cache.py", "test_decoding_a_batch_in_chunks_gives_the_logits_of_one_full_pass"),
    ("stale_cache", "test_kv_cache.py", "test_a_cache_stays_usable_after_decoding_from_it"),
    ("norm_eps_1e_6", "test_agreement.py", "test_logits_agree_with_the_oracle"),
    ("gelu_erf", "test_agreement.py", "test_logits_agree_with_the_oracle"),
    ("gqa_modulo", "test_agreement.py", "test_logits_agree_with_the_oracle"),
    ("rope_positions_from_1", "test_agreement.py", "test_every_traced_stage_agrees_with_the_oracle"),
    ("rms_norm_over_batch", "test_agreement.py", "test_batch_rows_equal_the_rows_run_alone"),
    ("ignores_attention_mask", "test_agreement.py", "test_left_padded_rows_with_a_mask_equal_the_rows_run_alone"),
    ("drifting", "test_agreement.py", "test_the_same_input_gives_the_same_output"),
    ("softmax_without_max", "test_robustness.py", "test_large_logit_weights_give_finite_logits_within_tolerance"),
    (
        "gpt2_positions_clipped_at_128",
        "test_robustness.py",
        "test_error_stays_within_tolerance_up_to_the_context_limit",
    ),
    ("first_row_greedy", "test_greedy.py", "test_greedy_tokens_are_the_oracle_argmax_up_to_ties"),
]


def run_property(mutant: str, module: str, test: str) -> subprocess.CompletedProcess[str]:
    """pytest on one property with one mutant plugged in; the ci profile, no cache files."""
    command = [
        sys.executable, "-m", "pytest", f"properties/{module}::{test}", "--model", f"tests.meta.targeted_mutants:{mutant}",
        "-x", "-q", "-p", "no:cacheprovider", "--hypothesis-profile", "ci", "-m", "slow or not slow",
    ]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize(("mutant", "module", "test"), KILLS, ids=[f"{m}-{t}" for m, _, t in KILLS])
def test_property_fails_for_a_model_with_the_bug_it_targets(mutant: str, module: str, test: str) -> None:
    result = run_property(mutant, module, test)
    output = result.stdout + result.stderr
    assert result.returncode == 1, f"{test} did not fail for mutant {mutant} (exit {result.returncode}):\n{output}"
    assert f"model 'tests.meta.targeted_mutants:{mutant}'" in output, f"the failure does not name the model:\n{output}"
