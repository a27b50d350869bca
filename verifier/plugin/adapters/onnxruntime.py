"""ONNX Runtime as a model under test: the family's `transformers` model exported to ONNX by
transformers' own exporter, run in an `onnxruntime.InferenceSession` on the CPU with its default
graph optimisations (`ORT_ENABLE_ALL`), as its users run an exported model.

The transformers model is the built-in `transformers` model's (`hf_transformers.TransformersModel`:
the canonical weights converted as transformers 5 holds them, eager attention and experts), in
float32. `transformers.exporters.OnnxExporter` (transformers 5.24's exporter: `torch.export`, then
`torch.onnx.export` with onnxscript, then onnxscript's graph optimiser) writes it in a temporary
directory, and the session reads the file from there. The ecosystem's older path, optimum-onnx,
cannot serve: every release asks for transformers < 4.58, and its exporter imports a function
transformers 5 no longer has (`get_parameter_dtype`). torch's TorchScript exporter (`dynamo=False`)
cannot export transformers 5's models (no ONNX op for `aten::diff`, which its mask code calls).

- `logits`: one graph with a dynamic batch and sequence (`OnnxExporter.export`), input_ids -> logits;
  exported at the first `logits`, so that building the model (on each probe config) exports nothing.
- `decode`: the `decode` graph of `OnnxExporter.export_for_generation` (multi-token, batch 1), which
  takes the KV cache as inputs and returns the extended cache; exported at the first `decode`. The
  cache handed back holds ONNX Runtime's own arrays, so it stays reusable however often it is continued.

What it does not run is declared (`SHAPES`) and refused (`Unsupported`, with the reason); see
`_unsupported`. Where onnxruntime, onnx, onnxscript, torch or transformers are missing, the factory
raises `Unsupported` with the way to install them.
"""

from __future__ import annotations

import importlib
import importlib.util
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verifier import extra
from verifier.model.config import FAMILIES, MOE_FAMILIES, ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.adapters.built_once import BuiltOnce
from verifier.plugin.adapters.hf_transformers import TransformersModel
from verifier.plugin.interface import Constraints, Unsupported

INSTALL = "pip install 'lm-verifier[onnxruntime]'"
# The runtime, and what transformers' ONNX exporter needs besides torch and transformers.
MODULES = ("onnxruntime", "onnx", "onnxscript")


def missing() -> str | None:
    """Why the built-in onnxruntime model cannot run here (a package not installed), or None when it can."""
    absent = [name for name in MODULES if importlib.util.find_spec(name) is None]
    if absent:
        return f"onnxruntime, onnx and onnxscript are needed ({', '.join(absent)} not installed here): {INSTALL}"
    reason = extra.missing("the built-in onnxruntime model")  # torch and transformers, to export
    return None if reason is None else f"{reason}; {INSTALL} installs them with onnxruntime"


def _onnxruntime() -> Any:
    reason = missing()
    if reason is not None:
        raise Unsupported(reason)
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as e:  # found but broken: the reason is the import's own
        raise Unsupported(f"onnxruntime cannot be imported here ({e}): {INSTALL}") from None


@dataclass(frozen=True)
class Cache:
    """The decode graph's KV cache after `n_past` positions of one sequence: its `output.cache.*`
    arrays by the name of the input that takes them back ([1, n_kv_heads, n_past, d_head] each)."""

    n_past: int
    arrays: dict[str, np.ndarray]


# What the export for generation runs `generate` with, to capture prefill and two decode steps (its
# decomposition needs three forward calls): three new tokens, however early an EOS comes.
_GENERATE = {"min_new_tokens": 3, "max_new_tokens": 3}
_GENERATE_POSITIONS = 4  # the sample prompt's 2 tokens and the 2 tokens fed back


