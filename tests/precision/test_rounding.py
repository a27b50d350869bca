"""The reference's number formats (`verifier.reference.rounding`): bfloat16 and float16 rounded
exactly as torch rounds them, TF32 and Q8_0 as their definitions say, and the reference at a class
rounding its weights and every stage the class rounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verifier.formats.llama2c import _quantize
from verifier.model.weights import init_weights
from verifier.properties.pinned_cases import RICH_GPT2, RICH_LLAMA
from verifier.reference import NumpyModel
from verifier.reference import rounding as R

EDGES = np.array(
    [0.0, -0.0, 1.0, np.inf, -np.inf, 3.4e38, 65504.0, 65520.0, 1e-40, 1 + 2**-8, 1 + 3 * 2**-8], np.float32
)


def _random_floats(seed: int, n: int = 100_000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n) * np.exp(rng.uniform(-40, 40, n))
    return np.concatenate([EDGES, values]).astype(np.float32)


@settings(max_examples=5)
@given(seed=st.integers(0, 2**16))
def test_bfloat16_and_float16_round_as_torch_does(seed: int) -> None:
    x = _random_floats(seed)
    for ours, dtype in ((R.to_bfloat16, torch.bfloat16), (R.to_float16, torch.float16)):
        theirs = torch.from_numpy(x).to(dtype).float().numpy()
        assert np.array_equal(ours(x), theirs, equal_nan=True), f"{ours.__name__} differs from torch's {dtype}"


def test_nan_stays_nan_and_ties_go_to_even() -> None:
    assert np.isnan(R.to_bfloat16(np.array([np.nan], np.float32)))[0]
    assert np.isnan(R.to_tf32(np.array([np.nan], np.float32)))[0]
    # TF32 keeps 10 mantissa bits: 1 + 2^-11 is half-way between 1 and 1 + 2^-10 (ties to even, 1), and
    # 1 + 3 * 2^-11 half-way between 1 + 2^-10 and 1 + 2^-9 (ties to even, 1 + 2^-9).
    halfway = np.array([1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-11 + 2**-20], np.float32)
    assert R.to_tf32(halfway).tolist() == [1.0, 1 + 2**-9, 1 + 2**-10]


def test_q8_0_is_llama2c_s_and_llama_cpp_s_quantization_and_a_partial_group_gets_its_own_scale() -> None:
    w = np.random.default_rng(0).standard_normal((6, 128)).astype(np.float32)
    w[0, :32] = [127.0, *(np.arange(31) + 0.5)]  # scale 1, values half-way between steps: the ties differ
    values, scales = _quantize(w, 64)
    assert np.array_equal(R.q8_0(w, 64), (values.reshape(-1, 64) * scales[:, None]).reshape(w.shape))
    gguf = pytest.importorskip("gguf", reason="llama.cpp's gguf package (the gguf extra) is not installed")
    Q8_0 = gguf.GGMLQuantizationType.Q8_0
    theirs = gguf.quants.dequantize(gguf.quants.quantize(w, Q8_0), Q8_0)
    assert np.array_equal(R.q8_0(w, 32, float16_scales=True), theirs)
    row = np.array([1.0, -0.5, 0.25, 100.0, 3.0], np.float32)  # groups [1, -0.5, 0.25, 100] and [3]
    assert R.q8_0(row, 4)[-1] == 3.0  # its own scale 3 / 127: 3 is exact, not rounded by the 100 group's
    assert R.q8_0(row, 4)[2] == 0.0  # 0.25 / (100 / 127) rounds to 0


def _q4_0_adversarial_blocks() -> np.ndarray:
    """Blocks [6, 32] where a port of Q4_0 goes wrong: all zero (d = 0); codes at a tie (x / d + 8.5 an
    integer: floor, not round to even); a sum x (1 / d) + 8.5 that float32 rounds up to an integer;
    a block whose max is negative (d > 0, the codes run the other way); +-m both present (the first
    decides d's sign); a max whose float16 scale is inexact."""
    blocks = np.zeros((6, 32), np.float32)
    blocks[1] = [-8.0, *(np.arange(31) % 16 - 7.5)]  # d = 1: every x / d + 8.5 is an integer
    blocks[2] = [-8.0, np.nextafter(np.float32(0.5), np.float32(0.0)), *np.linspace(-7, 7, 30)]  # 8.99999997 -> 9
    blocks[3] = [*np.linspace(-1, 0.9, 31), -3.0]  # the max is negative and last
    blocks[4] = [2.0, -2.0, *np.linspace(-1.9, 1.9, 30)]  # |max| tied: the first, +2, gives d = -0.25
    blocks[5] = np.linspace(-0.1, 1.2345678, 32)  # d = 1.2345678 / -8, not a float16
    return blocks


def test_q4_0_is_gguf_s_bit_for_bit_and_a_partial_block_gets_its_own_scale() -> None:
    """The reference's Q4_0, written from ggml's quantize_row_q4_0_ref, against gguf-py's (the
    independent implementation llama.cpp's converter uses), bit for bit (-0 included)."""
    gguf = pytest.importorskip("gguf", reason="llama.cpp's gguf package (the gguf extra) is not installed")
    Q4_0 = gguf.GGMLQuantizationType.Q4_0
    rng = np.random.default_rng(0)
    random = rng.standard_normal((64, 256)) * np.exp(rng.uniform(-7, 11, (64, 1)))  # scales float16 holds
    for w in (random.astype(np.float32), _q4_0_adversarial_blocks()):
        theirs = gguf.quants.dequantize(gguf.quants.quantize(w, Q4_0), Q4_0)
        assert np.array_equal(R.q4_0(w).view(np.uint32), theirs.view(np.uint32))
        assert np.array_equal(R.q4_0(np.ascontiguousarray(w.T), axis=0), theirs.T)  # GPT-2's [d_in, d_out]
    assert R.q4_0(_q4_0_adversarial_blocks()[2:3])[0, 1] == 1.0  # float32 sums 0.49999997 + 8.5 to 9: code 9
    row = np.array([100.0, *np.zeros(31), 1.0, 3.0], np.float32)  # a block of 32, then one of 2
    assert R.q4_0(row)[-1] == 3.0  # its own scale 3 / -8: 3 is exact, not rounded to 0 by the 100 block's


def test_the_reference_at_a_class_rounds_its_weights_and_every_stage_it_names() -> None:
    for case in (RICH_LLAMA, RICH_GPT2):
        c, w = case.config, init_weights(case.config, seed=1, scale=0.3)
        model = NumpyModel(c, w, np.float32, rounding=R.BFLOAT16)
        assert all(np.array_equal(v, R.to_bfloat16(v)) for v in model.weights.values())
        trace = model.trace(case.token_array())
        assert all(np.array_equal(v, R.to_bfloat16(v)) for v in trace.values()), "a stage left unrounded"
        tf32 = NumpyModel(c, w, np.float32, rounding=R.TF32).trace(case.token_array())
        rounded = {s for s, v in tf32.items() if np.array_equal(v, R.to_tf32(v))}
        assert {s for s in tf32 if R.TF32.rounds(s)} <= rounded
        assert "logits" not in rounded  # TF32 rounds the inputs of products, not their outputs


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([1e-3, 0.3, 10.0]))
def test_a_file_s_weight_stands_for_the_original_only_where_it_is_a_rounding_of_it(seed: int, scale: float) -> None:
    """`rounding.file_rounding`: a 16-level rounding (Q4_0's, gguf's bit for bit) and Q8_0's are roundings
    of the weight; the same with two rows swapped (a writer's misplaced head), or scaled by 1.5, are not,
    and the oracle keeps the original weight."""
    w = np.random.default_rng(seed).normal(scale=scale, size=(8, 64)).astype(np.float32)
    moved = R.q4_0(w)[[1, 0, *range(2, 8)]]
    assert R.is_a_rounding_of(R.q4_0(w), w, axis=1) and R.is_a_rounding_of(R.q8_0(w, 32), w, axis=1)
    assert not R.is_a_rounding_of(moved, w, axis=1) and not R.is_a_rounding_of(1.5 * R.q4_0(w), w, axis=1)
    rounding = R.file_rounding("q4_k_m", {"model.layers.0.mlp.up_proj.weight": moved}, 256)
    assert rounding.weights("model.layers.0.mlp.up_proj.weight", w) is w
    rounding = R.file_rounding("q4_k_m", {"model.layers.0.mlp.up_proj.weight": R.q4_0(w)}, 256)
    assert np.array_equal(rounding.weights("model.layers.0.mlp.up_proj.weight", w), R.q4_0(w))
