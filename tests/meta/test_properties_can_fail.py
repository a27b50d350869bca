"""Every property can fail: each one fails for a catalog mutant with the bug it is meant to catch.

Each case runs the one property in a fresh process with the mutant plugged in as the docs say
(`verifier check --model module:factory`, pytest underneath) and expects that property to fail.
"""

from __future__ import annotations

import pytest

from tests.meta.suite_runs import DOCS, mutant_spec, run_suite

pytestmark = pytest.mark.slow

# (property module, property, a mutant whose bug it catches); one catch a line
CATCHES = [
    ("test_shapes.py", "test_every_traced_stage_has_its_formula_shape", "TraceHeadsAxisSwapped"),
    ("test_shapes.py", "test_logits_are_t_by_vocab_for_a_sequence_and_b_by_t_by_vocab_for_a_batch", "RMSNormOverBatch"),
    ("test_shapes.py", "test_gpt2_124m_on_5_tokens_reproduces_the_articles_table", "TraceHeadsAxisSwapped"),
    ("test_rope.py", "test_rope_preserves_the_norm_of_every_pair_and_head_vector", "RopeInterleavedOnRotateHalf"),
    ("test_rope.py", "test_rope_is_the_identity_at_position_0", "RopePositionsFromOne"),
    (
        "test_rope.py",
        "test_rope_turns_pair_i_at_position_p_by_p_times_theta_to_the_minus_2i_over_d_head",
        "RopeTheta1000",
    ),
    ("test_rope.py", "test_rope_rotations_compose_r_m_times_r_n_is_r_m_plus_n", "RopePositionsFromOne"),
    ("test_rope.py", "test_rope_layer_0_scores_depend_only_on_the_distance_m_minus_n", "RopeMissingOnK"),
    (
        "test_rope.py",
        "test_rope_interleaved_and_rotate_half_pairings_give_the_same_scores",
        "RopeInterleavedOnRotateHalf",
    ),
    ("test_causal_masking.py", "test_logits_before_an_edited_token_do_not_change", "MaskMissing"),
    ("test_causal_masking.py", "test_logits_from_an_edited_token_on_do_change", "MaskOnlyDiagonal"),
    (
        "test_causal_masking.py",
        "test_attention_probabilities_are_zero_above_the_diagonal_and_rows_sum_to_1",
        "MaskAfterSoftmax",
    ),
    ("test_kv_cache.py", "test_decoding_in_chunks_gives_the_logits_of_one_full_pass", "CacheChunkAppendedTwice"),
    ("test_kv_cache.py", "test_decoding_a_batch_in_chunks_gives_the_logits_of_one_full_pass", "RMSNormOverBatch"),
    ("test_kv_cache.py", "test_a_cache_stays_usable_after_decoding_from_it", "CacheStaleReuse"),
    ("test_kv_cache.py", "test_decoding_in_chunks_gives_the_logits_of_one_full_pass", "CacheChunkMaskNotOffset"),
    ("test_kv_cache.py", "test_two_sequences_decoded_alternately_each_give_their_own_full_pass", "CacheKeptInModel"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "NormEpsTooSmall"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "GeluExactErf"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "GQAModuloMapping"),
    ("test_agreement.py", "test_every_traced_stage_agrees_with_the_oracle", "RopePositionsFromOne"),
    ("test_agreement.py", "test_batch_rows_equal_the_rows_run_alone", "RMSNormOverBatch"),
    ("test_agreement.py", "test_left_padded_rows_with_a_mask_equal_the_rows_run_alone", "AttentionMaskIgnored"),
    ("test_agreement.py", "test_the_same_input_gives_the_same_output", "StateLeaksBetweenCalls"),
    ("test_robustness.py", "test_large_logit_weights_give_finite_logits_within_tolerance", "SoftmaxNoMaxShift"),
    ("test_robustness.py", "test_error_stays_within_tolerance_up_to_the_context_limit", "PositionTableTruncated"),
    ("test_greedy.py", "test_greedy_tokens_are_the_oracle_argmax_up_to_ties", "GreedyFromFirstRow"),
    # what the families of issue 26 add
    (
        "test_sliding_window.py",
        "test_editing_the_token_at_t_minus_w_leaves_t_unchanged_and_at_t_minus_w_plus_1_changes_it",
        "WindowOffByOne",
    ),
    (
        "test_sliding_window.py",
        "test_editing_the_token_at_t_minus_w_leaves_t_unchanged_and_at_t_minus_w_plus_1_changes_it",
        "LayerTypesSwapped",
    ),
    (
        "test_sliding_window.py",
        "test_editing_the_token_at_t_minus_w_leaves_t_unchanged_and_at_t_minus_w_plus_1_changes_it",
        "WindowOneKeyShort",
    ),
    (
        "test_sliding_window.py",
        "test_a_window_at_least_the_sequence_length_equals_full_causal_attention",
        "WindowedLayersUncapped",
    ),
    (
        "test_sliding_window.py",
        "test_decoding_past_the_window_with_the_cache_gives_the_logits_of_one_full_pass",
        "WindowIgnoredWhileDecoding",
    ),
    ("test_softcap.py", "test_every_logit_lies_within_the_final_softcap", "FinalSoftcapMissing"),
    ("test_softcap.py", "test_every_attention_score_lies_within_the_attention_softcap", "AttentionSoftcapMissing"),
    ("test_rope_scaling.py", "test_logits_past_the_original_context_agree_with_the_oracle", "RopeScalingOnEveryBand"),
    (
        "test_rope.py",
        "test_rope_turns_pair_i_at_position_p_by_p_times_theta_to_the_minus_2i_over_d_head",
        "RopeScalingOnEveryBand",
    ),
    ("test_rope_scaling.py", "test_logits_past_the_original_context_agree_with_the_oracle", "RopeScalingIgnored"),
    ("test_qk_norm.py", "test_scaling_w_q_or_w_k_by_c_leaves_a_qk_normed_model_unchanged", "QKNormSkipped"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "KeyBiasDropped"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "ValueBiasDropped"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "OutputBiasAdded"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "QKNormAfterRope"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "GemmaNormWithoutPlusOne"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "GeGLUWithErfGelu"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "QueryScaleIgnored"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "SandwichNormMissing"),
    ("test_causal_masking.py", "test_logits_before_an_edited_token_do_not_change", "SoftcapAfterMask"),
    # what the families of issue 27 add
    ("test_moe.py", "test_identical_experts_make_the_moe_block_one_dense_mlp", "RoutingNotRenormalised"),
    ("test_moe.py", "test_identical_experts_make_the_moe_block_one_dense_mlp", "ExpertCapacityDropsTokens"),
    ("test_moe.py", "test_permuting_the_experts_with_the_router_rows_leaves_the_output_unchanged", "ExpertBySlot"),
    ("test_moe.py", "test_each_token_uses_exactly_top_k_experts", "TopOneInsteadOfTopK"),
    ("test_agreement.py", "test_batch_rows_equal_the_rows_run_alone", "ExpertCapacityDropsTokens"),
    (
        "test_partial_rotary.py",
        "test_partial_rotary_passes_the_dimensions_past_rotary_dim_unchanged",
        "PartialRotaryWholeHead",
    ),
    (
        "test_partial_rotary.py",
        "test_partial_rotary_passed_part_ignores_m_minus_n_and_rotated_part_is_relative",
        "PartialRotaryWholeHead",
    ),
    ("test_fused_layout.py", "test_swapping_the_blocks_of_a_fused_matrix_changes_the_output", "FusedGateUpNotLoaded"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "RoutingRenormalisedWhereNot"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "RouterSoftmaxWrongAxis"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "SharedExpertUngated"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "FusedGateUpSwapped"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "FusedQKSwapped"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "InterleavedPairsAsRotateHalf"),
    ("test_agreement.py", "test_logits_agree_with_the_oracle", "TopKLogitsThenSoftmax"),
]


@pytest.mark.parametrize(("module", "test", "mutant"), CATCHES, ids=[f"{t}-{m}" for _, t, m in CATCHES])
def test_property_fails_for_a_model_with_the_bug_it_targets(module: str, test: str, mutant: str, tmp_path) -> None:
    report = run_suite(mutant_spec(mutant), tmp_path, "-k", test)
    outcomes = {r.property: r for r in report.results}
    result = outcomes.get(f"{module}::{test}")
    assert result is not None, f"{module}::{test} did not run; ran: {sorted(outcomes)}"
    assert result.outcome == "fail", (
        f"{test} did not fail for {mutant} ({DOCS[mutant]}): {result.outcome} {result.detail}"
    )
