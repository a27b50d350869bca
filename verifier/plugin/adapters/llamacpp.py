"""llama.cpp as a model under test, in-process through `llama-cpp-python`, on a GGUF file the suite writes.

The model is written in F32 (`verifier.formats.gguf`) and run on llama.cpp's CPU backend with the
KV cache in F32 (`type_k` / `type_v`), flash attention off and logits for every position (each
token of a batch asks for its logits, what `logits_all` does in the high-level API), so that
nothing but llama.cpp's own arithmetic stands between it and the reference.

- `greedy` generates through llama.cpp's KV cache, one token a step, as its users run it.
- `decode` continues llama.cpp's own KV cache: the cache handed back is a snapshot of the
  sequence's state (`llama_state_seq_get_data`), restored before the next chunk, so a cache stays
  reusable however often it is continued.
- `trace` reads the tensors of llama.cpp's compute graph as they are computed, through the eval
  callback of the context params (`cb_eval`), by the names llama.cpp's graph gives them
  (`ffn_gelu-0`) and, where one name is given to several tensors, the op that computes it: the
  residual stream, the norms, Llama's q, k, v before and after RoPE (reordered from llama.cpp's
  interleaved pairs), attention's probabilities and output, and the MLP's stages (a MoE layer's router
  probabilities, `ffn_moe_probs`, and the experts it uses, the first top_k columns of `ffn_moe_argsort`,
  an I32 tensor: its `ffn_moe_topk` is a strided view of them). The scores are
  left out (llama.cpp scales them inside its softmax), as are GPT-2's q, k, v (strided views). llama-cpp-python
  exposes the callback but no tensor type, so the start of ggml's `struct ggml_tensor` (type,
  buffer, ne[4]) is declared here as ggml.h of the vendored llama.cpp lays it out, and every
  tensor read is checked against ggml's own byte count.

The families run through llama.cpp's architectures as `verifier.formats.gguf` writes them (llama,
mistral and mixtral as `llama`, qwen2, qwen3, gemma, gemma2, qwen2_moe as `qwen2moe`, phi3, glm as
`chatglm`, qwen3_moe as `qwen3moe`, smollm3, olmo2). What
llama.cpp cannot hold is refused
(`Unsupported`, with the reason): attention biases in qwen3 and gemma (it leaves some unused and
refuses the file), an
untied Gemma (no output.weight), Llama 3 RoPE scaling outside `llama` (rope_freqs unused), Gemma 2
without soft-caps (it caps at 50 and 30 when none is stored). What it runs but computes otherwise
is run, so that the suite reports the difference (tests/llamacpp/test_families.py measures each):
its `llama`, qwen2 and qwen3 ignore the sliding window (full causal attention); its Gemma GeGLU
reads ggml's float16 GELU table, as its GPT-2 GELU does; its Gemma 2 scales queries by
1/sqrt(d_head) unless the model has 46 layers (Gemma-2-27B), whatever `query_pre_attn_scalar` says;
its phi3, qwen2moe, qwen3moe and `llama` ignore Phi-3's, Qwen2-MoE's, Qwen3-MoE's and Mixtral's windows;
its qwen2moe never renormalises
the top-k probabilities (it computes `norm_topk_prob` false whatever the file's expert_weights_norm
says). Refused: Qwen2-MoE with dense layers (`mlp_only_layers`; qwen2moe routes every layer), without
its shared expert or tied (qwen2moe requires those tensors), GLM whose n_heads * head_dim is not d_model
(chatglm's attention output is square), Qwen3-MoE with dense layers, attention biases or without
renormalising the top k (qwen3moe always renormalises), SmolLM3 with windows, attention biases or
layers without RoPE other than every fourth (smollm3 turns RoPE off there, whatever the file says), OLMo 2
tied, with heads other than d_model / n_heads or with attention biases (olmo2 refuses those files).

`build_q8_0` runs a file whose matrices are Q8_0 and declares the precision class `q8_0`
(`verifier.analysis.precision`: llama.cpp's blocks of 32 with float16 scales, its matrix products'
inputs quantized alike), so it is judged against the oracle on the file's dequantized weights.
`build_q4_0` does the same with Q4_0 matrices (blocks of 32 4-bit codes, float16 scales) in the
class `q4_0`: ggml's CPU backend quantizes the inputs of a Q4_0 product to Q8_0 (its `vec_dot_type`),
which is what remains against the dequantized oracle. The class follows the file's tensor type
(`PRECISIONS`). `build_q4_k_m`, `build_q5_k_m` and `build_q6_k` quantize the F32 file with llama.cpp's
own quantizer (`llama_model_quantize`) and declare the file's class (`precision.file_quantized`: the
oracle on the weights read back from it, the products' inputs in Q8_K), rows of 256.
Where llama-cpp-python is not installed, the factories raise `Unsupported` with the way to install it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verifier.analysis.precision import Q4_0, Q8_0, Precision, file_quantized
from verifier.formats.errors import CheckpointError
from verifier.formats.gguf_layout import INTERLEAVED
from verifier.model import stages
from verifier.model.config import FAMILIES, Family, ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.adapters.built_once import BuiltOnce
from verifier.plugin.interface import Constraints, Unsupported

INSTALL = "pip install 'lm-verifier[llamacpp]' (pip compiles llama.cpp: several minutes)"
_GGML_TYPE_F32 = 0
# The ggml types the trace reads, and as what: values in F32, indices (a MoE layer's argsort) in I32.
_READ_TYPES = {_GGML_TYPE_F32: np.float32, 26: np.int32}  # GGML_TYPE_I32 = 26
_LOG_LINES = 20
# The precision class a model declares by the GGUF type of its file's matrices; an F32 file declares
# none (float32): judged by float32's bounds.
PRECISIONS: dict[str, Precision | None] = {"F32": None, "Q8_0": Q8_0, "Q4_0": Q4_0}
# The file types llama.cpp's own quantizer makes from the F32 file (`llama_model_quantize`, what its
# `llama-quantize` runs), by their `LLAMA_FTYPE_MOSTLY_*` names: each matrix in a K type its recipe
# chooses (Q4_K_M: Q4_K, with Q6_K for the classifier and some attn_v and ffn_down), rows of 256. The
# class is the file's (`precision.file_quantized`): the oracle runs on the weights read back from it.
QUANTIZER_TYPES = ("Q4_K_M", "Q5_K_M", "Q6_K")


class _TensorHead(ctypes.Structure):
    """The leading fields of ggml's `struct ggml_tensor` (ggml/include/ggml.h, GGML_MAX_DIMS 4)."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4)]