class OnnxRuntimeModel:
    """A transformers model exported to ONNX, on ONNX Runtime's CPU provider, behind the suite's model interface."""

    precision = "float32"

    def __init__(self, config: ModelConfig, weights: Weights, threads: int = 1) -> None:
        """`threads`: ONNX Runtime's intra-op threads. One by default: it sizes its pool from every
        core of the machine, and parallel test workers would then contend for the same cores."""
        self._ort = _onnxruntime()
        self.config = config
        self._torch_model = TransformersModel(config, weights).model
        if config.n_experts:
            # Exported with transformers' default experts ("grouped_mm"), as a user's model is: the
            # built-in model's "eager" experts loop over data-dependent token sets, which torch.export
            # refuses ("Could not guard on data-dependent expression Eq(u0, 0)", measured: Mixtral, Qwen2-MoE).
            self._torch_model.set_experts_implementation("grouped_mm")
        if config.family == "gpt2" and config.n_ctx < _GENERATE_POSITIONS:
            # The export for generation runs GPT-2 at positions its learned position table lacks.
            self.capabilities = frozenset({"logits"})
        self._options = self._ort.SessionOptions()  # default graph optimisation level: ORT_ENABLE_ALL
        self._options.intra_op_num_threads = self._options.inter_op_num_threads = threads
        self._dir = tempfile.TemporaryDirectory(prefix="verifier-onnxruntime-")
        self._session: Any = None
        self._decoder: Any = None
        self._decoder_inputs: set[str] = set()

    def _sample(self, batch: int, *, past_n_ctx: bool = False) -> Any:
        """Sample input_ids [batch, 2] to trace with: torch.export specialises a dimension of size 0 or
        1, which would fix every sequence (or every KV cache) at that length. Only 1 token where
        n_ctx is 1, unless `past_n_ctx`: a RoPE model runs past n_ctx, and the export for generation
        must see a cache longer than 1 (with a 1-token prompt, its graph took only caches of 1)."""
        import torch

        return torch.zeros((batch, 2 if past_n_ctx else min(2, self.config.n_ctx)), dtype=torch.int64)

    def _export(self, name: str, export: Callable[[Any, Any], Any]) -> Path:
        """Export with `export(exporter, config)` (dynamic shapes) into its own directory; the path of
        `model.onnx` there, or of the `decode.onnx` of an export for generation."""
        from transformers.exporters import OnnxConfig, OnnxExporter

        directory = Path(self._dir.name) / name
        try:
            export(OnnxExporter(), OnnxConfig(dynamic=True)).save_pretrained(directory)
        except Exception as e:  # the exporter fails in many ways; the reason is its message
            raise RuntimeError(f"transformers' ONNX exporter failed on {self.config!r}: {type(e).__name__}: {e}") from e
        return directory / ("model.onnx" if name == "logits" else "decode.onnx")

    def _open(self, path: Path) -> Any:
        return self._ort.InferenceSession(str(path), self._options, providers=["CPUExecutionProvider"])

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """[T] -> [T, V] or [B, T] -> [B, T, V]."""
        array = np.asarray(tokens, dtype=np.int64)
        (logits,) = self._logits_session().run(["logits"], {"input_ids": array.reshape(-1, array.shape[-1])})
        return logits if array.ndim == 2 else logits[0]

    def _logits_session(self) -> Any:
        """The logits graph's session, exported at the first call: building the model on the probe
        configs (13 kinds, a run's header and `verifier models`) exports nothing (4 to 25 s an export)."""
        if self._session is None:
            path = self._export("logits", lambda exporter, onnx_config: exporter.export(
                self._torch_model, {"input_ids": self._sample(2), "use_cache": False}, onnx_config))  # fmt: skip
            self._session = self._open(path)
        return self._session

    def decode(self, tokens: np.ndarray, cache: Any = None) -> tuple[np.ndarray, Any]:
        """Logits of a chunk after `cache` (None, a Cache, or a tuple of them for [B, T]) and the new
        cache: [T] -> [T, V], [B, T] -> [B, T, V] one row at a time (the decode graph's batch is 1)."""
        array = np.asarray(tokens, dtype=np.int64)
        if array.ndim == 2:
            rows = [self._decode_row(row, None if cache is None else cache[b]) for b, row in enumerate(array)]
            return np.stack([logits for logits, _ in rows]), tuple(c for _, c in rows)
        return self._decode_row(array, cache)

    def _decode_row(self, tokens: np.ndarray, cache: Cache | None) -> tuple[np.ndarray, Cache]:
        decoder = self._decode_session()
        start = 0 if cache is None else cache.n_past
        if start + len(tokens) > self.config.n_ctx:
            raise ValueError(f"{start} cached + {len(tokens)} new tokens exceed n_ctx={self.config.n_ctx}")
        feed = {"input_ids": tokens[None], "position_ids": np.arange(start, start + len(tokens), dtype=np.int64)[None]}
        feed |= self._empty_cache() if cache is None else cache.arrays
        if "attention_mask" in self._decoder_inputs:  # Gemma's and Gemma 2's graphs take the mask [1, past + T]
            feed["attention_mask"] = np.ones((1, start + len(tokens)), dtype=np.int64)
        names = [spec.name for spec in decoder.get_outputs()]
        outputs = dict(zip(names, decoder.run(names, feed), strict=True))
        arrays = {"input." + name.removeprefix("output."): value for name, value in outputs.items() if name != "logits"}
        return outputs["logits"][0], Cache(start + len(tokens), arrays)

    def _empty_cache(self) -> dict[str, np.ndarray]:
        """The decode graph's cache inputs before the first token: keys and values [1, n_kv_heads, 0,
        d_head], and a sliding layer's window as transformers' own empty `DynamicCache` holds it."""
        from transformers import DynamicCache

        layers = DynamicCache(config=self._torch_model.config).layers
        empty = {}
        for spec in self._decode_session().get_inputs():
            layer, _, field = spec.name.removeprefix("input.cache.layers.").partition(".")
            if field in ("keys", "values"):
                _, heads, _, d_head = spec.shape
                empty[spec.name] = np.zeros((1, int(heads), 0, int(d_head)), np.float32)
            elif field:
                empty[spec.name] = getattr(layers[int(layer)], field).numpy()
        return empty

    def _decode_session(self) -> Any:
        """The decode graph's session, exported at the first call (an export takes seconds)."""
        if self._decoder is None:
            path = self._export("decode", lambda exporter, onnx_config: exporter.export_for_generation(
                self._torch_model, {"input_ids": self._sample(1, past_n_ctx=True), **_GENERATE}, onnx_config,
                multi_token_decode=True))  # fmt: skip
            self._decoder = self._open(path)
            self._decoder_inputs = {spec.name for spec in self._decoder.get_inputs()}
        return self._decoder


