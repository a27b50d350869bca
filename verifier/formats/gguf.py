"""GGUF, llama.cpp's file format, written from the canonical weights and read back, with the `gguf` package.

Both architectures llama.cpp has for the suite's families: `gpt2` (learned positions, fused qkv,
LayerNorm and GELU) and `llama` (RMSNorm, RoPE, SwiGLU, `head_count_kv < head_count` for
grouped-query attention). Tensors are named as llama.cpp names them (`blk.0.attn_q.weight`) and
laid out as it reads them, which `convert_hf_to_gguf.py` does for the same `transformers` weights:
GPT-2's `Conv1D` matrices are transposed to [d_out, d_in], Llama's q/k rows go from rotate-half
to the interleaved order llama.cpp's RoPE pairs.

`write_gguf(path, config, weights, tensor_type=...)` writes every matrix in `tensor_type` (`F32`,
or `Q8_0`: blocks of 32 int8 values with a float16 scale, which needs rows that are a multiple of
32 long); 1-D tensors (norm gains, biases) stay F32, as llama.cpp's quantizer leaves them. The
canonical weights carry no vocabulary, so the file gets placeholder pieces `<0>`, `<1>`, ... (for
programs driven by token ids). `read_gguf` reads such a file, or any `gpt2` / `llama` GGUF whose
tensors are F32, F16 or Q8_0, back into the canonical weights (quantized ones dequantized).
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from verifier.formats.checkpoint import Checkpoint, TensorInfo, check_canonical
from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import atomic_path, open_bounded
from verifier.formats.llama2c import to_interleaved, to_rotate_half
from verifier.model.config import ConfigError, ModelConfig
from verifier.model.weights import CLASSIFIER, Weights, weight_shapes

MAGIC = b"GGUF"
TENSOR_TYPES = {"F32": gguf.GGMLQuantizationType.F32, "Q8_0": gguf.GGMLQuantizationType.Q8_0}
_FILE_TYPES = {"F32": gguf.LlamaFileType.ALL_F32, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
_READABLE = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.Q8_0}
DEFAULT_ROPE_THETA = 10000.0  # llama.cpp's default where rope.freq_base is absent

# How a canonical matrix is stored: as it is, transposed (GPT-2's Conv1D), or with its q / k rows
# interleaved per head (and the inverse on reading).
_AS_IS, _CONV1D, _Q, _K = "as is", "conv1d", "q", "k"

_GPT2_LAYER = {
    "ln_1.weight": ("attn_norm.weight", _AS_IS),
    "ln_1.bias": ("attn_norm.bias", _AS_IS),
    "attn.c_attn.weight": ("attn_qkv.weight", _CONV1D),
    "attn.c_attn.bias": ("attn_qkv.bias", _AS_IS),
    "attn.c_proj.weight": ("attn_output.weight", _CONV1D),
    "attn.c_proj.bias": ("attn_output.bias", _AS_IS),
    "ln_2.weight": ("ffn_norm.weight", _AS_IS),
    "ln_2.bias": ("ffn_norm.bias", _AS_IS),
    "mlp.c_fc.weight": ("ffn_up.weight", _CONV1D),
    "mlp.c_fc.bias": ("ffn_up.bias", _AS_IS),
    "mlp.c_proj.weight": ("ffn_down.weight", _CONV1D),
    "mlp.c_proj.bias": ("ffn_down.bias", _AS_IS),
}
_LLAMA_LAYER = {
    "input_layernorm.weight": ("attn_norm.weight", _AS_IS),
    "self_attn.q_proj.weight": ("attn_q.weight", _Q),
    "self_attn.k_proj.weight": ("attn_k.weight", _K),
    "self_attn.v_proj.weight": ("attn_v.weight", _AS_IS),
    "self_attn.o_proj.weight": ("attn_output.weight", _AS_IS),
    "post_attention_layernorm.weight": ("ffn_norm.weight", _AS_IS),
    "mlp.gate_proj.weight": ("ffn_gate.weight", _AS_IS),
    "mlp.up_proj.weight": ("ffn_up.weight", _AS_IS),
    "mlp.down_proj.weight": ("ffn_down.weight", _AS_IS),
}
_GPT2_TOP = {
    "transformer.wte.weight": "token_embd.weight",
    "transformer.wpe.weight": "position_embd.weight",
    "transformer.ln_f.weight": "output_norm.weight",
    "transformer.ln_f.bias": "output_norm.bias",
}
_LLAMA_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}


def tensor_names(config: ModelConfig) -> dict[str, tuple[str, str]]:
    """Every canonical weight of `config` -> (its GGUF tensor name, how it is stored)."""
    gpt2 = config.family == "gpt2"
    top = _GPT2_TOP if gpt2 else _LLAMA_TOP
    names = {canonical: (stored, _AS_IS) for canonical, stored in top.items()}
    prefix = "transformer.h" if gpt2 else "model.layers"
    for i in range(config.n_layers):
        for key, (stored, how) in (_GPT2_LAYER if gpt2 else _LLAMA_LAYER).items():
            names[f"{prefix}.{i}.{key}"] = (f"blk.{i}.{stored}", how)
    if not config.tie_embeddings:
        names[CLASSIFIER] = ("output.weight", _AS_IS)  # absent: llama.cpp reads token_embd
    return names


def _store(config: ModelConfig, w: np.ndarray, how: str) -> np.ndarray:
    if how == _CONV1D:
        return np.ascontiguousarray(w.T)
    if how in (_Q, _K):
        return to_interleaved(w, config.n_heads if how == _Q else config.n_kv_heads)
    return w


def _unstore(config: ModelConfig, w: np.ndarray, how: str) -> np.ndarray:
    if how == _CONV1D:
        return np.ascontiguousarray(w.T)
    if how in (_Q, _K):
        return to_rotate_half(w, config.n_heads if how == _Q else config.n_kv_heads)
    return w


def placeholder_vocabulary(vocab_size: int) -> list[str]:
    """The pieces written for a model without a tokenizer: `<0>`, `<1>`, ..."""
    return [f"<{i}>" for i in range(vocab_size)]


def write_gguf(path: str | Path, config: ModelConfig, weights: Weights, *, tensor_type: str = "F32") -> None:
    """Write canonical weights as a GGUF file of architecture `config.family` (all or nothing).

    `tensor_type` is the type of every matrix: `F32` or `Q8_0` (rows a multiple of 32 long).
    """
    path = Path(path)
    if tensor_type not in TENSOR_TYPES:
        raise CheckpointError(
            path, "tensor type", "not one this writer makes", expected=list(TENSOR_TYPES), found=tensor_type
        )
    weights = {name: np.asarray(w, dtype=np.float32) for name, w in weights.items()}
    check_canonical(path, config, weights)
    qtype = TENSOR_TYPES[tensor_type]
    with atomic_path(path) as tmp:
        writer = gguf.GGUFWriter(tmp, config.family)
        _write_metadata(writer, config, tensor_type)
        for canonical, (stored, how) in tensor_names(config).items():
            array = _store(config, weights[canonical], how)
            if array.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
                writer.add_tensor(stored, array)
                continue
            if array.shape[-1] % 32:
                raise CheckpointError(
                    path, f"tensor {canonical}", f"rows of {array.shape[-1]} cannot be stored as {tensor_type}",
                    expected="a multiple of 32 (Q8_0's block size)", found=array.shape[-1],
                )  # fmt: skip
            writer.add_tensor(stored, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()


def _write_metadata(writer: Any, config: ModelConfig, tensor_type: str) -> None:
    writer.add_name(f"lm-verifier {config.family}")
    writer.add_file_type(_FILE_TYPES[tensor_type])
    writer.add_vocab_size(config.vocab_size)
    writer.add_context_length(config.n_ctx)
    writer.add_embedding_length(config.d_model)
    writer.add_block_count(config.n_layers)
    writer.add_feed_forward_length(config.d_ff)
    writer.add_head_count(config.n_heads)
    writer.add_head_count_kv(config.n_kv_heads)
    if config.family == "gpt2":
        writer.add_layer_norm_eps(config.norm_eps)
        writer.add_tokenizer_model("gpt2")
        writer.add_token_merges(["<0> <0>"])  # llama.cpp refuses a BPE vocabulary without merges
        special = config.vocab_size - 1  # GPT-2's <|endoftext|> is its last id
        writer.add_bos_token_id(special)
        writer.add_eos_token_id(special)
    else:
        writer.add_layer_norm_rms_eps(config.norm_eps)
        writer.add_rope_dimension_count(config.d_head)
        writer.add_rope_freq_base(config.rope_theta)
        writer.add_tokenizer_model("llama")
    writer.add_token_list(placeholder_vocabulary(config.vocab_size))
    writer.add_token_scores([0.0] * config.vocab_size)
    writer.add_token_types([gguf.TokenType.NORMAL] * config.vocab_size)


# ----------------------------------------------------------------------------------------------
# Reading


# GGUF value type -> its size in bytes (8: string, 9: array, whose sizes are read from the file)
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 4  # arrays of arrays: llama.cpp writes none


class _Scan:
    """Walks a GGUF header (metadata and tensor infos) checking every count and length against the
    bytes left, so that the `gguf` package, which loops over whatever count the file claims (a
    49-byte file claiming 2**61 array items never ends), is only handed a header that fits the file."""

    def __init__(self, path: Path, data: bytes | mmap.mmap, order: str) -> None:
        self.path, self.data, self.order, self.offset = path, data, order, 0

    def need(self, n_bytes: int, what: str) -> None:
        left = len(self.data) - self.offset
        if n_bytes > left:
            raise CheckpointError(self.path, what, f"claims {n_bytes:,} bytes at offset {self.offset:,}; "
                                  f"the file has {left:,} left")  # fmt: skip

    def uint(self, fmt: str, what: str) -> int:
        size = struct.calcsize(fmt)
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + fmt, self.data, self.offset)
        self.offset += size
        return int(value)

    def count(self, what: str, min_item_bytes: int) -> int:
        """A u64 count of items of at least `min_item_bytes` each, checked to fit before any loop."""
        n = self.uint("Q", what)
        self.need(n * min_item_bytes, f"{what} ({n:,} items)")
        return n

    def string(self, what: str) -> str:
        """Skip a string, returning its start (at most 100 characters: it names the field in errors)."""
        n = self.uint("Q", f"{what} length")
        self.need(n, what)
        self.offset += n
        return bytes(self.data[self.offset - n : self.offset - n + min(n, 100)]).decode("utf-8", "replace")

    def value(self, value_type: int, what: str, depth: int = 0) -> None:
        if value_type in _SCALAR_BYTES:
            self.need(_SCALAR_BYTES[value_type], what)
            self.offset += _SCALAR_BYTES[value_type]
        elif value_type == _STRING:
            self.string(what)
        elif value_type == _ARRAY and depth < _MAX_NESTING:
            item_type = self.uint("I", f"{what} item type")
            n = self.count(f"{what} array", _SCALAR_BYTES.get(item_type, 8 if item_type == _STRING else 12))
            if item_type in _SCALAR_BYTES:  # fixed-size items: checked above, skipped at once
                self.offset += n * _SCALAR_BYTES[item_type]
            else:
                for _ in range(n):
                    self.value(item_type, what, depth + 1)
        else:
            raise CheckpointError(self.path, what, "an unknown value type (or arrays nested too deep)",
                                  found=value_type)  # fmt: skip


def _scan(path: Path) -> None:
    """Raise CheckpointError unless every count and length of the GGUF header fits in the file."""
    with open_bounded(path) as reader:
        if reader.size < 24:
            return  # too short to claim anything: the package's own error is fine
        with mmap.mmap(reader.handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            (version,) = struct.unpack_from("<I", data, 4)
            order = ">" if version & 0xFFFF == 0 else "<"  # the package's test of a big-endian file
            if data[:4] != MAGIC or struct.unpack_from(order + "I", data, 4)[0] not in (2, 3):
                return  # not GGUF, or a version whose counts are u32: the package refuses it itself
            scan = _Scan(path, data, order)
            scan.offset = 8
            n_tensors = scan.count("GGUF tensor count", 8 + 4 + 4 + 8)  # name length, dims, type, offset
            n_kv = scan.count("GGUF metadata count", 8 + 4 + 1)  # key length, type, smallest value
            for i in range(n_kv):
                key = repr(scan.string(f"metadata key {i}"))  # quoted: a key may hold a newline
                scan.value(scan.uint("I", f"metadata {key} type"), f"metadata {key}")
            for i in range(n_tensors):
                scan.string(f"tensor {i} name")
                n_dims = scan.uint("I", f"tensor {i} dimension count")
                if n_dims > _MAX_DIMS:
                    raise CheckpointError(path, f"tensor {i} dimension count", f"more than {_MAX_DIMS}",
                                          found=n_dims)  # fmt: skip
                scan.need(n_dims * 8 + 4 + 8, f"tensor {i} dimensions, type and offset")
                scan.offset += n_dims * 8 + 4 + 8


def _open(path: Path) -> Any:
    _scan(path)
    try:
        return gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError, KeyError) as e:  # the package raises whatever its parsing meets
        raise CheckpointError(path, "GGUF file", f"cannot be parsed: {type(e).__name__}: {e}") from None


def _field(path: Path, reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is not None:
            return default
        raise CheckpointError(path, f"metadata {key}", "missing")
    try:
        return field.contents()
    except UnicodeDecodeError:  # the package decodes every string as UTF-8 when asked for it
        raise CheckpointError(path, f"metadata {key}", "a string that is not UTF-8") from None


def _int_field(path: Path, reader: Any, key: str, default: int | None = None) -> int:
    """An integer metadata value; another type (a string, an array, a float, a bool) is a CheckpointError."""
    value = _field(path, reader, key, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise CheckpointError(path, f"metadata {key}", f"must be an integer, not {type(value).__name__}", found=value)
    return int(value)


def _float32_field(path: Path, reader: Any, key: str, default: float | None = None) -> float:
    """A float metadata value (GGUF stores float32), as the shortest decimal that is that float32
    (1e-05, not 9.99e-06); another type is a CheckpointError."""
    value = _field(path, reader, key, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise CheckpointError(path, f"metadata {key}", f"must be a number, not {type(value).__name__}", found=value)
    return float(str(np.float32(value)))


def _config(path: Path, reader: Any) -> tuple[ModelConfig, list[str]]:
    arch = _field(path, reader, "general.architecture")
    if arch not in ("gpt2", "llama"):
        raise CheckpointError(path, "metadata general.architecture", "not an architecture the suite implements",
                              expected=["gpt2", "llama"], found=arch)  # fmt: skip
    tensors = {t.name: t for t in reader.tensors}
    embedding = tensors.get("token_embd.weight")
    if embedding is None:
        raise CheckpointError(path, "tensor token_embd.weight", "missing")
    if len(embedding.shape) != 2:
        raise CheckpointError(path, "tensor token_embd.weight", "must be 2-D [d_model, vocab_size]",
                              found=[int(n) for n in embedding.shape])  # fmt: skip
    findings = []
    n_heads = _int_field(path, reader, f"{arch}.attention.head_count")
    fields: dict[str, Any] = {
        "family": arch,
        "vocab_size": int(embedding.shape[1]),  # GGUF shapes list the fastest axis first
        "n_ctx": _int_field(path, reader, f"{arch}.context_length"),
        "d_model": _int_field(path, reader, f"{arch}.embedding_length"),
        "n_layers": _int_field(path, reader, f"{arch}.block_count"),
        "n_heads": n_heads,
        "n_kv_heads": _int_field(path, reader, f"{arch}.attention.head_count_kv", n_heads),
        "d_ff": _int_field(path, reader, f"{arch}.feed_forward_length"),
        "tie_embeddings": "output.weight" not in tensors,
    }
    if arch == "gpt2":
        fields["norm_eps"] = _float32_field(path, reader, "gpt2.attention.layer_norm_epsilon")
    else:
        fields["norm_eps"] = _float32_field(path, reader, "llama.attention.layer_norm_rms_epsilon")
        if "llama.rope.freq_base" not in reader.fields:
            findings.append(f"llama.rope.freq_base is not stored; llama.cpp's {DEFAULT_ROPE_THETA:g} assumed")
        fields["rope_theta"] = _float32_field(path, reader, "llama.rope.freq_base", DEFAULT_ROPE_THETA)
        d_head = fields["d_model"] // n_heads
        rot = _int_field(path, reader, "llama.rope.dimension_count", d_head)
        if rot != d_head:
            raise CheckpointError(path, "metadata llama.rope.dimension_count", "partial RoPE is not implemented",
                                  expected=d_head, found=rot)  # fmt: skip
    try:
        return ModelConfig(**fields), findings
    except ConfigError as e:
        raise CheckpointError(path, f"metadata ({e.field})", e.reason) from None


def read_gguf_config(path: str | Path) -> ModelConfig:
    """The config of a GGUF file, from its metadata and tensor shapes."""
    path = Path(path)
    return _config(path, _open(path))[0]


def read_gguf(path: str | Path) -> Checkpoint:
    """A `gpt2` or `llama` GGUF file as config + canonical weights (quantized tensors dequantized)."""
    path = Path(path)
    reader = _open(path)
    config, findings = _config(path, reader)
    stored = {t.name: t for t in reader.tensors}
    weights: Weights = {}
    for canonical, (name, how) in tensor_names(config).items():
        tensor = stored.pop(name, None)
        if tensor is None:
            raise CheckpointError(path, f"tensor {name}", f"missing (the {config.family} architecture's {canonical})")
        if tensor.tensor_type not in _READABLE:
            raise CheckpointError(path, f"tensor {name}", "stored in a type this reader does not dequantize",
                                  expected=[t.name for t in _READABLE], found=tensor.tensor_type.name)  # fmt: skip
        # Checked before it is dequantized and reordered by head, which assume it (a 0 or a wrong dimension
        # raised ValueError from numpy's reshape there).
        shape = weight_shapes(config)[canonical]
        expected = list(reversed(shape)) if how == _CONV1D else list(shape)
        found = [int(n) for n in reversed(tensor.shape)]  # GGUF lists the fastest axis first
        if found != expected:
            raise CheckpointError(path, f"tensor {name}", "wrong shape", expected=expected, found=found)
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        weights[canonical] = _unstore(config, values, how)
    if stored:
        findings.append(f"{len(stored)} tensors not read (not part of the model): {', '.join(list(stored)[:5])}")
    quantized = sorted({t.tensor_type.name for t in reader.tensors} - {"F32"})
    if quantized:
        findings.append(f"tensors stored as {', '.join(quantized)}, dequantized to float32")
    vocab = reader.fields.get("tokenizer.ggml.tokens")
    if vocab is not None:
        model = _field(path, reader, "tokenizer.ggml.model", "?")
        findings.append(f"a vocabulary of {len(vocab.data)} pieces (tokenizer model {model!r}) is stored, not read")
    check_canonical(path, config, weights)
    tensors = tuple(
        TensorInfo(t.name, tuple(int(n) for n in reversed(t.shape)), t.tensor_type.name) for t in reader.tensors
    )
    return Checkpoint(path, "gguf", int(_field(path, reader, "GGUF.version", 3)), config, weights, tensors,
                      tuple(findings))  # fmt: skip