def _llama_cpp() -> Any:
    try:
        return importlib.import_module("llama_cpp")
    except ImportError as e:
        raise Unsupported(f"llama-cpp-python is not installed here ({e}): {INSTALL}") from None


class _Log:
    """llama.cpp's log, kept (its last lines) instead of printed, to quote in errors."""

    def __init__(self, llama_cpp: Any) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

        def log(level: int, text: bytes, user_data: Any) -> None:
            with self._lock:
                self.lines = [*self.lines[-_LOG_LINES:], text.decode("utf-8", errors="replace")]

        self.callback = llama_cpp.llama_log_callback(log)  # kept alive as long as this object
        llama_cpp.llama_log_set(self.callback, ctypes.c_void_p(0))

    def tail(self) -> str:
        with self._lock:
            return "".join(self.lines).strip() or "(llama.cpp logged nothing)"


_LOG: _Log | None = None


def _library() -> tuple[Any, _Log]:
    """llama_cpp with its backend initialised and its log captured, once per process."""
    global _LOG
    llama_cpp = _llama_cpp()
    if _LOG is None:
        _LOG = _Log(llama_cpp)
        llama_cpp.llama_backend_init()
    return llama_cpp, _LOG


@dataclass(frozen=True)
class QuantizedFile:
    """A file llama.cpp's quantizer made (`path`, in `folder`, removed with this object) and its
    precision class (`precision.file_quantized`: its weights read back dequantized)."""

    folder: tempfile.TemporaryDirectory[str]
    path: Path
    precision: Precision


