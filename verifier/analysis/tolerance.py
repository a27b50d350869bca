"""The tolerance policy: how far a float32 model's outputs may sit from the float64 oracle.

Policy, for an array the oracle computes as `expected`:

    max |actual - expected| <= eps32 * (ULPS + rope_positions) * max |expected|
                               + CONDITIONING * max_n max |neighbour_n - expected|

**Relative floor.** Floating point is scale-free: a float32 pass rounds every product and sum at
relative precision eps32, so a correct model's error is proportional to the magnitude of what it
computes. ULPS = 128 eps32 (1.5e-5 relative) is 4x the worst well-conditioned error measured
(32 eps32, transformers and the float32 reference, scales 0.003..0.3, up to 1,024 tokens), and a
wrong constant moves logits by far more: eps 1e-6 for 1e-5 by about 1e-2 at GPT-2's init scale,
the erf GELU for the tanh one by about 1e-4 at scale 0.3, unbiased variance by 1/d_model.

**RoPE positions.** A float32 implementation computes the angle pos * theta^(-2i/d_head) with a
relative rounding of eps32, so at position `pos` the fastest pair turns up to pos * eps32 radians
off and a rotated q or k moves by that fraction of its norm; RoPE models get `rope_positions`
(the largest position) extra eps32. The oracle computes angles in float64.

**Conditioning.** With large weights, attention is nearly one-hot and a float32 rounding can tip
which key wins: correct models then land thousands of eps32 away from the oracle (measured up to
1e5 eps32 at weight scale 10 and 1,024 tokens), and no fixed multiple of eps32 is both safe and
tight. The policy measures each case's sensitivity instead, with `neighbours`: the same quantity
computed by the oracle with weights perturbed at float32 precision (`perturbed`) and by a correct
float32 implementation (the reference in float32). A correct model's error measured at most 5.4x
the larger of the two over 240 cases at weight scales 0.003..10 (most below 1x); two perturbed
neighbours and CONDITIONING = 32 leave about 6x room for heavier tails in long thorough runs.
On well-conditioned cases the neighbours sit within a few eps32 and the floor decides.

This is the float32 precision class; `verifier.analysis.precision` gives the same form to the
narrower classes (tf32, float16, bfloat16, q8_0, q4_0), each in its own eps.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from verifier.model.weights import LazyWeights, WeightMap

EPS32 = float(np.finfo(np.float32).eps)
ULPS = 128
CONDITIONING = 32


def perturb(name: str, w: np.ndarray, seed: int = 0, eps: float = EPS32) -> np.ndarray:
    """Weight `name` in float64, each entry times (1 + eps z) with z ~ N(0, 1): a float32-sized nudge (or,
    with another `eps`, one of that format's size). z is drawn from (seed, name), so a weight gets the
    same nudge whether the set is held or streamed."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return np.asarray(w, np.float64) * (1.0 + eps * rng.standard_normal(np.shape(w)))


def perturbed(weights: WeightMap, seed: int = 0, eps: float = EPS32) -> WeightMap:
    """Every weight perturbed (`perturb`): a dict, or for `LazyWeights` a view perturbing each on lookup."""
    if isinstance(weights, LazyWeights):
        return weights.map(lambda name, w: perturb(name, w, seed, eps))
    return {name: perturb(name, w, seed, eps) for name, w in weights.items()}


def max_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| in float64 (inf if any entry of `actual` is NaN)."""
    diff = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))
    return float("inf") if np.isnan(diff).any() else float(diff.max(initial=0.0))


def bound(
    expected: np.ndarray,
    neighbours: Sequence[np.ndarray] = (),
    *,
    rope_positions: int = 0,
    ulps: float = ULPS,
    eps: float = EPS32,
    conditioning: float = CONDITIONING,
    scale: np.ndarray | None = None,
) -> float:
    """The largest |actual - expected| the policy allows (see the module docstring):
    (eps ulps + eps32 rope_positions) max |expected| + conditioning max_n |neighbour_n - expected|,
    with max |scale| in place of max |expected| where given (an operation whose rounding grows with
    more than its result: a dot product's terms, tanh GELU's input).
    The defaults are float32's; `verifier.analysis.precision` gives other formats' `eps`, `ulps`
    and `conditioning` (RoPE angles stay float32 in every format: see there)."""
    size = float(np.max(np.abs(expected if scale is None else scale), initial=0.0))
    spread = max((max_error(n, expected) for n in neighbours), default=0.0)
    return (eps * ulps + EPS32 * rope_positions) * size + conditioning * spread


@dataclass(frozen=True)
class Comparison:
    """An array compared with the oracle: the largest error, where it is, and the bound."""

    max_error: float
    bound: float
    index: tuple[int, ...]

    @property
    def ratio(self) -> float:
        """max error / bound: at most 1 within the policy."""
        if self.bound > 0:
            return self.max_error / self.bound
        return 0.0 if self.max_error == 0 else float("inf")

    @property
    def ok(self) -> bool:
        return self.ratio <= 1.0


def worst(actual: np.ndarray, expected: np.ndarray) -> tuple[float, tuple[int, ...]]:
    """The largest |actual - expected| (inf where `actual` is NaN) and its index; shapes must match."""
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if a.shape != e.shape:
        raise ValueError(f"cannot compare shape {list(a.shape)} with the expected {list(e.shape)}")
    diff = np.where(np.isnan(a), np.inf, np.abs(a - e))
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape)) if diff.size else ()
    return (float(diff[index]) if diff.size else 0.0), index


def compare(
    actual: np.ndarray,
    expected: np.ndarray,
    neighbours: Sequence[np.ndarray] = (),
    *,
    rope_positions: int = 0,
    slack: float = 1.0,
) -> Comparison:
    """`actual` against `expected` (same shape) under the float32 policy, the bound times `slack`.

    `slack` = 2 compares two float32 computations of the model with each other: each may sit a
    full bound from the oracle.
    """
    error, index = worst(actual, expected)
    limit = bound(np.asarray(expected, np.float64), neighbours, rope_positions=rope_positions)
    return Comparison(error, slack * limit, index)


def error_ratio(actual: np.ndarray, expected: np.ndarray, neighbours: Sequence[np.ndarray] = ()) -> float:
    """max error / bound for `actual` against `expected`: at most 1 within the policy."""
    return compare(actual, expected, neighbours).ratio
