"""llama2.c's model files: legacy version 0, version 1 (float32) and version 2 (int8 Q8_0), read into
and written from the canonical weights. The byte layout of each version is `verifier.formats.llama2c_layout`.

Matrices are nn.Linear weights [d_out, d_in]; wq/wk rows are in llama2.c's interleaved RoPE pair
order, converted to and from the canonical (HF rotate-half) order here. RMSNorm eps is 1e-5 in
every llama2.c runtime, which the format cannot change.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from verifier.formats.checkpoint import Checkpoint, TensorInfo, check_array, check_canonical, check_shapes
from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import BoundedReader, ReadAhead, atomic_write, open_bounded, read_array
from verifier.formats.llama2c_layout import (
    DEFAULT_GROUP_SIZE,
    NORM_EPS,
    ROPE_KEYS,
    ROPE_THETA,
    Header,
    Segment,
    config_of,
    header_bytes,
    header_for,
    layout,
    partial_group_findings,
    read_header,
    write_header,
)
from verifier.model.config import SWITCH_DEFAULTS, ModelConfig
from verifier.model.weights import LazyWeights, Weights, weight_shapes

_F32 = np.dtype("<f4")
_I8 = np.dtype("i1")

_LAYER_KEYS = ("rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3")
_CANONICAL = {
    "tok_embeddings": "model.embed_tokens.weight",
    "rms_att": "model.layers.{}.input_layernorm.weight",
    "wq": "model.layers.{}.self_attn.q_proj.weight",
    "wk": "model.layers.{}.self_attn.k_proj.weight",
    "wv": "model.layers.{}.self_attn.v_proj.weight",
    "wo": "model.layers.{}.self_attn.o_proj.weight",
    "rms_ffn": "model.layers.{}.post_attention_layernorm.weight",
    "w1": "model.layers.{}.mlp.gate_proj.weight",
    "w2": "model.layers.{}.mlp.down_proj.weight",
    "w3": "model.layers.{}.mlp.up_proj.weight",
    "rms_final": "model.norm.weight",
    "wcls": "lm_head.weight",
}


def to_rotate_half(w: np.ndarray, n_heads: int) -> np.ndarray:
    """q/k rows from llama2.c's interleaved order to HF's rotate-half order: [n_heads * d_head, d_in].

    Both rotate pairs with frequency i: llama2.c the rows (2i, 2i+1) of a head, HF the rows
    (i, i + d_head/2). So HF's row j * d_head/2 + i is llama2.c's row 2i + j (j = 0, 1).
    """
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def to_interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The inverse of `to_rotate_half`: HF's rotate-half q/k rows to llama2.c's interleaved order."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def rope_tables(seq_len: int, head_size: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """llama2.c's stored tables freq_cis_real, freq_cis_imag: cos, sin of pos * theta^(-2i/head_size).

    Written from llama2.c's `precompute_freqs_cis`, independently of the NumPy reference (whose
    RoPE the differential test against run.c checks), with angles in float64: [seq_len, head_size/2].
    """
    freqs = 1.0 / theta ** (np.arange(0, head_size, 2, dtype=np.float64) / head_size)
    angles = np.outer(np.arange(seq_len, dtype=np.float64), freqs)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Reading


def read_llama2c_config(path: str | Path) -> ModelConfig:
    """The config a llama2.c file's header describes (the file size is checked; weights are not read)."""
    with open_bounded(Path(path)) as reader:
        return config_of(read_header(reader))