def quantize(file_type: str, config: ModelConfig, weights: Weights) -> QuantizedFile:
    """Write the F32 file and quantize it to `file_type` with llama.cpp's quantizer on one thread (its
    rows are quantized one by one: the file is the same on any number of threads)."""
    from verifier.formats.gguf import read_gguf, write_gguf

    lib, log = _library()
    folder = tempfile.TemporaryDirectory(prefix="verifier-llamacpp-quantized-")
    source, path = Path(folder.name) / "f32.gguf", Path(folder.name) / f"{file_type.lower()}.gguf"
    write_gguf(source, config, weights)
    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, f"LLAMA_FTYPE_MOSTLY_{file_type}")
    params.nthread = 1
    if lib.llama_model_quantize(str(source).encode(), str(path).encode(), ctypes.byref(params)):
        raise RuntimeError(f"llama.cpp could not quantize {source} to {file_type}: {log.tail()}")
    source.unlink()
    checkpoint = read_gguf(path)
    # F32: kept as it is (norms, routers, GPT-2's position embeddings, a lookup); any other type is a
    # row its K types cannot hold, fallen back to a type whose products read other blocks than Q8_K.
    fallback = sorted({t.dtype for t in checkpoint.tensors} - {"F32", "Q4_K", "Q5_K", "Q6_K"})
    if fallback:
        raise Unsupported(f"llama.cpp's {file_type} recipe stored matrices as {', '.join(fallback)}, not K types")
    return QuantizedFile(folder, path, file_quantized(file_type.lower(), checkpoint.weights))


# Quantizing (the K types' search for scales) and reading the file back took 250 s of a whole-suite run's
# 358 s on a Q4_K_M model: each config and weights is quantized once per type, and each model copies the file.
_QUANTIZED = {file_type: BuiltOnce(functools.partial(quantize, file_type)) for file_type in QUANTIZER_TYPES}


@dataclass(frozen=True)
class Cache:
    """A snapshot of llama.cpp's KV cache for one sequence: `n_past` positions, its state bytes."""

    n_past: int
    state: bytes


