"""The tolerance policy: how far a float32 model's outputs may sit from the float64 oracle.

Policy: max |actual - expected| <= ULPS * eps32 * (1 + max |expected|).

Why this form: a float32 forward pass rounds every product and sum at relative precision eps32,
and its errors, carried by the residual stream and normalised by every norm, stay proportional to
the magnitude of what is computed; the `1 +` keeps near-zero outputs from demanding a zero error.
Why ULPS = 256 (about 3e-5 relative): correct float32 models measured here stay within
~20 eps32 of the oracle (GPT-2 124M, 64 tokens: 2.2e-6 at max |logit| 2.7), so 256 leaves room for
long contexts and larger weights, while a wrong constant (eps 1e-6 for 1e-5 on small activations,
erf GELU for tanh GELU) moves logits by 1e-3 or more, far beyond it.
"""

from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)
ULPS = 256


def bound(expected: np.ndarray, ulps: float = ULPS) -> float:
    """The largest |actual - expected| the policy allows for this expected array."""
    return ulps * EPS32 * (1.0 + float(np.max(np.abs(expected))))


def max_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| in float64 (inf if any entry is NaN)."""
    diff = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))
    return float("inf") if np.isnan(diff).any() else float(diff.max(initial=0.0))


def error_ratio(actual: np.ndarray, expected: np.ndarray, ulps: float = ULPS) -> float:
    """max error / bound: at most 1 within the policy."""
    return max_error(actual, expected) / bound(expected, ulps)
