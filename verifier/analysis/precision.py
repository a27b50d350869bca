"""Precision classes: the number formats a model computes in, each with its tolerance and metric.

MEASUREMENTS
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verifier.analysis import tolerance
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.reference import NumpyModel
from verifier.reference import rounding as R

# The floors were measured on configs of 1 to 4 layers (the strategies' range); deeper models get
# sqrt(n_layers / 4) more, as independent roundings add up.
CALIBRATED_LAYERS = 4


@dataclass(frozen=True)
class Distribution:
    """How far a quantized model's next-token distributions may move from the original weights'."""

    kl_factor: float  # mean KL may be this many times the class emulation's ...
    kl_floor: float  # ... or this, whichever is larger (nats)


@dataclass(frozen=True)
class Precision:
    """A precision class: what a model stores and computes in, and how closely it must agree.

    Agreement with the oracle: max |actual - expected| <= bound, with (`verifier.analysis.tolerance`)

        bound = (eps ulps depth + eps32 rope_positions) max |expected| + conditioning spread

    where depth = sqrt(max(n_layers, 4) / 4) and spread is how far the oracle moves with its weights
    nudged by (1 + eps z) and how far the reference run at this precision (`rounding`) lands.
    Exact laws (a rotation's norm, a row of probabilities summing to 1) get the floor
    (eps identity_ulps + eps32 rope_positions) max |expected|. A quantized class is compared with the
    oracle run on its dequantized weights, and its next-token distributions with the original
    weights' (`distribution`). Values beyond `max_value` are outside what the format can hold.
    """

    name: str
    summary: str
    eps: float
    ulps: float
    conditioning: float
    identity_ulps: float
    rounding: R.Rounding | None = None
    max_value: float = math.inf
    distribution: Distribution | None = None
    variant: str = ""
    measured: str = field(default="", compare=False)

    @property
    def quantized(self) -> bool:
        return self.distribution is not None

    @property
    def label(self) -> str:
        """`bfloat16`, or `q8_0 (groups of 64, float32 scales)` for a variant."""
        return f"{self.name} ({self.variant})" if self.variant else self.name

    @property
    def key(self) -> tuple[str, str]:
        """What identifies the class's oracle and bounds (the rounding functions do not compare)."""
        return self.name, self.variant

    def depth(self, n_layers: int) -> float:
        return math.sqrt(max(n_layers, CALIBRATED_LAYERS) / CALIBRATED_LAYERS)

    def bound(
        self, expected: np.ndarray, neighbours: Sequence[np.ndarray] = (), *, rope_positions: int = 0, n_layers: int = 1
    ) -> float:
        """The largest |actual - expected| this class allows for an agreement comparison."""
        return tolerance.bound(
            expected,
            neighbours,
            rope_positions=rope_positions,
            ulps=self.ulps * self.depth(n_layers),
            eps=self.eps,
            conditioning=self.conditioning,
        )

    def identity_bound(self, expected: np.ndarray, *, rope_positions: int = 0) -> float:
        """The largest |actual - expected| this class allows where a law holds exactly."""
        return tolerance.bound(expected, rope_positions=rope_positions, ulps=self.identity_ulps, eps=self.eps)

    def identity_relative(self, rope_positions: int = 0) -> float:
        """The relative error an exact law may show in this class (identity floor / max |expected|)."""
        return self.eps * self.identity_ulps + tolerance.EPS32 * rope_positions

    def oracle_weights(self, weights: Weights) -> Weights:
        """The weights the oracle runs on: the dequantized ones for a quantized class, else `weights`."""
        if not self.quantized or self.rounding is None:
            return weights
        return {name: self.rounding.weights(name, np.asarray(w, np.float32)) for name, w in weights.items()}

    def perturbed(self, weights: Weights, seed: int) -> Weights:
        """The oracle's weights nudged at this class's precision: a neighbour of the oracle."""
        return tolerance.perturbed(self.oracle_weights(weights), seed=seed, eps=self.eps)

    def emulation(self, config: ModelConfig, weights: Weights) -> NumpyModel:
        """The reference run at this precision: float32 arithmetic, rounded as the format rounds."""
        return NumpyModel(config, weights, np.float32, rounding=self.rounding)

    def out_of_range(self, trace: dict[str, np.ndarray], d_head: int) -> str | None:
        """Why the oracle's `trace` of a case cannot be held in this format, or None.

        A float16 model overflows where any stage, or an attention score before its 1/sqrt(d_head)
        scaling (transformers multiplies q k^T first), comes within a factor 2 of `max_value`.
        """
        if math.isinf(self.max_value):
            return None
        largest, where = 0.0, ""
        for stage, value in trace.items():
            size = float(np.max(np.abs(value), initial=0.0)) * (math.sqrt(d_head) if stage.endswith("scores") else 1)
            if size > largest:
                largest, where = size, stage
        if largest * 2 <= self.max_value:
            return None
        return f"the oracle's {where} reaches {largest:.3g}, over half {self.name}'s largest value {self.max_value:g}"


EPS32 = tolerance.EPS32

FLOAT32 = Precision(
    "float32",
    "float32 weights and arithmetic",
    eps=EPS32,
    ulps=tolerance.ULPS,
    conditioning=tolerance.CONDITIONING,
    identity_ulps=tolerance.ULPS,
)
TF32 = Precision(
    "tf32",
    "float32 weights and activations; matrix products read their inputs at 10 mantissa bits (TF32)",
    eps=2.0**-10,
    ulps=4,
    conditioning=4,
    identity_ulps=8,
    rounding=R.TF32,
)
FLOAT16 = Precision(
    "float16",
    "float16 weights and activations, float32 accumulation",
    eps=2.0**-10,
    ulps=4,
    conditioning=4,
    identity_ulps=8,
    rounding=R.FLOAT16,
    max_value=float(np.finfo(np.float16).max),
)
BFLOAT16 = Precision(
    "bfloat16",
    "bfloat16 weights and activations, float32 accumulation",
    eps=2.0**-7,
    ulps=4,
    conditioning=4,
    identity_ulps=8,
    rounding=R.BFLOAT16,
)
Q8_0_DISTRIBUTION = Distribution(kl_factor=8.0, kl_floor=1e-6)


def q8_0(group_size: int = 32, *, float16_scales: bool = True) -> Precision:
    """int8 weights in groups of `group_size` along each matrix's input axis, one scale per group
    (float16 as llama.cpp stores it, or float32 as llama2.c's version-2 file does); activations
    entering each weight matrix quantized the same way; everything else float32."""
    scale = R.to_float16 if float16_scales else None
    default = group_size == 32 and float16_scales
    return Precision(
        "q8_0",
        "int8 weights and matrix-product inputs in Q8_0 groups (scale max|x| / 127), float32 elsewhere",
        eps=1 / 127,
        ulps=4,
        conditioning=4,
        identity_ulps=8,
        rounding=R.q8_0_rounding(group_size, scale),
        distribution=Q8_0_DISTRIBUTION,
        variant="" if default else f"groups of {group_size}, {'float16' if float16_scales else 'float32'} scales",
    )


Q8_0 = q8_0()

CLASSES: dict[str, Precision] = {}


def register(precision: Precision) -> Precision:
    """Make `precision` declarable by its name (a model's `precision = "name"`)."""
    CLASSES[precision.name] = precision
    return precision


for _p in (FLOAT32, TF32, FLOAT16, BFLOAT16, Q8_0):
    register(_p)


class UnknownPrecision(ValueError):
    """A declared precision that names no class; the message lists the known ones."""


def resolve(declared: Any) -> Precision:
    """The class a model declares: a `Precision`, or the name of a registered one ("bfloat16")."""
    if isinstance(declared, Precision):
        return declared
    if isinstance(declared, str) and declared in CLASSES:
        return CLASSES[declared]
    raise UnknownPrecision(
        f"precision {declared!r} is not a precision class; known: {', '.join(CLASSES)} "
        "(or a verifier.analysis.precision.Precision)"
    )