class LlamaCppModel:
    """A GGUF model on llama.cpp's CPU backend behind the suite's model interface."""

    def __init__(self, config: ModelConfig, weights: Weights, threads: int = 1, tensor_type: str = "F32") -> None:
        """`tensor_type`: the GGUF type of the matrices (`verifier.formats.gguf.TENSOR_TYPES`).
        `threads`: llama.cpp's CPU threads. One by default: its threads spin while they wait, so
        more threads than idle cores (parallel test workers) make it hundreds of times slower."""
        from verifier.formats.gguf import write_gguf

        self._lib, self._log = _library()
        self.config = config
        self.precision = PRECISIONS.get(tensor_type)  # an unknown type is refused by write_gguf below
        self._threads = threads
        self._dir = tempfile.TemporaryDirectory(prefix="verifier-llamacpp-")
        self.model_path = Path(self._dir.name) / "model.gguf"
        if tensor_type in QUANTIZER_TYPES:
            quantized = _QUANTIZED[tensor_type](config, weights)
            shutil.copyfile(quantized.path, self.model_path)
            self.precision = quantized.precision
        else:
            write_gguf(self.model_path, config, weights, tensor_type=tensor_type)
        params = self._lib.llama_model_default_params()
        params.n_gpu_layers = 0
        # No repacked or AMX copies of quantized weights: on this project's machines the CPU
        # advertises AMX and ggml's AMX matmul faults at its first instruction (ldtilecfg), a crash
        # on any Q8_0 batch of 2 or more tokens. F32 weights are never repacked.
        params.use_extra_bufts = False
        self._model = self._lib.llama_model_load_from_file(str(self.model_path).encode(), params)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {self.model_path}: {self._log.tail()}")
        self._ctx = self._context()
        self._contexts = [self._ctx]  # freed before the model, when this object goes
        self._trace_ctx: Any = None
        self._recorder: _Recorder | None = None
        weakref.finalize(self, _free, self._lib, self._model, self._contexts)

    def _context(self, callback: Any = None) -> Any:
        lib = self._lib
        params = lib.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = self.config.n_ctx
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = self._threads
        params.type_k = params.type_v = _GGML_TYPE_F32
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.no_perf = True
        if callback is not None:
            params.cb_eval = callback
        ctx = lib.llama_init_from_model(self._model, params)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not create a context for {self.model_path}: {self._log.tail()}")
        return ctx

    def _run(self, ctx: Any, tokens: list[int], start: int) -> np.ndarray:
        """Decode `tokens` at positions start.. in sequence 0 of `ctx`; their logits [T, V]."""
        lib, T, V = self._lib, len(tokens), self.config.vocab_size
        if start + T > self.config.n_ctx:
            raise ValueError(f"{start} cached + {T} new tokens exceed n_ctx={self.config.n_ctx}")
        batch = lib.llama_batch_init(T, 0, 1)
        try:
            for i, token in enumerate(tokens):
                batch.token[i] = token
                batch.pos[i] = start + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = True
            batch.n_tokens = T
            status = lib.llama_decode(ctx, batch)
            if status != 0:
                raise RuntimeError(f"llama_decode returned {status} on {T} tokens at {start}: {self._log.tail()}")
            return np.ctypeslib.as_array(lib.llama_get_logits(ctx), shape=(T, V)).copy()
        finally:
            lib.llama_batch_free(batch)

    def _clear(self, ctx: Any) -> None:
        self._lib.llama_memory_clear(self._lib.llama_get_memory(ctx), True)

    def _one(self, tokens: np.ndarray) -> np.ndarray:
        self._clear(self._ctx)
        return self._run(self._ctx, [int(t) for t in tokens], 0)

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """[T] -> [T, V] or [B, T] -> [B, T, V], one sequence at a time."""
        array = np.asarray(tokens)
        return np.stack([self._one(row) for row in array]) if array.ndim == 2 else self._one(array)

    def decode(self, tokens: np.ndarray, cache: Any = None) -> tuple[np.ndarray, Any]:
        """Logits of a chunk after `cache` (None, a Cache, or a tuple of them for [B, T]) and the new cache."""
        array = np.asarray(tokens)
        if array.ndim == 2:
            rows = [self._decode_row(row, None if cache is None else cache[b]) for b, row in enumerate(array)]
            return np.stack([logits for logits, _ in rows]), tuple(c for _, c in rows)
        return self._decode_row(array, cache)

    def _decode_row(self, tokens: np.ndarray, cache: Cache | None) -> tuple[np.ndarray, Cache]:
        lib, ctx = self._lib, self._ctx
        self._clear(ctx)
        start = 0
        if cache is not None:
            buffer = (ctypes.c_uint8 * len(cache.state)).from_buffer_copy(cache.state)
            if lib.llama_state_seq_set_data(ctx, buffer, len(cache.state), 0) == 0:
                raise RuntimeError(f"llama.cpp refused a cache of {cache.n_past} positions: {self._log.tail()}")
            start = cache.n_past
        logits = self._run(ctx, [int(t) for t in tokens], start)
        size = lib.llama_state_seq_get_size(ctx, 0)
        state = (ctypes.c_uint8 * size)()
        lib.llama_state_seq_get_data(ctx, state, size, 0)
        return logits, Cache(start + len(tokens), bytes(state))

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        """The n_new argmax tokens after `prompt` [T], generated through llama.cpp's KV cache."""
        ids = [int(t) for t in np.asarray(prompt).reshape(-1)]
        if len(ids) + n_new - 1 > self.config.n_ctx:
            raise ValueError(f"{len(ids)} + {n_new} new tokens need more than n_ctx={self.config.n_ctx} positions")
        self._clear(self._ctx)
        logits = self._run(self._ctx, ids, 0)
        out: list[int] = []
        while len(out) < n_new:
            out.append(int(np.argmax(logits[-1])))
            if len(out) < n_new:
                logits = self._run(self._ctx, out[-1:], len(ids) + len(out) - 1)
        return np.array(out, dtype=np.int64)

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """The stages llama.cpp's graph names (see the module docstring) of one sequence [T]."""
        if np.ndim(tokens) != 1:
            raise ValueError(f"trace takes one sequence [T], found shape {np.shape(tokens)}")
        if self._trace_ctx is None:
            self._recorder = _Recorder(self._lib, graph_names(self.config))
            self._trace_ctx = self._context(self._recorder.callback)
            self._contexts.append(self._trace_ctx)
        recorder = self._recorder
        assert recorder is not None
        recorder.captured = {}
        self._clear(self._trace_ctx)
        logits = self._run(self._trace_ctx, [int(t) for t in tokens], 0)
        recorder.captured[stages.LOGITS] = logits
        trace = {}
        interleaved = self.config.family in INTERLEAVED  # the GGUF writer interleaved their q/k rows
        for stage, shape in stages.stage_shapes(self.config, len(tokens)).items():
            value = _as_stage(stage, recorder.captured.get(stage), shape, interleaved)
            if value is not None:
                trace[stage] = value
        return trace


