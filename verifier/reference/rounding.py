"""Number formats narrower than float32, emulated on float32 arrays: how the reference runs at a precision.

A model that stores weights and activations in bfloat16 or float16 computes each operation with
float32 accumulation (as PyTorch's CPU kernels do) and rounds the result to the format: the
reference emulates it by rounding its weights and the output of every stage. TF32 rounds the
inputs of matrix products to 10 mantissa bits and keeps float32 elsewhere. Q8_0 (llama2.c's
runq.c, llama.cpp) stores each group of weights along a matrix's input axis as int8 times one
scale (max |w| / 127), and quantizes the activations entering each matrix product the same way.
Q4_0 (llama.cpp) stores each group of 32 weights as 4-bit codes times one float16 scale; llama.cpp
quantizes the activations its Q4_0 matrix products read to Q8_0. A file quantized by llama.cpp's own
quantizer (its K types: Q4_K_M, ...) is not emulated: its weights are the file's, read back
dequantized, and the activations its products read are quantized to Q8_K (groups of 256, float32 scales).

Rounding is round-to-nearest-even, as hardware and `torch.Tensor.to` do (llama.cpp's Q8_0 rounds
ties away from zero, as C's roundf); bfloat16 and TF32 are rounded on float32 bit patterns (NumPy
has neither type). Values beyond a format's range become +-inf, as they do in the format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from verifier.model.stages import INDEX_OPS
from verifier.model.weights import input_axis

Array = np.ndarray


def _keep_mantissa_bits(x: Array, bits: int) -> Array:
    """float32 values rounded (to nearest, ties to even) to `bits` explicit mantissa bits; NaN stays NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    dropped = 23 - bits
    u = x.view(np.uint32).astype(np.uint64)  # room for the carry of the rounding increment
    half = (1 << (dropped - 1)) - 1
    u = (u + half + ((u >> dropped) & 1)) & ~np.uint64((1 << dropped) - 1)
    out = u.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)


def to_bfloat16(x: Array) -> Array:
    """x rounded to bfloat16 (8 exponent bits, 7 mantissa bits), as float32 values."""
    return _keep_mantissa_bits(x, 7)


def to_tf32(x: Array) -> Array:
    """x rounded to TF32 (8 exponent bits, 10 mantissa bits), as float32 values."""
    return _keep_mantissa_bits(x, 10)


def to_float16(x: Array) -> Array:
    """x rounded to IEEE float16 (5 exponent bits, 10 mantissa bits; beyond 65,504 is inf), as float32."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def _grouped(x: Array, group_size: int, axis: int) -> Array:
    """x as float32 [..., n_groups, group_size], its `axis` last and cut into groups (a last, shorter
    group padded with zeros, which change no group's largest |x|)."""
    x = np.moveaxis(np.asarray(x, dtype=np.float32), axis, -1)
    padded = -(-x.shape[-1] // group_size) * group_size
    return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, padded - x.shape[-1])]).reshape(*x.shape[:-1], -1, group_size)


def _ungrouped(values: Array, shape: tuple[int, ...], axis: int) -> Array:
    """`_grouped`'s inverse: [..., n_groups, group_size] back to `shape`, the padding cut off."""
    n = shape[axis]
    return np.moveaxis(values.reshape(*values.shape[:-2], -1)[..., :n], -1, axis)


def q8_0(x: Array, group_size: int, *, float16_scales: bool = False, axis: int = -1) -> Array:
    """x quantized to Q8_0 and back, per group of `group_size` values along `axis` (a last, shorter
    group gets its own scale), with d = max |x| / 127 in float32:
    - llama2.c's version-2 file (export.py): q = round(x / d), ties to even; value = q d;
    - llama.cpp (`float16_scales`, ggml's `quantize_row_q8_0_ref`): q = roundf(x (1 / d)), ties away
      from zero; d is stored in float16, so value = q float16(d)."""
    groups = _grouped(x, group_size, axis)
    d = np.abs(groups).max(axis=-1, keepdims=True) / np.float32(127.0)
    if float16_scales:
        with np.errstate(divide="ignore"):
            scaled = groups * np.where(d == 0, np.float32(0.0), np.float32(1.0) / d)
        whole = np.floor(np.abs(scaled))  # roundf, ties away from zero, without the rounding of |x| + 0.5
        q = np.sign(scaled) * (whole + np.floor(2 * (np.abs(scaled) - whole)))
        values = q * to_float16(d)
    else:
        values = np.round(groups / np.where(d > 0, d, np.float32(1.0))) * d
    return _ungrouped(values, np.shape(x), axis)