# Every family and switch: each family's logits agree with the oracle within float32's bound, and its
# decode too (tests/onnxruntime: one config of each with every switch on, and the suite's logits
# property over its pinned and drawn cases). What it lacks is a capability, not a config: no `trace`
# (the graph's intermediate values are not outputs), no `attention_mask` (the exported graph takes
# input_ids only), no `decode` for a GPT-2 of n_ctx < 4 (above). What it cannot run is the MoE
# families' widths that are not in fours (below).
# The MoE families' widths in fours: transformers' default experts (grouped_mm, which the export needs:
# above) call torch's grouped matrix product, which requires 16-byte strides ("strides should be
# multiple of 16 bytes" on a Mixtral of d_model 2, in `generate`, before any export).
SHAPES = (
    Constraints(families=tuple(f for f in FAMILIES if f not in MOE_FAMILIES)),
    Constraints(families=MOE_FAMILIES, block=4),
)


# An export takes seconds (4 to 25 here): each config and weights is exported once.
_exported = BuiltOnce(OnnxRuntimeModel)


def build(config: ModelConfig, weights: Weights) -> OnnxRuntimeModel:
    """The family's transformers model in float32, exported to ONNX, on ONNX Runtime's CPU provider."""
    _onnxruntime()
    return _exported(config, weights)


build.constraints = SHAPES  # type: ignore[attr-defined]