def _as_stage(stage: str, value: np.ndarray | None, shape: tuple[int, ...], interleaved: bool) -> np.ndarray | None:
    """A captured tensor as `stage` of `shape`, or None where it cannot be one.

    `interleaved`: llama.cpp's RoPE of this architecture rotates adjacent pairs (its `llama` and
    `smollm3`, whose q/k rows the GGUF file interleaves); the others (qwen2, qwen3, gemma, ...) rotate halves, as
    the stages do, and their q/k are kept as they are.

    Attention probabilities come over every cell of llama.cpp's KV cache, [n_heads, T, n_kv] with
    n_kv padded past T: this sequence's cells are the first T (the cache is cleared before), and
    the rest must hold probability 0 to be cut off.
    """
    if value is None:
        return None
    op = stages.split_stage(stage)[1]
    if op in ("q", "k", "v", "q_norm", "k_norm", "q_rope", "k_rope"):  # [T, heads * d_head] -> [heads, T, d_head]
        heads, T, d_head = shape
        if value.size != heads * T * d_head:
            return None
        value = value.reshape(T, heads, d_head).transpose(1, 0, 2)
        if op == "v" or not interleaved:
            return value
        # llama.cpp rotates adjacent pairs (2i, 2i + 1); the stage is in rotate-half order (i, i + d/2).
        return value.reshape(heads, T, d_head // 2, 2).transpose(0, 1, 3, 2).reshape(shape)
    if op == "experts":  # the argsort [T, n_experts] -> its first top_k columns, the experts used
        T, k = shape
        return value.reshape(T, -1)[:, :k].astype(np.int64) if value.size % T == 0 and value.size >= T * k else None
    if op == "probs":
        n_heads, T, _ = shape
        if value.size % (n_heads * T):
            return None
        value = value.reshape(n_heads, T, -1)
        return value[..., :T] if value.shape[-1] >= T and not value[..., T:].any() else None
    return value.reshape(shape) if value.size == int(np.prod(shape)) else None


def graph_names(config: ModelConfig) -> dict[str, dict[str | None, str]]:
    """llama.cpp's name of a graph tensor -> {the op that computes it (None: any): the stage it is}.

    Llama's `Qcur-0` names the projection (MUL_MAT, or the ADD of its bias), its reshape and the
    rotated result (ROPE).
    """
    gpt2 = config.family == "gpt2"
    # Gemma's embeddings times sqrt(d_model) are `inp_scaled`; `embd` is the rows before it.
    embed = "inpL" if gpt2 else "inp_scaled" if config.embed_scale else "embd"
    names = {embed: stages.EMBED, "result_norm": stages.FINAL_NORM}
    per_layer = {
        "attn_norm": "attn_norm",
        "kq_soft_max": "probs",
        "kqv_out": "attn",  # the heads merged, before the output projection
        "ffn_inp": "resid_attn",
        "ffn_norm": "mlp_norm",
        "ffn_up_b" if gpt2 else "ffn_up": "mlp_up",
        "ffn_gelu" if gpt2 else "ffn_swiglu": "mlp_act",
        "ffn_out": "mlp_out",
        "l_out": "resid_mlp",
    }
    if not gpt2:  # GPT-2's graph names no tensor after the output projection and its bias
        per_layer |= {"attn_out": "attn_out", "ffn_gate": "mlp_gate"}
    if config.mlp_act == "gelu_tanh":  # Gemma's gate: GELU(gate) * up, one fused op
        per_layer["ffn_geglu"] = per_layer.pop("ffn_swiglu")
    if config.family in ("gemma", "gemma2"):  # their residual after attention (Gemma 2's post-norm added)
        per_layer["sa_out"] = per_layer.pop("ffn_inp")
    if config.sandwich_norm:  # Gemma 2's ffn_post_norm has no layer number: left out
        per_layer["attn_post_norm"] = "attn_post_norm"
    if config.qk_norm:  # Qwen3's per-head norms, before RoPE
        per_layer |= {"Qcur_normed": "q_norm", "Kcur_normed": "k_norm"}
    found: dict[str, dict[str | None, str]] = {name: {None: stage} for name, stage in names.items()}
    # A MoE layer's router probabilities; its MLP names (ffn_gate, ...) are the shared expert's, not the layer's.
    moe_layer = {k: v for k, v in per_layer.items() if v not in ("mlp_gate", "mlp_up", "mlp_act")}
    moe_layer["ffn_moe_probs"] = "router_probs"
    # Its choice: `ffn_moe_topk`, the experts it uses, is a strided view of the first top_k columns of
    # `ffn_moe_argsort` (the experts by falling probability, contiguous), which is read and cut instead.
    moe_layer["ffn_moe_argsort"] = "experts"
    for i in range(config.n_layers):
        ops = moe_layer if config.is_moe_layer(i) else per_layer
        found |= {f"{name}-{i}": {None: stages.layer_stage(i, op)} for name, op in ops.items()}
        if not gpt2:  # GPT-2's q, k, v are strided views into the fused qkv
            projected = "ADD" if config.qkv_bias else "MUL_MAT"  # the bias is added under the same name
            found[f"Qcur-{i}"] = {projected: stages.layer_stage(i, "q"), "ROPE": stages.layer_stage(i, "q_rope")}
            found[f"Kcur-{i}"] = {projected: stages.layer_stage(i, "k"), "ROPE": stages.layer_stage(i, "k_rope")}
            found[f"Vcur-{i}"] = {projected: stages.layer_stage(i, "v")}
    return found


class _Recorder:
    """The eval callback: asks for the named tensors and copies each as it is computed."""

    def __init__(self, lib: Any, names: dict[str, dict[str | None, str]]) -> None:
        ggml = importlib.import_module("llama_cpp._ggml").libggml
        for fn, restype, argtypes in (
            ("ggml_get_name", ctypes.c_char_p, [ctypes.c_void_p]),
            ("ggml_nbytes", ctypes.c_size_t, [ctypes.c_void_p]),
            ("ggml_is_contiguous", ctypes.c_bool, [ctypes.c_void_p]),
            ("ggml_op_desc", ctypes.c_char_p, [ctypes.c_void_p]),
            ("ggml_backend_tensor_get", None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]),
        ):
            getattr(ggml, fn).restype, getattr(ggml, fn).argtypes = restype, argtypes
        self._ggml = ggml
        self._names = names
        self.captured: dict[str, np.ndarray] = {}
        self.callback = lib.ggml_backend_sched_eval_callback(self._eval)

    def _eval(self, tensor: int, ask: bool, user_data: Any) -> bool:
        ggml = self._ggml
        by_op = self._names.get((ggml.ggml_get_name(tensor) or b"").decode())
        if ask or by_op is None:
            return by_op is not None
        stage = by_op.get(None) or by_op.get((ggml.ggml_op_desc(tensor) or b"").decode())
        if stage is None:
            return True
        head = _TensorHead.from_address(tensor)
        dtype = _READ_TYPES.get(head.type)
        if dtype is None:
            return True  # a type this reader does not know is left out of the trace
        out = np.empty(tuple(int(n) for n in reversed(head.ne)), dtype)  # numpy order: ne[0] is fastest
        if ggml.ggml_is_contiguous(tensor) and ggml.ggml_nbytes(tensor) == out.nbytes:
            ggml.ggml_backend_tensor_get(tensor, out.ctypes.data, 0, out.nbytes)
            self.captured[stage] = out
        return True  # a layout this reader does not know is left out of the trace