Q4_0_BLOCK = 32  # llama.cpp's QK4_0


def q4_0(x: Array, axis: int = -1) -> Array:
    """x quantized to llama.cpp's Q4_0 and back, per block of 32 values along `axis` (a last, shorter
    block gets its own scale), in float32 as ggml's `quantize_row_q4_0_ref` computes it: `max` is the
    block's value of largest |x| (the first such, with its sign), d = max / -8, q = min(15,
    floor(x (1 / d) + 8.5)) (codes 0 to 15; `max` itself is code 0, -8 d), d stored in float16, and
    value = (q - 8) float16(d). A block of zeros has d = 0 and stays 0. (ggml's source is not
    installed here: tests/precision/test_rounding.py checks this bit for bit against gguf-py's Q4_0.)"""
    groups = _grouped(x, Q4_0_BLOCK, axis)
    largest = np.take_along_axis(groups, np.abs(groups).argmax(axis=-1)[..., None], axis=-1)  # argmax: the first
    d = largest / np.float32(-8.0)
    with np.errstate(divide="ignore"):
        inverse = np.where(d == 0, np.float32(0.0), np.float32(1.0) / d)
    # float32 throughout, as ggml: x (1 / d) + 8.5 rounds before the floor (an integer-valued sum can
    # come from a product just below it), and it is that rounding llama.cpp's codes have.
    q = np.minimum(np.float32(15.0), np.floor(groups * inverse + np.float32(8.5)))
    values = (q - np.float32(8.0)) * to_float16(d)
    return _ungrouped(values, np.shape(x), axis)


# Attention scores [B, h, T, S] moved, given the q [B, h, T, d_head] and k [B, kv, S, d_head] they
# come from and the keys each query sees (bool, broadcastable to the scores).
MoveScores = Callable[[Array, Array, Array, Array], Array]


@dataclass(frozen=True)
class Rounding:
    """How a model at some precision rounds: its weights (`weights(name, w)`), the output of the
    stages in `stages` (op names as in `verifier.model.stages`, e.g. "attn_norm"; None: every
    stage) by `activations`, and, where set, its attention scores by `scores` (which sees the q and
    k they come from)."""

    name: str
    activations: Callable[[Array], Array]
    weights: Callable[[str, Array], Array]
    stages: frozenset[str] | None = None
    scores: MoveScores | None = None

    def constant(self, x: Array) -> Array:
        """A constant the model holds as a tensor of its dtype (Gemma's normaliser sqrt(d_model)),
        rounded as the format stores a vector: to bfloat16 or float16; TF32, Q8_0 and Q4_0 keep float32."""
        return self.weights("constant", x)

    def rounds(self, stage: str) -> bool:
        """Whether the output of `stage` ("embed", "layers.0.q", ...) is rounded (never a float32 stage)."""
        op = stage.rpartition(".")[2]
        exempt = op in FLOAT32_STAGES or op in INDEX_OPS  # indices (the chosen experts) are not values to round
        return not exempt and (self.stages is None or op in self.stages)


# Stages every implementation computes in float32 whatever the model's dtype: the router's softmax
# (transformers' Mixtral and Qwen2-MoE take it of `.float()` logits); rounding it to bfloat16 would
# make ties among the probabilities the top-k choice reads that no model has.
FLOAT32_STAGES = frozenset({"router_probs"})
# The stages whose outputs enter a matrix product with a weight (or the classifier).
WEIGHT_INPUTS = frozenset({"attn_norm", "attn", "mlp_norm", "mlp_act", "final_norm"})
# ... and with another activation: q k^T (after RoPE where there is RoPE) and probs v.
ACTIVATION_INPUTS = frozenset({"q", "k", "q_rope", "k_rope", "v", "probs"})


def _every_weight(round_: Callable[[Array], Array]) -> Callable[[str, Array], Array]:
    return lambda name, w: round_(w)


