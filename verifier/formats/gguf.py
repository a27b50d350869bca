"""GGUF, llama.cpp's file format, written from the canonical weights and read back, with the `gguf` package.

The architectures llama.cpp has for the suite's families: `gpt2` (learned positions, fused qkv,
LayerNorm and GELU), `llama` (Llama, Mistral and Mixtral: RMSNorm, RoPE, SwiGLU, grouped-query
attention, routed experts), `qwen2`, `qwen3`, `gemma`, `gemma2`, `qwen2moe` (routed experts and a
shared expert), `qwen3moe` (Qwen3's attention, routed experts that it always renormalises), `phi3` (fused
layouts, partial rotary), `chatglm` (GLM: its RoPE pairs adjacent
dims of a partial rotary, as GLM computes on its stored rows), `smollm3` (Llama with RoPE off on every
fourth layer, which no key says: its reader sets them) and `olmo2` (norms after the sublayers only, as
Gemma 2's after-norms are named, and q/k norms over the whole projection). Tensors are named as llama.cpp names them
(`blk.0.attn_q.weight`) and laid out as it reads them, which `convert_hf_to_gguf.py` does for the
same `transformers` weights: GPT-2's `Conv1D` matrices are transposed to [d_out, d_in]; the q/k
rows (and biases) of `llama` and `smollm3` go from rotate-half to the interleaved pairs its RoPE rotates (the
other architectures rotate halves, as HF does); Gemma's norm weights are stored as 1 + w, which is
what llama.cpp multiplies by (read back as w: 1 + the weight read is the stored value exactly).

Each switch is stored under llama.cpp's key where it has one: linear RoPE scaling
(`rope.scaling.type`/`factor`), Llama 3's as the `rope_freqs` tensor llama.cpp divides the
frequencies by, head_dim (`attention.key_length`), the window (`attention.sliding_window`, with
`attention.sliding_window_pattern` per layer), Gemma 2's caps. Where llama.cpp has none, the
suite's own `lm_verifier.*` keys (which llama.cpp never reads) keep what is needed to read the
file back: Llama 3's four scaling parameters, Gemma 2's query_pre_attn_scalar. A config the
architecture cannot hold (`unsupported`) is refused by name. A Mistral without a window is a
`llama` file and reads back as Llama (the same model).

`write_gguf(path, config, weights, tensor_type=...)` writes every matrix in `tensor_type` (`F32`;
`Q8_0`: blocks of 32 int8 values with a float16 scale; or `Q4_0`: blocks of 32 4-bit codes with a
float16 scale; the quantized types need rows that are a multiple of 32 long); 1-D tensors (norm
gains, biases) and MoE routers stay F32, as llama.cpp's quantizer leaves them.
A MoE layer's experts are stacked per matrix, [n_experts, rows, columns] (`ffn_gate_exps`, ...), as
the converter merges them; Phi-3's fused q/k/v and gate/up are stored fused, as llama.cpp's phi3 reads them. The
canonical weights carry no vocabulary, so the file gets placeholder pieces `<0>`, `<1>`, ... (for
programs driven by token ids). `read_gguf` reads such a file, or any GGUF of these architectures
whose tensors are F32, F16, BF16, Q8_0, Q4_0 or a type of llama.cpp's quantizer's common recipes (Q4_1,
Q5_0, Q5_1, Q2_K to Q6_K: a Q4_K_M file), back into the canonical weights (quantized ones dequantized);
what a file of llama.cpp's converter leaves out is read as llama.cpp runs it (Gemma 2's layers
alternating from a sliding layer 0, its query scale by llama.cpp's rule), with a finding.

Which tensor each weight becomes is `verifier.formats.gguf_layout`; the bounded header scan and typed
metadata values are `verifier.formats.gguf_container`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import gguf
import numpy as np

from verifier.formats.checkpoint import Checkpoint, TensorInfo, check_canonical
from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import atomic_path
from verifier.formats.gguf_container import float32_field, int_field, open_reader, read_field
from verifier.formats.gguf_layout import (
    ARCHITECTURES,
    CONV1D,
    EXPERT,
    ROPE_FREQS,
    llama3_rope_factors,
    store,
    tensor_names,
    unstore,
)
from verifier.model.config import (
    FAMILY_SWITCHES,
    SIZE_MAXIMA,
    ConfigError,
    Family,
    ModelConfig,
    RopeScaling,
    check_size,
)
from verifier.model.families import RECORDS
from verifier.model.weights import Weights, weight_shapes

TENSOR_TYPES = {
    "F32": gguf.GGMLQuantizationType.F32,
    "Q8_0": gguf.GGMLQuantizationType.Q8_0,
    "Q4_0": gguf.GGMLQuantizationType.Q4_0,
}
_FILE_TYPES = {
    "F32": gguf.LlamaFileType.ALL_F32,
    "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
}
# F16 and BF16: what llama.cpp's converter writes by default (it keeps a published checkpoint's type);
# the types of its quantizer's common recipes (Q4_K_M's Q4_K and Q6_K, Q5_K_M's Q5_K, Q4_1, Q5_0, ...).
_READABLE = {
    getattr(gguf.GGMLQuantizationType, name)
    for name in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
}
DEFAULT_ROPE_THETA = 10000.0  # llama.cpp's default where rope.freq_base is absent

# Routers stay F32 in a quantized file, as convert_hf_to_gguf.py keeps FFN_GATE_INP and FFN_GATE_INP_SHEXP
# ("conditions should closely match those in llama_model_quantize_internal"): a token's expert choice
# flips on small changes of its router logits.
_KEPT_F32 = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight")
# What each architecture has no tensor or key for (llama.cpp would refuse or ignore it): the writer refuses.
_NO_BIAS = ("qwen3", "gemma", "gemma2", "qwen3_moe", "smollm3", "olmo2")
_TIED_ONLY = ("gemma", "gemma2")  # no output.weight: the classifier is always token_embd
# Keys llama.cpp has none for, so it never reads them: what the suite needs to read its own files back.
QUERY_SCALE_KEY = "lm_verifier.query_pre_attn_scalar"
LLAMA3_KEY = "lm_verifier.rope_scaling.llama3.{}"
_LLAMA3_FIELDS = ("factor", "low_freq_factor", "high_freq_factor", "original_n_ctx")


def unsupported(config: ModelConfig) -> str | None:
    """Why llama.cpp's architecture for `config` cannot hold it (no tensor or key for a switch), or None."""
    family = config.family
    if family == "glm" and config.n_heads * config.d_head != config.d_model:
        return "llama.cpp's chatglm architecture has n_heads * head_dim == d_model (its attn_output is square)"
    if config.dense_layers:
        return f"llama.cpp's {ARCHITECTURES[family]} architecture routes every layer: it has no dense layers"
    if family == "qwen2_moe" and config.d_shared_expert is None:
        return "llama.cpp's qwen2moe architecture requires the shared expert (its ffn_*_shexp tensors)"
    if family == "qwen3_moe" and not config.norm_topk:
        return "llama.cpp's qwen3moe always renormalises the top k (its MoE block's norm_w is true)"
    if family == "qwen2_moe" and config.tie_embeddings:
        return "llama.cpp's qwen2moe architecture requires output.weight: it cannot tie the classifier"
    if family in _NO_BIAS and (config.qkv_bias or config.o_bias):  # measured: tests/llamacpp/test_families.py
        return (
            f"llama.cpp's {family} architecture does not load every q/k/v/o bias (it refuses such a file: "
            "'wrong number of tensors')"
        )
    if family in _TIED_ONLY and not config.tie_embeddings:
        return f"llama.cpp's {family} architecture has no output.weight: its classifier is the embedding"
    if config.rope_scaling is not None and config.rope_scaling.kind == "llama3" and ARCHITECTURES[family] != "llama":
        return f"llama.cpp reads Llama 3's rope_freqs in its llama architecture, not in {ARCHITECTURES[family]}"
    if family == "smollm3":
        return _smollm3_unsupported(config)
    if family == "olmo2" and config.tie_embeddings:
        return "llama.cpp's olmo2 architecture requires output.weight: it cannot tie the classifier"
    if family == "olmo2" and config.n_heads * config.d_head != config.d_model:
        return "llama.cpp's olmo2 architecture has head_dim = d_model / n_heads (its attn_output is square)"
    if family == "gemma2" and (config.attn_softcap is None or config.final_softcap is None):
        return (
            "llama.cpp's gemma2 always soft-caps (50 and 30 when no cap is stored): it cannot run Gemma 2 without them"
        )
    return None