def _free(lib: Any, model: Any, contexts: list[Any]) -> None:
    for ctx in contexts:
        lib.llama_free(ctx)
    lib.llama_model_free(model)


def _unsupported(config: ModelConfig) -> str | None:
    """`verifier.formats.gguf.unsupported`; None where the gguf extra is missing, since the probes ask
    the drawing constraints first and `build` then names the missing extra (not an ImportError mid-probe)."""
    try:
        from verifier.formats.gguf import unsupported  # imports the gguf package, an extra
    except ImportError:
        return None
    return unsupported(config)


def _runnable(config: ModelConfig) -> None:
    """Unsupported, with the reason, where llama.cpp's architecture for the family cannot hold `config`."""
    reason = _unsupported(config)
    if reason is not None:
        raise Unsupported(reason)


_GEMMAS: tuple[Family, ...] = ("gemma", "gemma2")
# What the suite draws for llama.cpp: Gemma tied only (its architectures have no output.weight), and
# the rest of what `verifier.formats.gguf.unsupported` refuses (biases of qwen3 and gemma, ...) filtered.
SHAPES = (
    Constraints(
        families=tuple(f for f in FAMILIES if f not in _GEMMAS),
        supports=lambda c: _unsupported(c) is None,
    ),
    Constraints(families=_GEMMAS, tie_embeddings=True, supports=lambda c: _unsupported(c) is None),
)