def _read_segment(reader: BoundedReader, seg: Segment, group_size: int) -> np.ndarray:
    if not seg.quantized:
        return reader.array(_F32, seg.shape, f"tensor {seg.name}").astype(np.float32, copy=False)
    values = reader.array(_I8, seg.shape, f"tensor {seg.name}")
    scales = reader.array(_F32, (seg.count // group_size,), f"scales of {seg.name}")
    return dequantize(reader.path, seg, values, scales, group_size)


def dequantize(path: Path, seg: Segment, values: np.ndarray, scales: np.ndarray, group_size: int) -> np.ndarray:
    """Q8_0 int8 `values` times their group's float32 scale, as float32 of the segment's shape."""
    if not (np.isfinite(scales).all() and (scales >= 0).all()):
        bad = int(np.argwhere(~(np.isfinite(scales) & (scales >= 0)))[0][0])
        raise CheckpointError(
            path,
            f"scales of {seg.name}",
            f"group {bad} has an invalid scale",
            expected="a finite scale >= 0",
            found=scales[bad],
        )
    out = values.reshape(-1, group_size).astype(np.float32)
    out *= scales[:, None]
    return out.reshape(seg.shape)


def read_llama2c(path: str | Path) -> Checkpoint:
    """A llama2.c model file (version 0, 1 or 2) as config + canonical weights."""
    path = Path(path)
    with open_bounded(path) as reader:
        h = read_header(reader)
        segments = list(layout(h))
        stored = {seg.name: _read_segment(reader, seg, h.group_size) for seg in segments}
    theta, findings = _theta_and_findings(path, h, stored.pop("freq_cis_real", None), stored.pop("freq_cis_imag", None))
    config = config_of(h, theta)
    weights = _canonical(config, stored)
    check_canonical(path, config, weights)
    return Checkpoint(path, "llama2c", h.version, config, weights, _infos(segments), tuple(findings))


def _infos(segments: list[Segment]) -> tuple[TensorInfo, ...]:
    return tuple(
        TensorInfo(seg.name, seg.shape, "int8+float32 scales" if seg.quantized else "float32") for seg in segments
    )


def _theta_and_findings(
    path: Path, h: Header, cos: np.ndarray | None, sin: np.ndarray | None
) -> tuple[float, list[str]]:
    """RoPE theta (from version 0's tables `cos`, `sin`, else llama2.c's) and what reading the file implied."""
    findings = []
    theta = ROPE_THETA
    if cos is not None and sin is not None:
        theta, finding = _infer_rope_theta(path, h, cos, sin)
        findings.append(finding)
    else:
        findings.append(f"RoPE theta is not stored in version {h.version}; llama2.c's {ROPE_THETA:g} assumed")
    if h.version == 2:
        findings.append(
            f"matrices stored as int8 Q8_0 (groups of {h.group_size} with float32 scales), dequantized to float32"
        )
        findings += partial_group_findings(h)
    findings.append(f"RMSNorm eps is not stored; llama2.c's {NORM_EPS:g} assumed")
    return theta, findings


def map_llama2c(path: str | Path) -> Checkpoint:
    """`read_llama2c`'s checkpoint with weights read from the file at each lookup.

    The header and the file size are checked here (and version 0's RoPE tables read); each
    weight's values when read: one layer's slice of a stacked tensor, q/k rows reordered to
    rotate-half, int8 groups dequantized.
    """
    path = Path(path)
    with open_bounded(path) as reader:
        h = read_header(reader)
    segments = list(layout(h))
    at: dict[str, tuple[Segment, int]] = {}  # llama2.c's name -> (segment, byte offset)
    offset = header_bytes(h.version)
    for seg in segments:
        at[seg.name] = (seg, offset)
        offset += seg.nbytes(h.group_size)
    cos, sin = (read_array(path, at[key][1], _F32, at[key][0].shape, f"tensor {key}") if key in at else None
                for key in ROPE_KEYS)  # fmt: skip
    theta, findings = _theta_and_findings(path, h, cos, sin)
    config = config_of(h, theta)
    stored: dict[str, tuple[str, int | None]] = {
        _CANONICAL[key].format(i): (key, i) for key in _LAYER_KEYS for i in range(h.n_layers)
    }
    stored |= {_CANONICAL[key]: (key, None) for key in ("tok_embeddings", "rms_final", "wcls") if key in at}

    def extent(name: str) -> tuple[Segment, int, tuple[int, ...]]:
        """The segment holding weight `name`, the offset of its bytes, its shape as stored."""
        key, layer = stored[name]
        if layer is None or f"layers.{layer}.{key}" in at:  # whole, or one layer of version 2
            seg, start = at[key if layer is None else f"layers.{layer}.{key}"]
            return seg, start, seg.shape
        seg, start = at[key]  # stacked [n_layers, ...]: one layer's slice
        return seg, start + layer * 4 * (seg.count // h.n_layers), seg.shape[1:]

    def read(name: str) -> np.ndarray:
        seg, start, shape = extent(name)
        if seg.quantized:
            values = read_array(path, start, _I8, shape, f"tensor {seg.name}")
            scales = read_array(path, start + seg.count, _F32, (seg.count // h.group_size,), f"scales of {seg.name}")
            w = dequantize(path, seg, values, scales, h.group_size)
        else:
            w = read_array(path, start, _F32, shape, f"tensor {name}")
        key = stored[name][0]
        if key in ("wq", "wk"):
            w = to_rotate_half(w, config.n_heads if key == "wq" else config.n_kv_heads)
        return w

    def nbytes(name: str) -> int:
        seg, _, shape = extent(name)
        count = math.prod(shape)
        return count + 4 * (count // h.group_size) if seg.quantized else 4 * count

    ahead = ReadAhead({name: (path, extent(name)[1], nbytes(name)) for name in weight_shapes(config)})

    def fetch(name: str) -> np.ndarray:
        ahead.after(name)  # the disk reads the next weights while the caller uses this one
        w = read(name)
        check_array(path, name, w)
        return w

    check_shapes(path, config, {name: extent(name)[2] for name in stored})
    weights = LazyWeights(weight_shapes(config), fetch)
    return Checkpoint(path, "llama2c", h.version, config, weights, _infos(segments), tuple(findings))


def _canonical(config: ModelConfig, stored: dict[str, np.ndarray]) -> Weights:
    """Canonical weights from llama2.c's tensors (stacked or per layer), q/k rows to rotate-half order."""
    weights: Weights = {}
    for name, array in stored.items():
        layer_prefix, _, key = name.rpartition(".")
        if key in _LAYER_KEYS:
            layers = [(int(layer_prefix.split(".")[1]), array)] if layer_prefix else list(enumerate(array))
            for i, w in layers:
                if key in ("wq", "wk"):  # in place, so only one layer's copy is ever extra
                    w[...] = to_rotate_half(w, config.n_heads if key == "wq" else config.n_kv_heads)
                weights[_CANONICAL[key].format(i)] = w
        else:
            weights[_CANONICAL[key]] = array
    return weights


def _infer_rope_theta(path: Path, h: Header, cos: np.ndarray, sin: np.ndarray) -> tuple[float, str]:
    """theta from the stored tables (position 1, the lowest frequency), then every entry checked against it."""
    half = h.head_size // 2
    theta = ROPE_THETA
    finding = f"RoPE tables are llama2.c's for theta {ROPE_THETA:g}"
    if h.seq_len >= 2 and half >= 2:
        angle = float(np.arctan2(np.float64(sin[1, half - 1]), np.float64(cos[1, half - 1])))
        if angle > 0:
            # angle = theta^(-2 (half-1) / head_size); 6 significant digits undo float32 rounding.
            theta = float(f"{angle ** (-h.head_size / (2 * (half - 1))):.6g}")
            finding = f"RoPE tables match theta {theta:g}"
    else:
        finding = f"RoPE theta cannot be told from tables of shape [{h.seq_len}, {half}]; {ROPE_THETA:g} assumed"
    exact_cos, exact_sin = (t.astype(np.float64) for t in rope_tables(h.seq_len, h.head_size, theta))
    error = max(float(np.max(np.abs(cos - exact_cos), initial=0)), float(np.max(np.abs(sin - exact_sin), initial=0)))
    # Tables computed with float32 angles (as llama2.c's model.py does) err by ~pos * eps32.
    tolerance = 8 * float(np.finfo(np.float32).eps) * (1 + h.seq_len)
    if not error <= tolerance:  # also catches NaN
        raise CheckpointError(
            path,
            "tensors freq_cis_real/freq_cis_imag",
            f"are not RoPE cos/sin tables (best fit theta {theta:g})",
            expected=f"max deviation <= {tolerance:.2e}",
            found=f"{error:.2e}",
        )
    if not theta > 1:
        raise CheckpointError(path, "tensors freq_cis_real/freq_cis_imag", "imply an invalid RoPE theta", found=theta)
    return theta, finding


# ----------------------------------------------------------------------------------------------
# Writing


def _check_writable(path: Path, config: ModelConfig, version: int) -> None:
    if version not in (0, 1, 2):
        raise CheckpointError(path, "version", "llama2.c formats are versions 0, 1 and 2", found=version)
    if config.family != "llama":
        raise CheckpointError(path, "config family", "llama2.c files hold Llama models only", found=config.family)
    if config.d_head * config.n_heads != config.d_model:
        raise CheckpointError(
            path,
            "config head_dim",
            "llama2.c's heads are dim / n_heads wide",
            expected=config.d_model // config.n_heads,
            found=config.head_dim,
        )
    for switch in ("rope_scaling", "qkv_bias", "o_bias"):  # Llama's switches llama2.c has no field for
        if getattr(config, switch) != SWITCH_DEFAULTS[switch]:
            raise CheckpointError(
                path,
                f"config {switch}",
                "llama2.c files cannot store it (its runtimes would drop it)",
                found=getattr(config, switch),
            )
    if config.norm_eps != NORM_EPS:
        raise CheckpointError(
            path,
            "config norm_eps",
            "llama2.c's runtimes hard-code RMSNorm eps 1e-5 and the format cannot store another",
            expected=NORM_EPS,
            found=config.norm_eps,
        )
    if version > 0 and config.rope_theta != ROPE_THETA:
        raise CheckpointError(
            path,
            "config rope_theta",
            f"version {version} cannot store RoPE theta (only version 0's tables can)",
            expected=ROPE_THETA,
            found=config.rope_theta,
        )


def _stored(config: ModelConfig, weights: Weights, seg: Segment) -> np.ndarray:
    """The array llama2.c stores for `seg`, from canonical weights."""
    if seg.key in ROPE_KEYS:
        cos, sin = rope_tables(config.n_ctx, config.d_head, config.rope_theta)
        return cos if seg.key == "freq_cis_real" else sin

    def one(layer: int) -> np.ndarray:
        w = np.asarray(weights[_CANONICAL[seg.key].format(layer)], dtype=np.float32)
        if seg.key in ("wq", "wk"):
            w = to_interleaved(w, config.n_heads if seg.key == "wq" else config.n_kv_heads)
        return w

    if seg.key not in _LAYER_KEYS:
        return one(0)
    if seg.layer is not None:
        return one(seg.layer)
    return np.stack([one(i) for i in range(config.n_layers)])


def _quantize(w: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """llama2.c's Q8_0: per group, scale = max|w| / 127 and int8 = round(w / scale)."""
    groups = w.reshape(-1, group_size).astype(np.float32)
    scales = np.abs(groups).max(axis=1) / np.float32(127.0)
    safe = np.where(scales > 0, scales, np.float32(1.0))
    values = np.round(groups / safe[:, None]).astype(np.int8)
    return values, scales.astype(np.float32)


def write_llama2c(
    path: str | Path, config: ModelConfig, weights: Weights, *, version: int = 0, group_size: int = DEFAULT_GROUP_SIZE
) -> None:
    """Write canonical weights as a llama2.c model file (all or nothing).

    Version 0 is what llama2.c's original run.c reads (RoPE tables stored); 1 is the float32 file of
    later run.c; 2 is runq.c's int8 Q8_0 (`group_size` halves until it divides d_model and d_ff).
    """
    path = Path(path)
    _check_writable(path, config, version)
    weights = {name: np.asarray(w, dtype=np.float32) for name, w in weights.items()}
    check_canonical(path, config, weights)
    h = header_for(config, version, group_size)
    with atomic_write(path) as handle:
        write_header(handle, h)
        for seg in layout(h):
            array = _stored(config, weights, seg)
            if seg.quantized:
                values, scales = _quantize(array, h.group_size)
                handle.write(values.tobytes())
                handle.write(scales.astype(_F32).tobytes())
            else:
                handle.write(np.ascontiguousarray(array, dtype=_F32).tobytes())
