"""Precision classes: the number formats a model computes in, each with its tolerance and metric.

A model declares its class (`precision = "bfloat16"` on the model or its factory; see
`verifier.plugin.interface`), and every comparison with the oracle is judged by that class's bound,
which has the float32 policy's form (`verifier.analysis.tolerance`) in the class's own eps:

    bound = (eps ulps depth + eps32 rope_positions) max |expected| + conditioning spread
    depth = sqrt(max(n_layers, 4) / 4)
    spread = max |neighbour - expected| over: the oracle with its weights times (1 + eps z), z ~ N(0, 1)
             (two seeds), the reference run at the class (`verifier.reference.rounding`), and in
             bfloat16 and float16 the oracle with its attention scores pulled toward their row's
             largest by eps (|score| + |q| |k| / d_head) (`_near_ties`)

| class    | eps    | ulps | conditioning | identity ulps | what it models                                       |
|----------|--------|-----:|-------------:|--------------:|------------------------------------------------------|
| float32  | 2^-23  |  128 |           32 |           128 | float32 weights and arithmetic (the existing policy) |
| tf32     | 2^-10  |    4 |            4 |             8 | float32; matrix products read 10 mantissa bits       |
| float16  | 2^-10  |    4 |            4 |             8 | float16 weights and stage outputs, float32 sums      |
| bfloat16 | 2^-7   |    4 |            4 |             8 | bfloat16 weights and stage outputs, float32 sums     |
| q8_0     | 1/127  |    4 |            4 |             8 | int8 weights and matrix-product inputs (see below)   |
| q4_0     | 1/127  |    4 |            4 |             8 | 4-bit weights, int8 matrix-product inputs (below)    |
| q4_k_m.. | 1/127  |    4 |            4 |             8 | a llama.cpp quantizer's file, Q8_K inputs (below)    |

q8_0 is llama.cpp's: groups of 32 along each matrix's input axis, one float16 scale max |x| / 127
per group, the activations entering each weight matrix product quantized alike, float32 elsewhere.
q4_0 is llama.cpp's too: blocks of 32 along each matrix's input axis, 16 levels -8 d to 7 d with d =
max / -8 (the block's value of largest |x|) in float16; the activations entering its matrix products
are quantized to Q8_0 (ggml's `vec_dot_type` for Q4_0), so its eps is q8_0's: judged against the
oracle on the dequantized weights, what remains is the activations' Q8_0. A file of llama.cpp's own
quantizer (`file_quantized`: Q4_K_M, Q5_K_M, Q6_K, its K types in super-blocks of 256) is not
emulated: the oracle runs on the weights read back from the file, each where it is a rounding of the
original (`rounding.is_a_rounding_of`), and the activations entering its products are quantized to
Q8_K (groups of 256, float32 scales), ggml's `vec_dot_type` for every K type; Q4_0's limits.

RoPE angles stay float32 in every class (transformers computes its rotary tables in float32 whatever
the model's dtype; an angle computed in bfloat16 is off by a radian at position 255, a bug), so the
RoPE term keeps eps32. Exact laws (a rotation's norm, a row of probabilities summing to 1) get the
floor (eps identity_ulps + eps32 rope_positions) max |expected|. float16 cannot hold values beyond
65,504: a case whose oracle reaches half of that at some stage (or an attention score, times
sqrt(d_head), before its scaling) is out of the class's range and is not drawn for it (measured: of
300 drawn cases, 91 were out of range, transformers in float16 overflowed on 82 of them and on none
of the 209 in range).

A quantized class (`distribution` set) is compared with the oracle run on its dequantized weights
(elementwise, as above: what remains is the activations' quantization), and with the original
weights by llama.cpp's statistics (`verifier.analysis.agreement.distribution_agreement`): the mean
KL divergence of next-token distributions may be `kl_factor` times the class emulation's (at least
`kl_floor` nats), and each position must keep the original's top token up to a tie within the class
bound widened by the dequantized oracle and the emulation. `q8_0(group_size, float16_scales=...)`
makes variants (llama2.c's version-2 file: its writer's group size, float32 scales); they share the
name and limits.

Calibration (`benchmarks/precision_calibration.py`, 300 cases of the suite's strategy at weight
scales 0.003 to 10, n_ctx <= 64, and 8 with rows of 32; the table is in benchmarks/RESULTS.md): a
correct implementation's max |error| is at most 1.0 times the spread (transformers in bfloat16;
0.63 in float16; the reference rounded to each class and the mutant catalog's base at each class,
whose rounding is written independently, at most 0.91), and its median error is about one eps
times max |expected|. With conditioning 4, the worst error / bound measured is 0.249 (bfloat16;
0.339 when the nudged oracles carried a pull of eps |score|, 1.94 with no pull), 0.17 (float16),
0.246 (tf32), 0.248 (q8_0); the floor decides little (ulps 2 to 16 move those by under 10%), so it
is kept low, 4 eps. The near-tie neighbour was settled on the thorough profile's failures
(benchmarks/RESULTS.md: four cases of transformers in bfloat16 up to 3.7x, with it 0.25 at most).
The identity floor, 8 eps: relative to max |expected|, transformers' RoPE pairing scores reached
1.09x (bfloat16) and 1.42x (float16) in the thorough profile, where a score's terms cancel; that
property's floor is relative to |score| plus its terms' root-sum-square (0.059x and 0.069x).
Q8_0's mean KL measured at most 1.0 times the largest of the dequantized oracle's, the emulation's
and the nudged oracles' (the catalog's base, this project's version-2 reader), so `kl_factor` 8
leaves 8x; below 1e-6 nats the distributions are too flat to tell anything. Q4_0, on the same
drawn cases and those with rows of 32 (2026-11-27): the reference at q4_0 at most 1.0 times the
spread and 0.248 of the bound, llama.cpp on Q4_0 files (the 11 cases with rows of 32) 0.70 and
0.133; llama.cpp's mean KL against the original weights at most 0.998 times the largest of the
correct models' (median 0.00217 nats; same top token at a median 66.7% of positions), so Q4_0 keeps
Q8_0's limits: `kl_factor` 8, `kl_floor` 1e-6. The files of llama.cpp's quantizer (`file_quantized`),
on 8 cases with rows of 256 (2026-11-28): Q4_K_M, Q5_K_M and Q6_K at most 0.976, 1.0 and 1.03 times
the spread, 0.237, 0.248 and 0.252 of the bound, their mean KL at most 0.999, 0.93 and 0.956 times
the correct models': Q4_0's limits hold for them.

A model that declares no class is judged as float32; where one of its failures is a coarser
class's rounding (`rounding_fit`: the size and in part the direction of the class emulation's
error at every position, and at every traced stage), the failure says it behaves like that class.

What a class can resolve is measured by the mutation report at every class (benchmarks/RESULTS.md):
a bug whose effect on the logits stays below the class's bound (the erf GELU for the tanh one is
0.26 of bfloat16's bound) is undetectable there, and said so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verifier.analysis import tolerance
from verifier.model.config import ModelConfig
from verifier.model.weights import LazyWeights, WeightMap
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

    where depth = sqrt(max(n_layers, 4) / 4) and spread is how far its neighbours land (`neighbours`):
    the oracle with its weights nudged by (1 + eps z), the reference run at this precision
    (`rounding`) and, in bfloat16 and float16, the oracle with its near-ties closed.
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
        self,
        expected: np.ndarray,
        neighbours: Sequence[np.ndarray] = (),
        *,
        rope_positions: int = 0,
        n_layers: int = 1,
        scale: np.ndarray | None = None,
    ) -> float:
        """The largest |actual - expected| this class allows for an agreement comparison (the floor
        relative to max |scale| where given, see `tolerance.bound`)."""
        return tolerance.bound(
            expected,
            neighbours,
            rope_positions=rope_positions,
            ulps=self.ulps * self.depth(n_layers),
            eps=self.eps,
            conditioning=self.conditioning,
            scale=scale,
        )

    def identity_bound(self, expected: np.ndarray, *, rope_positions: int = 0) -> float:
        """The largest |actual - expected| this class allows where a law holds exactly."""
        return tolerance.bound(expected, rope_positions=rope_positions, ulps=self.identity_ulps, eps=self.eps)

    def identity_relative(self, rope_positions: int = 0) -> float:
        """The relative error an exact law may show in this class (identity floor / max |expected|)."""
        return self.eps * self.identity_ulps + tolerance.EPS32 * rope_positions

    def oracle_weights(self, weights: WeightMap) -> WeightMap:
        """The weights the oracle runs on: the dequantized ones for a quantized class, else `weights`
        (for `LazyWeights`, a view dequantizing each on lookup)."""
        if not self.quantized or self.rounding is None:
            return weights
        rounding = self.rounding
        if isinstance(weights, LazyWeights):
            return weights.map(lambda name, w: rounding.weights(name, np.asarray(w, np.float32)))
        return {name: rounding.weights(name, np.asarray(w, np.float32)) for name, w in weights.items()}

    def perturbed(self, weights: WeightMap, seed: int) -> WeightMap:
        """The oracle's weights nudged at this class's precision: a neighbour of the oracle."""
        return tolerance.perturbed(self.oracle_weights(weights), seed=seed, eps=self.eps)

    def neighbours(self, config: ModelConfig, weights: WeightMap, *, stream: bool = False) -> tuple[NumpyModel, ...]:
        """The models whose distance from the oracle measures how sensitive a case is at this class:
        the oracle on nudged weights (`perturbed`, two seeds), the reference run at the class
        (`emulation`) and, where the class holds attention scores in its format (bfloat16, float16),
        the oracle with every score pulled toward its row's largest (`_near_ties`); `stream` as for
        `NumpyModel`."""
        models = [NumpyModel(config, self.perturbed(weights, seed), np.float64, stream=stream) for seed in (0, 1)]
        models.append(self.emulation(config, weights, stream=stream))  # at EMULATION
        if self.rounding is not None and self.rounding.rounds("scores"):
            ties = _near_ties(self.eps)
            models.append(NumpyModel(config, self.oracle_weights(weights), np.float64, rounding=ties, stream=stream))
        return tuple(models)

    def emulation(self, config: ModelConfig, weights: WeightMap, *, stream: bool = False) -> NumpyModel:
        """The reference run at this precision: float32 arithmetic, rounded as the format rounds
        (`stream`: each weight converted when a pass needs it, see `NumpyModel`)."""
        return NumpyModel(config, weights, np.float32, rounding=self.rounding, stream=stream)

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


def _near_ties(eps: float) -> R.Rounding:
    """Attention scores moved toward their row's largest (among the keys the query sees) by what a
    format of this eps can move them: eps (|score| + |q| |k| / d_head), so that a near-tie the
    format can close or reverse shows in the spread.

    A model holding scores in a format rounds each one (transformers twice: q k^T, then the scaled
    score) by up to eps/2 of it, and q and k arrive with errors of about eps of their norms in no
    particular direction, which move q k^T / sqrt(d_head) by about eps |q| |k| / d_head; all of it
    independently of the row's other scores, and the softmax turns a gap's change into exp of it.
    The nudged oracles move a row's scores together, the emulation is one draw of the rounding, and
    neither goes toward the tie: measured (benchmarks/RESULTS.md), the oracle's 511.5 and 514.9
    (probabilities 0.035, 0.965) became 516 and 516 in transformers' bfloat16 (0.5, 0.5), and
    -255.0 and -259.6 became -255 and -256 (a gap of 4.6 closed by the error of q and k, with the
    nudged oracles widening it). This neighbour runs on the oracle's weights, unnudged: a nudge
    can move a gap the other way by more than the pull closes it. A gap wider than the pull keeps
    its order, and a nearly one-hot row its softmax.
    """

    def pull(scores: np.ndarray, q: np.ndarray, k: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        group = q.shape[1] // k.shape[1]
        q_norm = np.linalg.norm(q, axis=-1)[..., :, None]  # [B, h, T, 1]
        k_norm = np.repeat(np.linalg.norm(k, axis=-1), group, axis=1)[..., None, :]  # [B, h, 1, S]
        amount = eps * (np.abs(scores) + q_norm * k_norm / q.shape[-1])
        top = np.where(allowed, scores, -np.inf).max(axis=-1, keepdims=True)
        return np.where(scores == top, scores - amount, scores + amount)

    return R.Rounding("near ties", lambda x: x, lambda name, w: w, frozenset(), scores=pull)


EPS32 = tolerance.EPS32

FLOAT32 = Precision(
    "float32",
    "float32 weights and arithmetic",
    eps=EPS32,
    ulps=tolerance.ULPS,
    conditioning=tolerance.CONDITIONING,
    identity_ulps=tolerance.ULPS,
)


def _narrow(name: str, summary: str, eps: float, **details: Any) -> Precision:
    """A class narrower than float32, with the constants they share (calibrated: module docstring)."""
    return Precision(name, summary, eps=eps, ulps=4, conditioning=4, identity_ulps=8, **details)


TF32 = _narrow(
    "tf32", "float32 weights and activations; matrix products read their inputs at 10 mantissa bits (TF32)", 2.0**-10,
    rounding=R.TF32,
)  # fmt: skip
FLOAT16 = _narrow(
    "float16", "float16 weights and activations, float32 accumulation", 2.0**-10,
    rounding=R.FLOAT16, max_value=float(np.finfo(np.float16).max),
)  # fmt: skip
BFLOAT16 = _narrow("bfloat16", "bfloat16 weights and activations, float32 accumulation", 2.0**-7, rounding=R.BFLOAT16)
Q8_0_DISTRIBUTION = Distribution(kl_factor=8.0, kl_floor=1e-6)


def q8_0(group_size: int = 32, *, float16_scales: bool = True) -> Precision:
    """int8 weights in groups of `group_size` along each matrix's input axis, one scale per group
    (float16 as llama.cpp stores it, or float32 as llama2.c's version-2 file does); activations
    entering each weight matrix quantized the same way; everything else float32."""
    default = group_size == 32 and float16_scales
    return _narrow(
        "q8_0",
        "int8 weights and matrix-product inputs in Q8_0 groups (scale max|x| / 127), float32 elsewhere",
        1 / 127,
        rounding=R.q8_0_rounding(group_size, float16_scales=float16_scales),
        distribution=Q8_0_DISTRIBUTION,
        variant="" if default else f"groups of {group_size}, {'float16' if float16_scales else 'float32'} scales",
    )


Q8_0 = q8_0()
Q4_0_DISTRIBUTION = Distribution(kl_factor=8.0, kl_floor=1e-6)  # measured: module docstring
Q4_0 = _narrow(
    "q4_0",
    "4-bit weights in Q4_0 blocks of 32 (scale max / -8, float16), matrix-product inputs in Q8_0, float32 elsewhere",
    1 / 127,  # the weights are the oracle's own (dequantized): what remains is the activations' Q8_0
    rounding=R.q4_0_rounding(),
    distribution=Q4_0_DISTRIBUTION,
)

K_QUANT_DISTRIBUTION = Distribution(kl_factor=8.0, kl_floor=1e-6)  # Q4_0's, measured to hold (module docstring)


def file_quantized(name: str, dequantized: Mapping[str, np.ndarray]) -> Precision:
    """A file quantized by llama.cpp's own quantizer (`name`: its type, `q4_k_m`): the weights are the
    file's (`dequantized`: what the oracle runs on), the matrix products' inputs in Q8_K (groups of
    256, float32 scales), float32 elsewhere. Not declarable by name: it needs the file's weights."""
    return _narrow(
        name,
        f"llama.cpp's {name.upper()} file (K types, super-blocks of 256; the oracle on its dequantized weights), "
        "matrix-product inputs in Q8_K (groups of 256, float32 scales), float32 elsewhere",
        1 / 127,  # the weights are the oracle's own: what remains is the activations' Q8_K
        rounding=R.file_rounding(name, dequantized, 256),
        distribution=K_QUANT_DISTRIBUTION,
    )


CLASSES: dict[str, Precision] = {}


def register(precision: Precision) -> Precision:
    """Make `precision` declarable by its name (a model's `precision = "name"`)."""
    CLASSES[precision.name] = precision
    return precision


for _p in (FLOAT32, TF32, FLOAT16, BFLOAT16, Q8_0, Q4_0):
    register(_p)


# Where the class emulation is among `Precision.neighbours` (after the two nudged oracles).
EMULATION = 2

# The classes an undeclared (float32) model's failure is compared with, to say which one it behaves like.
HINT_CLASSES = (TF32, FLOAT16, BFLOAT16)
# How closely a model's error must follow a class emulation's for the hint (`rounding_fit`).
FIT_MEDIAN = 2.0
FIT_SPREAD = 8.0
FIT_SHARED = 0.4


def position_errors(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """The root-mean-square of actual - expected over the last axis, one per position: [N] for
    arrays [..., V] (N the product of the leading axes; a single row [V] is one position)."""
    diff = np.asarray(actual, np.float64) - np.asarray(expected, np.float64)
    return np.sqrt(np.mean(np.square(diff.reshape(-1, diff.shape[-1] if diff.ndim else 1)), axis=-1))


@dataclass(frozen=True)
class RoundingFit:
    """A model's error that follows a class's rounding (`rounding_fit`): the class, the median over
    positions of the model's error / the emulation's, the cosine between the two errors (over every
    value), and how far the model's output lies from the emulation's, as a multiple of the
    emulation's distance from the oracle (RMS over every value)."""

    precision: Precision
    median: float
    shared: float
    distance: float


def _within(ratio: np.ndarray, factor: float) -> bool:
    return bool(np.all(np.isfinite(ratio)) and np.all(ratio >= 1 / factor) and np.all(ratio <= factor))


def _ratio(model: np.ndarray, emulated: np.ndarray) -> np.ndarray:
    """model / emulated elementwise; 1 where both are 0, inf where only the emulation's is (or either is not finite)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(emulated > 0, model / np.where(emulated > 0, emulated, 1.0), np.where(model > 0, np.inf, 1.0))
    return np.where(np.isfinite(model) & np.isfinite(emulated), ratio, np.inf)


def rounding_fit(
    precision: Precision,
    found: np.ndarray,
    expected: np.ndarray,
    emulated: np.ndarray,
    stages: Mapping[str, float] | None = None,
    emulated_stages: Mapping[str, float] | None = None,
) -> RoundingFit | None:
    """Whether a model's error profile is that of `precision`'s rounding, and how closely.

    `found` [..., V] is the model's output, `expected` the oracle's, `emulated` the class emulation's
    (the reference run at the class); with a trace, `stages` maps each traced stage to the model's
    max |error| there, `emulated_stages` the emulation's. Rounding spreads: a model computing in the
    class has errors of the emulation's size at every position and at every stage, from the first
    (its weights are rounded too). So the fit needs the median over positions of model / emulation
    error (RMS over the last axis) within FIT_MEDIAN (its size), every position's ratio within
    FIT_SPREAD (no position far above, nor far below: a bug's error concentrates, a finer class's
    is smaller throughout), the cosine between the two errors at least FIT_SHARED (every
    implementation in the class rounds the same weights the same way, so part of its error is the
    emulation's; a bug's is unrelated to it), and, with a trace, every stage's ratio within
    FIT_SPREAD (a bug's error starts at one stage; stages before it have float32's, thousands of
    times below the class's).

    Measured (llama and gpt2 of 2 layers, weight scales 0.02 to 3, 10 cases): transformers in
    bfloat16 and float16 against their own class's emulation, positions 0.28 to 3.0 (medians 0.84 to
    1.14), cosines 0.46 to 0.999, stages 0.30 to 3.3; against the other of the two, medians at least
    6.8 or at most 0.145. The catalog's mutants in float32 on the same cases: each fails the stages;
    on the logits alone, the norm-eps, unbiased-variance and SiLU-branch bugs fit positions (their
    errors are small and even) at cosines below 0.3, and float16 accumulation fits tf32 or float16
    (it does round its matrix products' inputs to float16; its embeddings are exact).
    tf32's emulation and float16's lie within 1.8x of each other, so both may fit: `closest` decides."""
    model, emulation = position_errors(found, expected), position_errors(emulated, expected)
    ratio = _ratio(model, emulation)
    if not _within(ratio, FIT_SPREAD) or not _within(np.median(ratio, keepdims=True), FIT_MEDIAN):
        return None
    error = (np.asarray(found, np.float64) - expected).ravel()
    emulation_error = (np.asarray(emulated, np.float64) - expected).ravel()
    shared = float(error @ emulation_error / (np.linalg.norm(error) * np.linalg.norm(emulation_error)))
    if not shared >= FIT_SHARED:
        return None
    if stages is not None:
        if emulated_stages is None:
            return None
        common = [s for s in stages if s in emulated_stages]
        stage_ratio = _ratio(np.array([stages[s] for s in common]), np.array([emulated_stages[s] for s in common]))
        if not common or not _within(stage_ratio, FIT_SPREAD):
            return None
    spread = float(np.sqrt(np.mean(np.square(emulation))))
    distance = float(np.sqrt(np.mean(np.square(position_errors(found, emulated))))) / spread
    return RoundingFit(precision, float(np.median(ratio)), shared, distance)


def closest(fits: Sequence[RoundingFit | None]) -> RoundingFit | None:
    """Of the classes whose rounding a model's error fits, the one whose emulation its output lies
    nearest (tf32's and float16's differ in where they round, not in how much: measured, transformers
    in float16 lay nearer float16's emulation than tf32's in all 10 cases, 0.03x to 1.07x its
    spread from it against 0.68x to 3.4x in 8 of them, though by a hair in one: 0.681x against 0.683x)."""
    found = [f for f in fits if f is not None]
    return min(found, key=lambda f: f.distance) if found else None


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
