"""The precision classes (`verifier.analysis.precision`): float32 is the existing policy unchanged,
the other classes the same form in their own eps and depth, declared by name or object, and Q8_0's
oracle weights are what the version-2 file dequantizes to."""

from __future__ import annotations

import math

import numpy as np
import pytest

from verifier.analysis import tolerance
from verifier.analysis.precision import (
    BFLOAT16,
    CLASSES,
    FLOAT16,
    FLOAT32,
    Q8_0,
    TF32,
    UnknownPrecision,
    q8_0,
    resolve,
)
from verifier.formats.llama2c import read_llama2c, version2_precision, write_llama2c
from verifier.model.weights import init_weights
from verifier.properties.strategies import RICH_LLAMA
from verifier.reference import NumpyModel

EXPECTED = np.array([-4.0, 2.0, 0.5])
NEIGHBOUR = EXPECTED + np.array([0.0, 1e-3, 0.0])


def test_float32_is_the_existing_policy() -> None:
    for layers in (1, 4):
        assert FLOAT32.bound(EXPECTED, [NEIGHBOUR], rope_positions=7, n_layers=layers) == tolerance.bound(
            EXPECTED, [NEIGHBOUR], rope_positions=7
        )
    assert FLOAT32.identity_bound(EXPECTED, rope_positions=7) == tolerance.bound(EXPECTED, rope_positions=7)


def test_a_class_bound_is_its_eps_times_its_floor_and_depth_plus_its_conditioning() -> None:
    floor = BFLOAT16.eps * BFLOAT16.ulps * 4.0
    assert BFLOAT16.bound(EXPECTED) == pytest.approx(floor)
    assert BFLOAT16.bound(EXPECTED, n_layers=16) == pytest.approx(2 * floor)  # sqrt(16 / 4)
    assert BFLOAT16.bound(EXPECTED, [NEIGHBOUR]) == pytest.approx(floor + BFLOAT16.conditioning * 1e-3)
    # RoPE angles are float32 in every class: the positions add eps32 each, not the class's eps.
    assert BFLOAT16.bound(EXPECTED, rope_positions=100) - BFLOAT16.bound(EXPECTED) == pytest.approx(
        tolerance.EPS32 * 100 * 4.0
    )
    assert FLOAT16.bound(EXPECTED) < BFLOAT16.bound(EXPECTED) / 4  # three more mantissa bits


def test_a_class_is_declared_by_name_or_object_and_an_unknown_name_lists_the_classes() -> None:
    assert resolve("bfloat16") is BFLOAT16 and resolve(Q8_0) is Q8_0
    assert set(CLASSES) == {"float32", "tf32", "float16", "bfloat16", "q8_0"}
    with pytest.raises(UnknownPrecision, match="'int4' is not a precision class; known: float32, tf32"):
        resolve("int4")


def test_q8_0_oracle_weights_are_the_version_2_file_s_dequantized_weights(tmp_path) -> None:
    config = RICH_LLAMA.config
    weights = init_weights(config, seed=2, scale=0.3)
    write_llama2c(tmp_path / "m.bin", config, weights, version=2)
    from_file = read_llama2c(tmp_path / "m.bin").weights
    ours = version2_precision(config).oracle_weights(weights)
    assert version2_precision(config).label == "q8_0 (groups of 8, float32 scales)"
    assert all(np.array_equal(ours[name], from_file[name]) for name in from_file)
    assert Q8_0.oracle_weights(weights) is not weights and FLOAT32.oracle_weights(weights) is weights
    assert q8_0(64, float16_scales=False).key != Q8_0.key


def test_float16_calls_a_case_beyond_its_range_out_of_range() -> None:
    config = RICH_LLAMA.config
    tokens = RICH_LLAMA.token_array()
    small = NumpyModel(config, init_weights(config, seed=1, scale=0.3), np.float64).trace(tokens)
    large = NumpyModel(config, init_weights(config, seed=1, scale=30.0), np.float64).trace(tokens)
    assert FLOAT16.out_of_range(small, config.d_head) is None
    reason = FLOAT16.out_of_range(large, config.d_head)
    assert reason is not None and "float16's largest value 65504" in reason
    assert BFLOAT16.out_of_range(large, config.d_head) is None and math.isinf(BFLOAT16.max_value)


def test_bfloat16_and_float16_neighbours_pull_scores_toward_near_ties_and_the_others_do_not() -> None:
    """The nudged oracles of classes that hold scores in their format move each score toward its
    row's largest by eps |score| (seen keys only): 511.5 and 514.9 in bfloat16 swap, as rounding can
    make them; float32, tf32 and q8_0 hold scores in float32 and keep the oracle's scores."""
    config, weights = RICH_LLAMA.config, RICH_LLAMA.weights()
    tokens = RICH_LLAMA.token_array()[:3]
    pull = BFLOAT16.neighbour(config, weights, seed=0).rounding
    assert pull is not None and pull.rounds("layers.0.scores") and not pull.rounds("layers.0.probs")
    scores = np.array([[[511.5, 514.9, 900.0], [100.0, 200.0, 400.0]]])  # [1, T=2, S=3]: key 2 is unseen by row 0
    pulled = pull.activations(scores)
    assert pulled[0, 0, 0] > pulled[0, 0, 1]  # the near-tie reversed, toward the seen largest, not 900
    assert np.allclose(pulled[0, 1], [100 * (1 + 2**-7), 200 * (1 + 2**-7), 400 * (1 - 2**-7)])
    assert FLOAT16.neighbour(config, weights, seed=0).rounding is not None
    for p in (FLOAT32, TF32, Q8_0):
        neighbour = p.neighbour(config, weights, seed=0)
        assert neighbour.rounding is None
        assert np.array_equal(
            neighbour.logits(tokens), NumpyModel(config, p.perturbed(weights, 0), np.float64).logits(tokens)
        )