def build(config: ModelConfig, weights: Weights) -> LlamaCppModel:
    """llama.cpp (llama-cpp-python) on an F32 GGUF file of `config`, KV cache in F32."""
    _llama_cpp()
    _runnable(config)
    return LlamaCppModel(config, weights)


def _quantized(config: ModelConfig, weights: Weights, tensor_type: str) -> LlamaCppModel:
    """llama.cpp on a GGUF file with its matrices in `tensor_type`, in that type's class (`PRECISIONS`);
    Unsupported where the file cannot hold the model (rows not a multiple of the type's block)."""
    _llama_cpp()
    _runnable(config)
    try:
        return LlamaCppModel(config, weights, tensor_type=tensor_type)
    except CheckpointError as e:
        raise Unsupported(f"the {tensor_type} GGUF file cannot hold this model: {e}") from None


def build_q8_0(config: ModelConfig, weights: Weights) -> LlamaCppModel:
    """llama.cpp on a GGUF file with its matrices in Q8_0 (rows a multiple of 32), KV cache in F32,
    in the precision class q8_0."""
    return _quantized(config, weights, "Q8_0")


def build_q4_0(config: ModelConfig, weights: Weights) -> LlamaCppModel:
    """llama.cpp on a GGUF file with its matrices in Q4_0 (rows a multiple of 32), KV cache in F32,
    in the precision class q4_0."""
    return _quantized(config, weights, "Q4_0")


def build_q4_k_m(config: ModelConfig, weights: Weights) -> LlamaCppModel:
    """llama.cpp on the F32 file quantized by its own quantizer to Q4_K_M (rows a multiple of 256),
    KV cache in F32, in the file's class (`precision.file_quantized`)."""
    return _quantized(config, weights, "Q4_K_M")


def build_q5_k_m(config: ModelConfig, weights: Weights) -> LlamaCppModel:
    """The same, quantized to Q5_K_M."""
    return _quantized(config, weights, "Q5_K_M")


def build_q6_k(config: ModelConfig, weights: Weights) -> LlamaCppModel:
    """The same, quantized to Q6_K."""
    return _quantized(config, weights, "Q6_K")


build.constraints = SHAPES  # type: ignore[attr-defined]
# A Q8_0 or Q4_0 file's rows are blocks of 32 (`verifier.formats.gguf.write_gguf` refuses others).
build_q8_0.constraints = tuple(dataclasses.replace(shape, block=32) for shape in SHAPES)  # type: ignore[attr-defined]
build_q4_0.constraints = build_q8_0.constraints  # type: ignore[attr-defined]
# The K types' super-blocks are 256 values: rows of 256 (the recipe falls back to other types otherwise).
K_SHAPES = tuple(dataclasses.replace(shape, block=256) for shape in SHAPES)
build_q4_k_m.constraints = build_q5_k_m.constraints = build_q6_k.constraints = K_SHAPES  # type: ignore[attr-defined]
