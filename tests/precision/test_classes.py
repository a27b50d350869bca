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
    Q4_0,
    Q8_0,
    TF32,
    UnknownPrecision,
    q8_0,
    resolve,
)
from verifier.formats.llama2c import read_llama2c, write_llama2c
from verifier.model.weights import init_weights
from verifier.plugin.command.files import version2_precision
from verifier.properties.pinned_cases import RICH_LLAMA
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
    assert set(CLASSES) == {"float32", "tf32", "float16", "bfloat16", "q8_0", "q4_0"}
    assert resolve("q4_0") is Q4_0 and Q4_0.quantized and Q4_0.eps == Q8_0.eps
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


def test_bfloat16_and_float16_have_a_neighbour_with_near_ties_closed_and_the_others_do_not() -> None:
    """Classes that hold scores in their format get a fourth neighbour: the oracle, on its own
    weights, with each score moved toward its row's largest seen score by eps (|score| + |q| |k| /
    d_head): 511.5 and 514.9 swap in bfloat16, as rounding can make them. float32, tf32 and q8_0
    hold scores in float32: the nudged oracles and the emulation only."""
    config, weights = RICH_LLAMA.config, RICH_LLAMA.weights()
    tokens = RICH_LLAMA.token_array()[:3]
    *nudged, emulation, ties = BFLOAT16.neighbours(config, weights)
    assert ties.rounding is not None and ties.rounding.scores is not None and not ties.rounding.rounds("layers.0.q")
    assert [m.rounding for m in nudged] == [None, None] and emulation.rounding is BFLOAT16.rounding
    moved, oracle = ties.trace(tokens), NumpyModel(config, weights, np.float64).trace(tokens)
    assert np.array_equal(moved["layers.0.q_rope"], oracle["layers.0.q_rope"])  # the oracle's weights, unnudged
    assert not np.array_equal(moved["layers.0.scores"], oracle["layers.0.scores"])
    scores = np.array([[[[511.5, 514.9, 900.0], [100.0, 200.0, 400.0]]]])  # [B=1, h=1, T=2, S=3]
    q = np.zeros((1, 1, 2, 4))  # |q| = 0: only the scores' own size counts here
    k = np.ones((1, 1, 3, 4))
    allowed = np.array([[True, True, False], [True, True, True]])  # key 2 is unseen by row 0
    pulled = ties.rounding.scores(scores, q, k, allowed)[0, 0]
    assert pulled[0, 0] > pulled[0, 1]  # the near-tie reversed, toward the seen largest, not 900
    assert np.allclose(pulled[1], [100 * (1 + 2**-7), 200 * (1 + 2**-7), 400 * (1 - 2**-7)])
    q[..., 0] = 8.0  # |q| |k| / d_head = 8 * 2 / 4: each score moves 4 eps further
    assert np.allclose(
        ties.rounding.scores(scores, q, k, allowed)[0, 0, 1] - pulled[1], [4 * 2**-7, 4 * 2**-7, -4 * 2**-7]
    )
    assert len(FLOAT16.neighbours(config, weights)) == 4
    for p in (FLOAT32, TF32, Q8_0, Q4_0):
        *nudged, emulation = p.neighbours(config, weights)
        assert len(nudged) == 2 and all(m.rounding is None for m in nudged)
        assert np.array_equal(
            nudged[0].logits(tokens), NumpyModel(config, p.perturbed(weights, 0), np.float64).logits(tokens)
        )
