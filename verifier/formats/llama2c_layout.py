"""llama2.c's file layout: the header, which tensors follow it in which order and size, and the header read
(checked against the file size) and written. Separate from `verifier.formats.llama2c`, which maps those
tensors to and from the canonical weights, so the byte layout of the three versions is read in one place.

Layouts, little-endian, as llama2.c's `export.py` writes them and its `run.c` / `runq.c` read them:

- v0 (legacy): 7 int32 `dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len`
  (a negative vocab_size means an unshared classifier), then float32: tok_embeddings [V, dim],
  rms_att [L, dim], wq [L, dim, dim], wk, wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim],
  w1 [L, hidden_dim, dim], w2 [L, dim, hidden_dim], w3 [L, hidden_dim, dim], rms_final [dim],
  the RoPE tables freq_cis_real, freq_cis_imag [seq_len, head_size/2], then wcls [V, dim] if unshared.
- v1: a 256-byte header (uint32 magic 0x616b3432 "ak42", int32 version, the 7 ints, uint8 shared
  classifier, zero padding), then float32: rms_att, rms_ffn, rms_final, tok_embeddings, wq, wk, wv,
  wo, w1, w2, w3, and wcls if unshared. No RoPE tables: RoPE uses theta 10000.
- v2: the v1 header plus int32 group_size at byte 37; float32 rms_att, rms_ffn, rms_final; then each
  matrix (tok_embeddings, every layer's wq, ..., every layer's w3, wcls if unshared) as int8 values
  followed by one float32 scale per group of group_size values (value = int8 * scale).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import BoundedReader
from verifier.model.config import ConfigError, ModelConfig

MAGIC = 0x616B3432
HEADER_BYTES = 256  # versions 1 and 2
NORM_EPS = 1e-5  # hard-coded in run.c / runq.c
ROPE_THETA = 10000.0  # llama2.c's model.py default; versions 1 and 2 cannot store another
DEFAULT_GROUP_SIZE = 64
_MAX_SEGMENTS_SEARCHED = 100_000  # for naming where a truncated file ends

_V0_HEADER = struct.Struct("<7i")
_V1_HEADER = struct.Struct("<Ii7iB")
_GROUP_SIZE = struct.Struct("<i")
_FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")
# Which header field a ConfigError about a config field comes from.
_FIELD_OF = {
    "d_model": "dim", "d_ff": "hidden_dim", "n_layers": "n_layers", "n_heads": "n_heads",
    "n_kv_heads": "n_kv_heads", "vocab_size": "vocab_size", "n_ctx": "seq_len",
}  # fmt: skip
ROPE_KEYS = ("freq_cis_real", "freq_cis_imag")


@dataclass(frozen=True)
class Header:
    """The header of a llama2.c model file; `group_size` is 0 except in version 2."""

    version: int
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int
    shared_classifier: bool
    group_size: int = 0

    @property
    def head_size(self) -> int:
        return self.dim // self.n_heads

    def describe(self) -> str:
        fields = ", ".join(f"{name} {getattr(self, name)}" for name in _FIELDS)
        return f"version {self.version} header ({fields}, shared classifier {self.shared_classifier})"


@dataclass(frozen=True)
class Segment:
    """One stored tensor: llama2.c's name, shape as stored, and whether it is int8 + scales (v2).

    Per-layer tensors are stacked [n_layers, ...] in versions 0 and 1; version 2 stores each
    layer's matrix on its own (`layer` set).
    """

    key: str
    shape: tuple[int, ...]
    layer: int | None = None
    quantized: bool = False

    @property
    def name(self) -> str:
        return self.key if self.layer is None else f"layers.{self.layer}.{self.key}"

    @property
    def count(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def nbytes(self, group_size: int) -> int:
        return self.count + 4 * (self.count // group_size) if self.quantized else 4 * self.count


# ----------------------------------------------------------------------------------------------
# Layout


def _matrices(h: Header) -> dict[str, tuple[int, int]]:
    """The shape of each per-layer matrix, [d_out, d_in]."""
    d, kv = h.dim, h.n_kv_heads * h.head_size
    return {
        "wq": (d, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, d),
        "w1": (h.hidden_dim, d), "w2": (d, h.hidden_dim), "w3": (h.hidden_dim, d),
    }  # fmt: skip


def partial_group_findings(h: Header) -> list[str]:
    """What runq.c gets wrong in a version-2 file whose matrix rows end in a partial group.

    runq.c's matmul walks whole groups of each row only (`j <= n - GS`), so where an input size is
    not a multiple of group_size it drops the last inputs of every row: it then computes another
    model than the one the file describes (whose groups run on across rows, as export.py writes them).
    """
    inputs = {"dim": h.dim, "hidden_dim": h.hidden_dim}
    users = {"dim": "wq, wk, wv, wo, w1, w3 and the classifier", "hidden_dim": "w2"}
    return [
        f"runq.c drops the last {size % h.group_size} inputs of every row of {users[name]}: {name} {size} is not "
        f"a multiple of group_size {h.group_size}, so runq.c computes another model than this file describes"
        for name, size in inputs.items()
        if size % h.group_size
    ]


def layout(h: Header) -> Iterator[Segment]:
    """Every tensor of a file with header `h`, in file order (lazily: v2 has one per layer and matrix)."""
    d, L, V = h.dim, h.n_layers, h.vocab_size
    matrices = _matrices(h)
    classifier = [] if h.shared_classifier else ["wcls"]
    norms = [Segment("rms_att", (L, d)), Segment("rms_ffn", (L, d)), Segment("rms_final", (d,))]
    if h.version == 0:
        yield Segment("tok_embeddings", (V, d))
        yield norms[0]
        yield from (Segment(key, (L, *matrices[key])) for key in ("wq", "wk", "wv", "wo"))
        yield norms[1]
        yield from (Segment(key, (L, *matrices[key])) for key in ("w1", "w2", "w3"))
        yield norms[2]
        yield from (Segment(key, (h.seq_len, h.head_size // 2)) for key in ROPE_KEYS)
    elif h.version == 1:
        yield from norms
        yield Segment("tok_embeddings", (V, d))
        yield from (Segment(key, (L, *shape)) for key, shape in matrices.items())
    else:
        yield from norms
        yield Segment("tok_embeddings", (V, d), quantized=True)
        yield from (Segment(key, shape, layer, True) for key, shape in matrices.items() for layer in range(L))
    yield from (Segment(key, (V, d), quantized=h.version == 2) for key in classifier)


def header_bytes(version: int) -> int:
    return _V0_HEADER.size if version == 0 else HEADER_BYTES


def expected_size(h: Header) -> int:
    """The exact file size a header implies, in closed form (Python ints: absurd headers cost nothing)."""
    d, L, V = h.dim, h.n_layers, h.vocab_size
    floats = 2 * L * d + d  # the RMSNorm gains, float32 in every version
    if h.version == 0:
        floats += 2 * h.seq_len * (h.head_size // 2)
    matrices = [V * d, *(L * rows * cols for rows, cols in _matrices(h).values())]
    if not h.shared_classifier:
        matrices.append(V * d)
    if h.version < 2:
        return header_bytes(h.version) + 4 * (floats + sum(matrices))
    # int8 values plus one float32 scale per group; every per-layer count divides by group_size.
    return header_bytes(h.version) + 4 * floats + sum(n + 4 * (n // h.group_size) for n in matrices)


# ----------------------------------------------------------------------------------------------
# Reading the header


def read_header(reader: BoundedReader) -> Header:
    """The header at the start of the file, with every field checked against the file size."""
    path = reader.path
    if reader.size < 4:
        raise CheckpointError(
            path,
            "header",
            "file is too short to be a llama2.c checkpoint",
            expected=f"at least {_V0_HEADER.size} bytes",
            found=f"{reader.size} bytes",
        )
    (magic,) = struct.unpack("<I", reader.read(4, "header"))
    reader.handle.seek(0)
    if magic == MAGIC:
        raw = reader.read(_V1_HEADER.size, "header (version 1/2, 256 bytes)")
        _, version, *dims, shared = _V1_HEADER.unpack(raw)
        if version not in (1, 2):
            raise CheckpointError(
                path,
                "header field version",
                "unsupported llama2.c format version",
                expected="1 or 2 after the magic 'ak42'",
                found=version,
            )
        if shared not in (0, 1):
            raise CheckpointError(path, "header field shared_classifier", "must be a 0/1 flag", found=shared)
        group_size = 0
        if version == 2:
            (group_size,) = _GROUP_SIZE.unpack(reader.read(_GROUP_SIZE.size, "header field group_size"))
        reader.require(HEADER_BYTES - reader.offset, "header (256 bytes)")
        header = _header(version, dims, bool(shared), group_size)
    else:
        dims = list(_V0_HEADER.unpack(reader.read(_V0_HEADER.size, "header (version 0, 7 int32)")))
        vocab = dims[5]
        dims[5] = abs(vocab)
        header = _header(0, dims, vocab > 0, 0)
    _check_dims(path, header)
    _check_size(path, header, reader.size)
    reader.handle.seek(header_bytes(header.version))
    return header


def _header(version: int, dims: list[int], shared_classifier: bool, group_size: int) -> Header:
    dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len = dims
    return Header(
        version, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len, shared_classifier, group_size
    )


def _check_dims(path: Path, h: Header) -> None:
    for name in _FIELDS:
        value = getattr(h, name)
        if value <= 0:
            raise CheckpointError(path, f"header field {name}", "must be positive", found=value)
    try:
        config_of(h)
    except ConfigError as e:
        raise CheckpointError(path, f"header field {_FIELD_OF.get(e.field, e.field)}", e.reason) from None
    if h.version == 2:
        if h.group_size <= 0:
            raise CheckpointError(path, "header field group_size", "must be positive", found=h.group_size)
        counts = {"tok_embeddings": h.vocab_size * h.dim} | {k: r * c for k, (r, c) in _matrices(h).items()}
        for key, count in counts.items():
            if count % h.group_size:
                raise CheckpointError(
                    path,
                    "header field group_size",
                    f"does not divide the size of {key}",
                    expected=f"a divisor of {count}",
                    found=h.group_size,
                )


def _check_size(path: Path, h: Header, size: int) -> None:
    """Raise CheckpointError unless the file is exactly as long as the header says, naming where it ends."""
    expected = expected_size(h)
    if size == expected:
        return
    if size > expected:
        hint = ""
        if size - expected == 4 * h.vocab_size * h.dim and h.shared_classifier:
            hint = "; that is exactly an unshared classifier [vocab_size, dim]: is the shared-classifier flag wrong?"
        raise CheckpointError(
            path,
            "file size",
            f"{size - expected:,} bytes after the last tensor{hint}; the {h.describe()} implies the size expected",
            expected=f"{expected:,} bytes",
            found=f"{size:,} bytes",
        )
    offset = header_bytes(h.version)
    where = "inside the header"
    for seg in itertools.islice(layout(h), _MAX_SEGMENTS_SEARCHED):  # hostile headers can imply billions
        end = offset + seg.nbytes(h.group_size)
        if size == offset:
            where = f"at the start of tensor {seg.name}"
            break
        if size < end:
            where = f"inside tensor {seg.name} ({size - offset:,} of its {end - offset:,} bytes)"
            break
        offset = end
    raise CheckpointError(
        path,
        "file size",
        f"file is truncated (it ends {where}); the {h.describe()} implies the size expected",
        expected=f"{expected:,} bytes",
        found=f"{size:,} bytes",
    )


def config_of(h: Header, rope_theta: float = ROPE_THETA) -> ModelConfig:
    return ModelConfig(
        family="llama",
        vocab_size=h.vocab_size,
        n_ctx=h.seq_len,
        d_model=h.dim,
        n_layers=h.n_layers,
        n_heads=h.n_heads,
        n_kv_heads=h.n_kv_heads,
        d_ff=h.hidden_dim,
        norm_eps=NORM_EPS,
        tie_embeddings=h.shared_classifier,
        rope_theta=rope_theta,
    )


# ----------------------------------------------------------------------------------------------
# Writing the header


def header_for(config: ModelConfig, version: int, group_size: int = DEFAULT_GROUP_SIZE) -> Header:
    """The header of `config` in `version`; v2's group size backs off (halves) until it divides every
    matrix's input size (dim and hidden_dim), so that no row ends in a partial group."""
    if version == 2:
        while config.d_model % group_size or config.d_ff % group_size:
            group_size //= 2
    return Header(
        version, config.d_model, config.d_ff, config.n_layers, config.n_heads, config.n_kv_heads,
        config.vocab_size, config.n_ctx, config.tie_embeddings, group_size if version == 2 else 0,
    )  # fmt: skip


def write_header(handle: BinaryIO, h: Header) -> None:
    if h.version == 0:
        vocab = h.vocab_size if h.shared_classifier else -h.vocab_size
        handle.write(_V0_HEADER.pack(h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, vocab, h.seq_len))
        return
    raw = _V1_HEADER.pack(
        MAGIC,
        h.version,
        h.dim,
        h.hidden_dim,
        h.n_layers,
        h.n_heads,
        h.n_kv_heads,
        h.vocab_size,
        h.seq_len,
        int(h.shared_classifier),
    )
    if h.version == 2:
        raw += _GROUP_SIZE.pack(h.group_size)
    handle.write(raw.ljust(HEADER_BYTES, b"\0"))