def _matrices(round_: Callable[[Array], Array]) -> Callable[[str, Array], Array]:
    """Round the weights that enter matrix products (2-D), leave norm gains and biases."""
    return lambda name, w: round_(w) if np.ndim(w) == 2 else w


def q8_0_rounding(group_size: int, *, float16_scales: bool) -> Rounding:
    """Q8_0 weights (every matrix, in groups along its input axis) and activations entering the
    weight matrix products (as runq.c and llama.cpp's CPU kernels quantize them)."""

    def weights(weight_name: str, w: Array) -> Array:
        axis = input_axis(weight_name, np.ndim(w))
        return w if axis is None else q8_0(w, group_size, float16_scales=float16_scales, axis=axis)

    return Rounding("q8_0", lambda x: q8_0(x, group_size, float16_scales=float16_scales), weights, WEIGHT_INPUTS)


def q4_0_rounding() -> Rounding:
    """llama.cpp's Q4_0 model: Q4_0 weights (every matrix, in blocks of 32 along its input axis) and
    the activations entering the weight matrix products quantized to Q8_0 (float16 scales), as
    ggml's CPU backend computes a Q4_0 product: its `vec_dot_type` for Q4_0 is Q8_0, so the input
    rows are quantized to Q8_0 blocks before the dot products (the vendored llama.cpp source is not
    in the llama-cpp-python install; tests/llamacpp reads the type from the built library's
    `ggml_get_type_traits_cpu`)."""

    def weights(weight_name: str, w: Array) -> Array:
        axis = input_axis(weight_name, np.ndim(w))
        return w if axis is None else q4_0(w, axis=axis)

    return Rounding("q4_0", lambda x: q8_0(x, 32, float16_scales=True), weights, WEIGHT_INPUTS)  # Q8_0's blocks


BFLOAT16 = Rounding("bfloat16", to_bfloat16, _every_weight(to_bfloat16))
FLOAT16 = Rounding("float16", to_float16, _every_weight(to_float16))
TF32 = Rounding("tf32", to_tf32, _matrices(to_tf32), WEIGHT_INPUTS | ACTIVATION_INPUTS)


def file_rounding(name: str, dequantized: Mapping[str, Array], group_size: int) -> Rounding:
    """A quantized file's model: the weights its file holds (`dequantized`, canonical names: the
    quantizer is not emulated) and the activations entering the weight matrix products quantized to
    int8 in groups of `group_size` with float32 scales (llama.cpp's Q8_K, the `vec_dot_type` of every
    K type, is groups of 256). A file's tensor stands for a weight only where it is a rounding of it
    (`is_a_rounding_of`): a writer that moved or scaled a weight leaves the oracle the original."""

    def weights(weight_name: str, w: Array) -> Array:
        found = dequantized.get(weight_name)
        axis = input_axis(weight_name, np.ndim(w))
        if found is None or axis is None or not is_a_rounding_of(found, w, axis):
            return w
        return found

    return Rounding(name, lambda x: q8_0(x, group_size, float16_scales=False), weights, WEIGHT_INPUTS)


FILE_GROUP = 32  # the K types' sub-blocks: a scale (and a minimum) per 32 values of a row
FILE_STEPS = 8  # the fewest levels a sub-block of the file's types has (Q3_K: 8; Q4_K 16, Q6_K 64)


def is_a_rounding_of(found: Array, w: Array, axis: int) -> bool:
    """Whether `found` is `w` rounded to a format of at least FILE_STEPS levels per group of
    FILE_GROUP values along `axis`: each value within one level (the group's range / (FILE_STEPS - 1))."""
    if np.shape(found) != np.shape(w) or np.shape(w)[axis] % FILE_GROUP:
        return False
    rows = np.moveaxis(np.asarray(w, np.float32), axis, -1)
    groups = rows.reshape(*rows.shape[:-1], -1, FILE_GROUP)
    level = (groups.max(axis=-1, keepdims=True) - groups.min(axis=-1, keepdims=True)) / (FILE_STEPS - 1)
    error = np.moveaxis(np.asarray(found, np.float32), axis, -1).reshape(groups.shape) - groups
    return bool(np.all(np.abs(error) <= level))
