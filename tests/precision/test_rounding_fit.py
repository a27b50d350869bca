"""The decision behind a precision hint (`rounding_fit`, `closest`) on errors of known shapes: a
model's error fits a class's rounding when it is the emulation's size at every position, shares
its direction, and is the emulation's size at every traced stage; a bug's error, concentrated,
absent somewhere, unrelated in direction, or starting at one stage, does not fit."""

from __future__ import annotations

import numpy as np
import pytest

from verifier.analysis.precision import BFLOAT16, FLOAT16, TF32, closest, position_errors, rounding_fit

RNG = np.random.default_rng(0)
EXPECTED = RNG.standard_normal((12, 50))  # logits [T, V]
ROUNDING = 1e-3 * RNG.standard_normal((12, 50))  # the emulation's error
EMULATED = EXPECTED + ROUNDING
OWN = 1e-3 * RNG.standard_normal((12, 50))  # an independent draw of the same size
STAGES = {"embed": 1e-3, "layers.0.q": 2e-3, "layers.0.attn_out": 3e-3, "logits": 4e-3}


def _fit(error: np.ndarray, stages: dict[str, float] | None = None):  # type: ignore[no-untyped-def]
    return rounding_fit(BFLOAT16, EXPECTED + error, EXPECTED, EMULATED, stages, None if stages is None else STAGES)


def test_an_error_like_the_emulation_s_fits_with_its_size_and_direction() -> None:
    fit = _fit(ROUNDING + OWN)  # the shared weight rounding and its own activations' rounding
    assert fit is not None and fit.precision is BFLOAT16
    assert fit.median == pytest.approx(np.sqrt(2), rel=0.2) and fit.shared == pytest.approx(np.sqrt(0.5), abs=0.1)
    assert fit.distance == pytest.approx(1.0, rel=0.2)
    assert _fit(ROUNDING + OWN, {s: 2 * e for s, e in STAGES.items()}) is not None


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(np.where(np.arange(12)[:, None] == 5, 20.0, 1.0) * (ROUNDING + OWN), id="one-position-far-above"),
        pytest.param(np.where(np.arange(12)[:, None] == 0, 0.0, 1.0) * (ROUNDING + OWN), id="none-at-position-0"),
        pytest.param((ROUNDING + OWN) / 8, id="a-finer-class-s-size"),
        pytest.param(8 * (ROUNDING + OWN), id="a-coarser-size"),
        pytest.param(OWN, id="unrelated-in-direction"),
        pytest.param(np.full_like(OWN, np.nan), id="not-finite"),
    ],
)
def test_an_error_that_is_not_the_emulation_s_does_not_fit(error: np.ndarray) -> None:
    assert _fit(error) is None


@pytest.mark.parametrize(
    "stages",
    [
        pytest.param({**STAGES, "embed": 1e-8}, id="float32-exact-before-the-bug"),
        pytest.param({**STAGES, "layers.0.attn_out": 1.0}, id="one-stage-far-above"),
        pytest.param({**STAGES, "layers.0.q": np.inf}, id="a-stage-of-the-wrong-shape"),
        pytest.param({"layers.9.q": 1e-3}, id="no-stage-in-common"),
    ],
)
def test_logits_like_rounding_with_a_trace_unlike_it_do_not_fit(stages: dict[str, float]) -> None:
    assert _fit(ROUNDING + OWN, stages) is None


def test_the_nearest_emulation_decides_between_classes_that_both_fit() -> None:
    """tf32 and float16 share eps: a model on float16's emulation fits both and gets float16."""
    tf32 = EXPECTED + ROUNDING + 0.8 * OWN
    model = EMULATED + 0.3 * OWN
    fits = [rounding_fit(p, model, EXPECTED, e) for p, e in ((TF32, tf32), (FLOAT16, EMULATED))]
    assert all(f is not None for f in fits)
    best = closest(fits)
    assert best is not None and best.precision is FLOAT16
    assert closest([None, None]) is None


def test_position_errors_are_per_row_of_the_last_axis() -> None:
    assert position_errors(np.ones((2, 3, 4)), np.zeros((2, 3, 4))).shape == (6,)
    assert position_errors(np.array([3.0, 4.0]), np.zeros(2)).tolist() == [pytest.approx(np.sqrt(12.5))]