def _smollm3_unsupported(config: ModelConfig) -> str | None:
    """What llama.cpp's smollm3 cannot hold: it has no window, and RoPE off on every fourth layer only."""
    if config.sliding_window is not None:
        return "llama.cpp's smollm3 architecture has no sliding window"
    if config.nope_layers != smollm3_nope_layers(config.n_layers):
        return "llama.cpp's smollm3 architecture turns RoPE off on every fourth layer (layers 3, 7, ...) and no other"
    return None


def smollm3_nope_layers(n_layers: int) -> tuple[int, ...]:
    """The layers llama.cpp's smollm3 runs without RoPE: (i + 1) a multiple of 4 (its n_no_rope_layer_step)."""
    return tuple(i for i in range(n_layers) if (i + 1) % 4 == 0)


def placeholder_vocabulary(vocab_size: int) -> list[str]:
    """The pieces written for a model without a tokenizer: `<0>`, `<1>`, ..."""
    return [f"<{i}>" for i in range(vocab_size)]


def write_gguf(path: str | Path, config: ModelConfig, weights: Weights, *, tensor_type: str = "F32") -> None:
    """Write canonical weights as a GGUF file of llama.cpp's architecture for `config.family` (all or nothing).

    `tensor_type` is the type of every matrix: `F32`, `Q8_0` or `Q4_0` (rows a multiple of 32 long). A
    config the architecture cannot hold (`unsupported`) is a CheckpointError saying why.
    """
    path = Path(path)
    if tensor_type not in TENSOR_TYPES:
        raise CheckpointError(
            path, "tensor type", "not one this writer makes", expected=list(TENSOR_TYPES), found=tensor_type
        )
    reason = unsupported(config)
    if reason is not None:
        raise CheckpointError(path, f"{config.family} config", reason)
    weights = {name: np.asarray(w, dtype=np.float32) for name, w in weights.items()}
    check_canonical(path, config, weights)
    qtype = TENSOR_TYPES[tensor_type]
    with atomic_path(path) as tmp:
        writer = gguf.GGUFWriter(tmp, ARCHITECTURES[config.family])
        _write_metadata(writer, config, tensor_type)
        if config.rope_scaling is not None and config.rope_scaling.kind == "llama3":
            writer.add_tensor(ROPE_FREQS, llama3_rope_factors(config))
        stacks: dict[str, list[np.ndarray]] = {}
        for canonical, (stored, how) in tensor_names(config).items():
            array = store(config, weights[canonical], how)
            if how.startswith(EXPERT):  # written once the layer's last expert is in: [n_experts, rows, columns]
                stacks.setdefault(stored, []).append(array)
                if len(stacks[stored]) < config.n_experts:
                    continue
                array = np.stack(stacks.pop(stored))
            if array.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32 or stored.endswith(_KEPT_F32):
                writer.add_tensor(stored, array)
                continue
            block = gguf.GGML_QUANT_SIZES[qtype][0]  # values per block: 32 for Q8_0 and Q4_0
            if array.shape[-1] % block:
                raise CheckpointError(
                    path, f"tensor {canonical}", f"rows of {array.shape[-1]} cannot be stored as {tensor_type}",
                    expected=f"a multiple of {block} ({tensor_type}'s block size)", found=array.shape[-1],
                )  # fmt: skip
            writer.add_tensor(stored, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()


def _write_metadata(writer: Any, config: ModelConfig, tensor_type: str) -> None:
    # llama.cpp sets token attributes by the model's name: one containing "phi3" or "phi-3" must have a
    # "</s>" piece (its loader throws unordered_map::at without one), which the placeholder vocabulary has not.
    writer.add_name(f"lm-verifier {config.family}".replace("phi3", "phi 3"))
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
        _write_rope_family_metadata(writer, config)
        writer.add_tokenizer_model("llama")
    writer.add_token_list(placeholder_vocabulary(config.vocab_size))
    writer.add_token_scores([0.0] * config.vocab_size)
    writer.add_token_types([gguf.TokenType.NORMAL] * config.vocab_size)


def _write_rope_family_metadata(writer: Any, config: ModelConfig) -> None:
    """The keys of the switches, under llama.cpp's names where it has one (convert_hf_to_gguf.py's)."""
    writer.add_layer_norm_rms_eps(config.norm_eps)
    writer.add_key_length(config.d_head)
    writer.add_value_length(config.d_head)
    writer.add_rope_dimension_count(config.rotated_dims)  # partial rotary: the first rotary_dim dims of a head
    writer.add_rope_freq_base(config.rope_theta)
    scaling = config.rope_scaling
    if scaling is not None and scaling.kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(scaling.factor)
    if scaling is not None and scaling.kind == "llama3":  # llama.cpp reads rope_freqs; these are for reading back
        for field in _LLAMA3_FIELDS:
            value = getattr(scaling, field)
            if field == "original_n_ctx":
                writer.add_uint32(LLAMA3_KEY.format(field), value)
            else:
                writer.add_float32(LLAMA3_KEY.format(field), value)
    # A window no layer uses is no window, and is written as none: llama.cpp's gemma2 aborts the process
    # on a pattern without a sliding layer (GGML_ASSERT(hparams.is_swa_any()), llama-model.cpp).
    if any(config.window(i) is not None for i in range(config.n_layers)):
        assert config.sliding_window is not None
        writer.add_sliding_window(config.sliding_window)
        if config.layer_types or config.family == "gemma2":  # without it, every layer slides (gemma2's alternate)
            writer.add_sliding_window_pattern([config.window(i) is not None for i in range(config.n_layers)])
    if config.attn_softcap is not None:
        writer.add_attn_logit_softcapping(config.attn_softcap)
    if config.final_softcap is not None:
        writer.add_final_logit_softcapping(config.final_softcap)
    if config.query_scale is not None:
        writer.add_uint32(QUERY_SCALE_KEY, config.query_scale)
    if config.n_experts:
        writer.add_expert_count(config.n_experts)
        writer.add_expert_used_count(config.top_k)
    if "d_expert" in FAMILY_SWITCHES[config.family][1]:  # Qwen2-MoE's and Qwen3-MoE's experts have their own size
        writer.add_expert_feed_forward_length(config.expert_d_ff)
    if config.family == "qwen2_moe":
        if config.d_shared_expert is not None:
            writer.add_expert_shared_feed_forward_length(config.d_shared_expert)
        writer.add_expert_weights_norm(config.norm_topk)  # llama.cpp's key for renormalising the top k


# ----------------------------------------------------------------------------------------------
# Reading


# The metadata key each config field is read from, in architecture {}: errors name it.
_KEYS = {
    "n_ctx": "{}.context_length",
    "d_model": "{}.embedding_length",
    "n_layers": "{}.block_count",
    "n_heads": "{}.attention.head_count",
    "n_kv_heads": "{}.attention.head_count_kv",
    "d_ff": "{}.feed_forward_length",
    "rope_theta": "{}.rope.freq_base",
}
_EPS_KEYS = {arch: f"{arch}.attention.layer_norm_rms_epsilon" for arch in set(ARCHITECTURES.values())} | {
    "gpt2": "gpt2.attention.layer_norm_epsilon"
}
# llama.cpp's architecture -> the suite's family: the first of the families stored in it (a `llama` file with
# a sliding window is Mistral's, one with experts Mixtral's: `_switches`).
_FAMILY: dict[str, Family] = {arch: cast(Family, family) for family, arch in reversed(ARCHITECTURES.items())}
# llama.cpp's gemma2 soft-caps with these where the file stores no cap (its hparams' defaults).
_GEMMA2_DEFAULT_CAPS = {"attn_softcap": 50.0, "final_softcap": 30.0}
_GEMMA2_27B_LAYERS = 46  # llama.cpp scales Gemma 2's queries by 1/sqrt(d_model / n_heads) at this depth only


def _switches(path: Path, reader: Any, arch: str, fields: dict[str, Any], findings: list[str]) -> dict[str, Any]:
    """The switches of a RoPE family's file: from its keys and which tensors it has."""
    for field in ("d_model", "n_layers", "n_heads"):  # used below before the config checks them
        check_size(field, fields[field], SIZE_MAXIMA[field])
    tensors = {t.name for t in reader.tensors}
    window_key = gguf.Keys.Attention.SLIDING_WINDOW.format(arch=arch)
    experts_key = gguf.Keys.LLM.EXPERT_COUNT.format(arch=arch)
    family: Family = _FAMILY[arch]
    if arch == "llama" and experts_key in reader.fields:  # Mixtral: llama with experts
        family = "mixtral"
    elif arch == "llama" and window_key in reader.fields:
        family = "mistral"
    switches: dict[str, Any] = {"family": family, **FAMILY_SWITCHES[family][0]}
    if RECORDS[family].moe:
        switches |= _expert_switches(path, reader, arch, fields, tensors, findings)
    if f"{arch}.attention.key_length" in reader.fields:  # absent: d_model / n_heads, which must divide
        key_length = int_field(path, reader, f"{arch}.attention.key_length")
        if key_length != fields["d_model"] // fields["n_heads"] or fields["d_model"] % fields["n_heads"]:
            switches["head_dim"] = key_length  # else None: the config reader's one form of the same model
    if family not in ("qwen2", "qwen2_moe"):  # their q/k/v biases are fixed by the family
        switches["qkv_bias"] = "blk.0.attn_q.bias" in tensors
        switches["o_bias"] = "blk.0.attn_output.bias" in tensors
    scaling_type = reader.fields.get(f"{arch}.rope.scaling.type")
    if scaling_type is not None:
        kind = read_field(path, reader, f"{arch}.rope.scaling.type")
        if kind != "linear":
            raise CheckpointError(path, f"metadata {arch}.rope.scaling.type", "not a RoPE scaling the suite implements",
                                  expected=["linear"], found=kind)  # fmt: skip
        factor = float32_field(path, reader, f"{arch}.rope.scaling.factor")
        switches["rope_scaling"] = RopeScaling("linear", factor)
    if ROPE_FREQS in tensors:
        if LLAMA3_KEY.format("factor") in reader.fields:
            values = {f: float32_field(path, reader, LLAMA3_KEY.format(f)) for f in _LLAMA3_FIELDS[:3]}
            original = int_field(path, reader, LLAMA3_KEY.format("original_n_ctx"))
            switches["rope_scaling"] = RopeScaling("llama3", original_n_ctx=original, **values)
        else:  # a file of llama.cpp's converter: only the table
            table = next(t for t in reader.tensors if t.name == ROPE_FREQS)
            theta = fields.get("rope_theta", DEFAULT_ROPE_THETA)
            d_head = switches.get("head_dim") or fields["d_model"] // fields["n_heads"]
            switches["rope_scaling"] = _llama3_from_table(
                path, np.asarray(table.data, np.float64).ravel(), theta, d_head
            )
            findings.append(
                f"Llama 3 RoPE scaling solved from {ROPE_FREQS} ({switches['rope_scaling']}; low_freq_factor 1 "
                "assumed, as every published Llama 3 has it): its table is the stored one"
            )
    if window_key in reader.fields:
        switches["sliding_window"] = int_field(path, reader, window_key)
        pattern_key = gguf.Keys.Attention.SLIDING_WINDOW_PATTERN.format(arch=arch)
        if pattern_key in reader.fields:
            pattern = read_field(path, reader, pattern_key)
            if (
                not isinstance(pattern, list)
                or len(pattern) != fields["n_layers"]
                or not all(isinstance(p, (bool, np.bool_)) for p in pattern)
            ):
                raise CheckpointError(path, f"metadata {pattern_key}", "must list one bool a layer",
                                      expected=fields["n_layers"], found=pattern)  # fmt: skip
            switches["layer_types"] = tuple("sliding_attention" if p else "full_attention" for p in pattern)
        elif family == "gemma2":  # llama.cpp's gemma2 alternates, the even layers sliding, as Gemma 2 does
            switches["layer_types"] = tuple(
                "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(fields["n_layers"])
            )
    kinds = switches.get("layer_types", ())
    if kinds and "sliding_attention" not in kinds:  # the config reader's one form: no window when none slides,
        switches["sliding_window"], switches["layer_types"] = None, ()
    elif kinds and all(kind == "sliding_attention" for kind in kinds):  # no layer_types when all slide
        switches["layer_types"] = ()
    if family == "smollm3":  # llama.cpp's rule: no key says which layers rotate
        switches["nope_layers"] = smollm3_nope_layers(fields["n_layers"])
    if family == "gemma2":
        for field, key in (("attn_softcap", "attn_logit_softcapping"), ("final_softcap", "final_logit_softcapping")):
            if f"{arch}.{key}" not in reader.fields:
                findings.append(f"{arch}.{key} is not stored; llama.cpp's {_GEMMA2_DEFAULT_CAPS[field]:g} assumed")
            switches[field] = float32_field(path, reader, f"{arch}.{key}", _GEMMA2_DEFAULT_CAPS[field])
        if QUERY_SCALE_KEY in reader.fields:
            switches["query_scale"] = int_field(path, reader, QUERY_SCALE_KEY)
        else:
            d_head = switches.get("head_dim") or fields["d_model"] // fields["n_heads"]
            deep = fields["n_layers"] == _GEMMA2_27B_LAYERS
            switches["query_scale"] = fields["d_model"] // fields["n_heads"] if deep else d_head
            findings.append(f"{QUERY_SCALE_KEY} is not stored; llama.cpp's rule gives {switches['query_scale']}")
        if switches["query_scale"] == (switches.get("head_dim") or fields["d_model"] // fields["n_heads"]):
            switches["query_scale"] = None  # the config reader's one form: None when it is d_head
    return switches


def _expert_switches(
    path: Path, reader: Any, arch: str, fields: dict[str, Any], tensors: set[str], findings: list[str]
) -> dict[str, Any]:
    """A MoE file's experts: their count, how many a token uses, Qwen2-MoE's and Qwen3-MoE's sizes and
    renormalisation."""
    switches: dict[str, Any] = {
        "n_experts": int_field(path, reader, gguf.Keys.LLM.EXPERT_COUNT.format(arch=arch)),
        "top_k": int_field(path, reader, gguf.Keys.LLM.EXPERT_USED_COUNT.format(arch=arch)),
    }
    # Checked against the stored experts before any per-expert work (the canonical names are n_layers *
    # n_experts * 3: a count the file does not hold must not be enumerated).
    stacked = next((t for t in reader.tensors if t.name == "blk.0.ffn_gate_exps.weight"), None)
    held = None if stacked is None or len(stacked.shape) != 3 else int(stacked.shape[2])
    if held != switches["n_experts"]:
        raise CheckpointError(path, f"metadata {arch}.expert_count", "is not the number of experts blk.0's "
                              "ffn_gate_exps.weight stacks", expected=held, found=switches["n_experts"])  # fmt: skip
    if arch not in ("qwen2moe", "qwen3moe"):
        return switches
    d_expert = int_field(path, reader, gguf.Keys.LLM.EXPERT_FEED_FORWARD_LENGTH.format(arch=arch))
    switches["d_expert"] = None if d_expert == fields["d_ff"] else d_expert  # the config reader's one form
    if arch == "qwen3moe":  # its MoE block always renormalises the top k
        return switches | {"norm_topk": True}
    if "blk.0.ffn_gate_shexp.weight" in tensors:
        switches["d_shared_expert"] = int_field(
            path, reader, gguf.Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH.format(arch=arch)
        )
    norm_key = gguf.Keys.LLM.EXPERT_WEIGHTS_NORM.format(arch=arch)
    if norm_key not in reader.fields:  # the converter writes none for Qwen2-MoE
        findings.append(f"{norm_key} is not stored; false assumed (llama.cpp's qwen2moe never renormalises)")
    norm = read_field(path, reader, norm_key, False)
    if not isinstance(norm, (bool, np.bool_)):
        raise CheckpointError(path, f"metadata {arch}.expert_weights_norm", "must be a bool", found=norm)
    switches["norm_topk"] = bool(norm)
    return switches


# The key a switch's ConfigError is reported under.
_SWITCH_KEYS = {
    "head_dim": "{arch}.attention.key_length",
    "sliding_window": "{arch}.attention.sliding_window",
    "layer_types": "{arch}.attention.sliding_window_pattern",
    "attn_softcap": "{arch}.attn_logit_softcapping",
    "final_softcap": "{arch}.final_logit_softcapping",
    "rope_scaling.factor": "{arch}.rope.scaling.factor",
    "query_scale": QUERY_SCALE_KEY,
    "n_experts": "{arch}.expert_count",
    "top_k": "{arch}.expert_used_count",
    "d_expert": "{arch}.expert_feed_forward_length",
    "d_shared_expert": "{arch}.expert_shared_feed_forward_length",
    "rotary_dim": "{arch}.rope.dimension_count",
}


def _llama3_from_table(path: Path, table: np.ndarray, theta: float, d_head: int) -> RopeScaling:
    """The Llama 3 scaling whose `rope_freqs` is `table` [d_head / 2], low_freq_factor taken as 1.

    In the band between, 1 / table_i = 1/factor + s_i (1 - 1/factor) with s_i = (original / wavelength_i
    - low) / (high - low): a line in 1 / wavelength_i, whose slope and intercept give original and high
    once low is fixed. The parameters are accepted only if they give back the table exactly.
    """
    where = f"tensor {ROPE_FREQS}"
    factor = float(table.max())
    wavelength = 2 * np.pi * theta ** (np.arange(0, d_head, 2, dtype=np.float64) / d_head)
    between = (table > 1) & (table < factor)
    if table.shape != (d_head // 2,) or factor <= 1 or between.sum() < 2:
        raise CheckpointError(path, where, "Llama 3 RoPE factors from which the scaling cannot be solved "
                              "(it needs a low band and two frequencies between the bands)",
                              found=table.tolist()[:8])  # fmt: skip
    s = (1 / table[between] - 1 / factor) / (1 - 1 / factor)
    slope, intercept = np.polyfit(1 / wavelength[between], s, 1)  # s = slope / wavelength + intercept
    low = 1.0
    high = round(low - 1 / intercept, 3)  # intercept = -low / (high - low)
    scaling = RopeScaling("llama3", factor, low, high, round(slope * (high - low)))
    try:
        solved = llama3_rope_factors(ModelConfig(
            family="llama", vocab_size=1, n_ctx=1, d_model=d_head, n_layers=1, n_heads=1, n_kv_heads=1, d_ff=1,
            norm_eps=1e-5, tie_embeddings=True, rope_theta=theta, rope_scaling=scaling,
        ))  # fmt: skip
    except ConfigError as e:
        raise CheckpointError(path, where, f"Llama 3 RoPE factors whose solved parameters are invalid: {e}") from None
    if not np.array_equal(solved, table.astype(np.float32)):
        raise CheckpointError(path, where, "Llama 3 RoPE factors that no scaling with low_freq_factor 1 gives",
                              found=table.tolist()[:8])  # fmt: skip
    return scaling


def _config(path: Path, reader: Any) -> tuple[ModelConfig, list[str]]:
    arch = read_field(path, reader, "general.architecture")
    if arch not in _FAMILY:
        raise CheckpointError(path, "metadata general.architecture", "not an architecture the suite implements",
                              expected=list(_FAMILY), found=arch)  # fmt: skip
    tensors = {t.name: t for t in reader.tensors}
    embedding = tensors.get("token_embd.weight")
    if embedding is None:
        raise CheckpointError(path, "tensor token_embd.weight", "missing")
    if len(embedding.shape) != 2:
        raise CheckpointError(path, "tensor token_embd.weight", "must be 2-D [d_model, vocab_size]",
                              found=[int(n) for n in embedding.shape])  # fmt: skip
    keys = {field: key.format(arch) for field, key in _KEYS.items()} | {"norm_eps": _EPS_KEYS[arch]}
    keys |= {field: key.format(arch=arch) for field, key in _SWITCH_KEYS.items()}
    findings: list[str] = []
    fields: dict[str, Any] = {
        "family": arch,
        "vocab_size": int(embedding.shape[1]),  # GGUF shapes list the fastest axis first
        "tie_embeddings": "output.weight" not in tensors,
        "norm_eps": float32_field(path, reader, keys["norm_eps"]),
    }
    for field in ("n_ctx", "d_model", "n_layers", "n_heads", "d_ff"):
        fields[field] = int_field(path, reader, keys[field])
    fields["n_kv_heads"] = int_field(path, reader, keys["n_kv_heads"], fields["n_heads"])
    if arch != "gpt2":
        if keys["rope_theta"] not in reader.fields:
            findings.append(f"{keys['rope_theta']} is not stored; llama.cpp's {DEFAULT_ROPE_THETA:g} assumed")
        fields["rope_theta"] = float32_field(path, reader, keys["rope_theta"], DEFAULT_ROPE_THETA)
    try:  # every size (type, range, maximum, divisibility), eps and theta are checked here, before any use
        if arch != "gpt2":
            fields |= _switches(path, reader, arch, fields, findings)
            d_head = fields.get("head_dim") or fields["d_model"] // fields["n_heads"]
            rot = int_field(path, reader, f"{arch}.rope.dimension_count", d_head)
            if rot != d_head and arch not in ("phi3", "chatglm"):
                raise CheckpointError(path, f"metadata {arch}.rope.dimension_count",
                                      f"partial RoPE is not implemented for llama.cpp's {arch}",
                                      expected=d_head, found=rot)  # fmt: skip
            if rot != d_head:
                fields["rotary_dim"] = rot
        config = ModelConfig(**fields)
    except ConfigError as e:
        where = (
            "tensor token_embd.weight (its vocabulary axis)"
            if e.field == "vocab_size"
            else f"metadata {keys.get(e.field, e.field)}"
        )
        raise CheckpointError(path, where, e.reason) from None
    return config, findings


def read_gguf_config(path: str | Path) -> ModelConfig:
    """The config of a GGUF file, from its metadata and tensor shapes."""
    path = Path(path)
    return _config(path, open_reader(path))[0]


def _check_rope_freqs(path: Path, config: ModelConfig, tensor: Any) -> None:
    """CheckpointError unless the file's `rope_freqs` (what llama.cpp divides the frequencies by) is the
    table its Llama 3 parameters give: otherwise llama.cpp would compute another model than the config."""
    expected = llama3_rope_factors(config)
    found = np.asarray(tensor.data, dtype=np.float32).reshape(-1)
    if found.shape != expected.shape or not np.array_equal(found, expected):
        raise CheckpointError(path, f"tensor {ROPE_FREQS}", "is not the table of the stored Llama 3 parameters",
                              expected=expected.tolist(), found=found.tolist()[:8])  # fmt: skip


def read_gguf(path: str | Path) -> Checkpoint:
    """A GGUF file of one of llama.cpp's architectures for the suite's families as config + canonical
    weights (quantized tensors dequantized)."""
    path = Path(path)
    reader = open_reader(path)
    config, findings = _config(path, reader)
    stored = {t.name: t for t in reader.tensors}
    if config.rope_scaling is not None and config.rope_scaling.kind == "llama3":
        _check_rope_freqs(path, config, stored.pop(ROPE_FREQS))
    if config.norm_plus_one:
        findings.append("norm weights stored as 1 + w (llama.cpp's convention for Gemma), read back as w")
    weights: Weights = {}
    stacks: dict[str, np.ndarray] = {}  # a layer's experts, dequantized once
    for canonical, (name, how) in tensor_names(config).items():
        if how.startswith(EXPERT) and name in stacks:
            weights[canonical] = stacks[name][int(how.removeprefix(EXPERT))]
            continue
        tensor = stored.pop(name, None)
        if tensor is None:
            raise CheckpointError(path, f"tensor {name}", f"missing (the {config.family} architecture's {canonical})")
        if tensor.tensor_type not in _READABLE:
            raise CheckpointError(path, f"tensor {name}", "stored in a type this reader does not dequantize",
                                  expected=[t.name for t in _READABLE], found=tensor.tensor_type.name)  # fmt: skip
        # Checked before it is dequantized and reordered by head, which assume it (a 0 or a wrong dimension
        # raised ValueError from numpy's reshape there).
        shape = weight_shapes(config)[canonical]
        expected = list(reversed(shape)) if how == CONV1D else list(shape)
        if how.startswith(EXPERT):
            expected = [config.n_experts, *shape]
        found = [int(n) for n in reversed(tensor.shape)]  # GGUF lists the fastest axis first
        # ggml drops a tensor's trailing dimensions of 1 (llama.cpp's quantizer stores Qwen2-MoE's
        # [1, d_model] shared-expert gate as [d_model]): the same tensor.
        found = [1] * (len(expected) - len(found)) + found
        if found != expected:
            raise CheckpointError(path, f"tensor {name}", "wrong shape", expected=expected, found=found)
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(expected)
        if how.startswith(EXPERT):
            stacks[name] = values
            weights[canonical] = values[int(how.removeprefix(EXPERT))]
            continue
        weights[canonical] = unstore(config, values, how)
    if stored:
        findings.append(f"{len(stored)} tensors not read (not part of the model): {', '.join(list(stored)[:5])}")
    quantized = sorted({t.tensor_type.name for t in reader.tensors} - {"F32"})
    if quantized:
        findings.append(f"tensors stored as {', '.join(quantized)}, dequantized to float32")
    vocab = reader.fields.get("tokenizer.ggml.tokens")
    if vocab is not None:
        model = read_field(path, reader, "tokenizer.ggml.model", "?")
        findings.append(f"a vocabulary of {vocab.n_items} pieces (tokenizer model {model!r}) is stored, not read")
    check_canonical(path, config, weights)
    tensors = tuple(
        TensorInfo(t.name, tuple(int(n) for n in reversed(t.shape)), t.tensor_type.name) for t in reader.tensors
    )
    return Checkpoint(path, "gguf", int(read_field(path, reader, "GGUF.version", 3)), config, weights, tensors,
                      tuple(findings))  # fmt: skip
