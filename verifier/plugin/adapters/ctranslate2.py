"""CTranslate2 as a model under test: the family's `transformers` model converted by CTranslate2's own
converter and run by a `ctranslate2.Generator` on the CPU, as its users run a converted model.

The transformers model is the built-in `transformers` model's (`hf_transformers.TransformersModel`:
the canonical weights as transformers 5 holds them), in float32, written by `save_pretrained` into a
temporary directory beside a stand-in tokenizer (a word-level vocabulary of `vocab_size` names, which
the converter reads for the vocabulary it stores; ids are passed as ids, so the names matter to no
computation). `ctranslate2.converters.TransformersConverter` converts that directory (what
`ct2-transformers-converter --model DIR` runs) with float32 weights, once per config and weights; the
`Generator` loads it with `compute_type` "float32", or "int8_float32" (CTranslate2 quantizes the
weights as it loads them, as it does for a model converted with `--quantization int8`).

- `logits`: `Generator.forward_batch(ids)`, the logits of every position ([B, T, V], a StorageView
  read into NumPy). One sequence or a batch of equal lengths.
- `greedy`: `Generator.generate_batch` with greedy search (`sampling_topk=1`, no end token), the prompt
  forwarded at once (`include_prompt_in_result=False`) and every new token through CTranslate2's own
  KV cache. CTranslate2 has no `decode`: neither `generate_tokens` nor `generate_batch` takes a cache
  from the caller or returns one, and what they give per step is the token (with its log-probability,
  or the log-softmax of the vocabulary), not the logits of a chunk after a cache. So the KV-cache
  properties skip (no "decode" capability), and the cache is checked through the tokens it picks
  (the greedy property: each token the oracle's argmax, teacher-forced, up to near-ties).
- No `trace` (the intermediate values are not outputs) and no `attention_mask` (`forward_batch` takes
  per-row lengths, i.e. right padding, not the left-padded masks the suite draws).

Two models: `ctranslate2` (float32, precision class float32) and `ctranslate2-int8` (compute type
int8_float32: int8 weights, one float32 scale per output row, and each matrix product's input rows
quantized to int8 as it runs; float32 elsewhere). The int8 model declares the Q8_0 class with groups
as long as a row (`precision.q8_0(group_size=..., float16_scales=False)`): CTranslate2 quantizes
each weight row and each input row as a whole, with scale max |x| / 127 in float32 (docs/how-to/engines.md: what it
measures against it and against float32).

Which families CTranslate2 4.8.5 converts, and what it computes for them (docs/how-to/engines.md, tests/ctranslate2):
GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma and Gemma 2 convert; its converter has no loader for
Mixtral, Qwen2-MoE or GLM, and its Phi-3 loader fails under transformers 5 (it reads
`rope_scaling["type"]`, which transformers 5 names "rope_type"): `build` raises `Unsupported` with the
converter's own error for those. Of what converts, several switches are not what CTranslate2 computes,
and the suite reports them as failures (they are not refused, so that the reports show them): see
`DEVIATIONS`. Where ctranslate2, torch or transformers are missing, the factory raises `Unsupported`
with the way to install them.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from verifier import extra
from verifier.analysis import precision
from verifier.model.config import Family, ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.adapters.built_once import BuiltOnce
from verifier.plugin.adapters.hf_transformers import TransformersModel
from verifier.plugin.interface import Constraints, Unsupported

INSTALL = "pip install 'lm-verifier[ctranslate2]'"

# The families CTranslate2 4.8.5's converter converts (a loader for their transformers config).
CONVERTED: tuple[Family, ...] = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")

# What CTranslate2 computes differently for a switch it converts, measured and checked by hand
# (tests/ctranslate2/test_families.py): the suite reports each as a failure.
DEVIATIONS = {
    "llama3 rope_scaling": "Llama 3 RoPE scaling is not applied: the logits are the unscaled config's (its Llama "
    "loader never passes original_max_position_embeddings; linear scaling is applied)",
    "gemma/gemma2 rope_theta, rope_scaling": "the Gemma and Gemma 2 loaders read config.rope_theta, which "
    "transformers 5 keeps in rope_parameters, and no RoPE scaling: CTranslate2 rotates with theta 10000, "
    "unscaled, whatever the config says",
    "gemma2 softcaps, sliding window": "the Gemma 2 loader converts neither attn_logit_softcapping nor "
    "final_logit_softcapping nor sliding_window: every layer attends globally, without caps",
    "qwen2/qwen3 sliding_window": "the Qwen2 and Qwen3 loaders do not convert the sliding window: every layer "
    "attends globally",
    "mistral sliding_window": "forward_batch of more tokens than the window raises 'buffer to copy is of size "
    "T but current storage size is W' (shorter sequences agree)",
    "llama head_dim": "the Llama loader does not pass head_dim: a head_dim other than d_model / n_heads "
    "raises a shape error in forward_batch, and greedy search picks other tokens than the oracle's",
    "gpt2 norm_eps": "the GPT-2 loader does not convert layer_norm_epsilon: CTranslate2 normalises with its "
    "default, 1e-5",
    "gemma/gemma2 attention biases": "the Gemma and Gemma 2 loaders convert the q, k, v and o weights but not "
    "their biases: attention runs without them",
}
# The converter refuses (`Unsupported`, its error the reason): Qwen3's and Qwen2's loaders with Llama 3
# RoPE scaling ("Some required model attributes are not set: ...rotary_low_freq_factor"), and the
# families above it has no working loader for.


def missing() -> str | None:
    """Why the built-in ctranslate2 models cannot run here (a package not installed), or None when they can."""
    if importlib.util.find_spec("ctranslate2") is None:
        return f"ctranslate2 is needed (not installed here): {INSTALL}"
    reason = extra.missing("the built-in ctranslate2 model")  # torch and transformers, to convert
    return None if reason is None else f"{reason}; {INSTALL} installs them with ctranslate2"


def _ctranslate2() -> Any:
    reason = missing()
    if reason is not None:
        raise Unsupported(reason)
    try:
        return importlib.import_module("ctranslate2")
    except ImportError as e:  # found but broken: the reason is the import's own
        raise Unsupported(f"ctranslate2 cannot be imported here ({e}): {INSTALL}") from None


def vocabulary(vocab_size: int) -> list[str]:
    """The stand-in tokenizer's tokens: `<t0>` ... with `<|endoftext|>` last (Qwen2's tokenizer class,
    which transformers loads for a Qwen2 model whatever the files say, adds that token when it is
    missing, and the converter then refuses a vocabulary one longer than the model's)."""
    names = [f"<t{i}>" for i in range(vocab_size)]
    names[-1] = "<|endoftext|>"
    return names


def _write_tokenizer(directory: Path, names: list[str]) -> None:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {name: i for i, name in enumerate(names)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=names[0]))
    special = {"unk_token": names[0], "bos_token": names[min(1, len(names) - 1)], "eos_token": names[-1]}
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special).save_pretrained(directory)


class Converted:
    """One config and weights converted by CTranslate2's converter (float32), in a temporary directory."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        _ctranslate2()
        from ctranslate2.converters import TransformersConverter

        self.config = config
        self.names = vocabulary(config.vocab_size)
        self._dir = tempfile.TemporaryDirectory(prefix="verifier-ctranslate2-")
        source, self.path = Path(self._dir.name) / "transformers", Path(self._dir.name) / "ctranslate2"
        # Quiet: transformers' and the converter's progress bars would fill the suite's log.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            TransformersModel(config, weights).model.save_pretrained(source)
            _write_tokenizer(source, self.names)
            try:
                TransformersConverter(str(source)).convert(str(self.path), quantization="float32")
            except Exception as e:  # it refuses in many ways (ValueError, KeyError, ...): the reason is its message
                reason = f"CTranslate2's converter failed on {config.family}: {type(e).__name__}: {e}"
                raise Unsupported(reason) from None
        self.generators: dict[str, Any] = {}

    def generator(self, compute_type: str, threads: int) -> Any:
        if compute_type not in self.generators:
            ctranslate2 = _ctranslate2()
            self.generators[compute_type] = ctranslate2.Generator(
                str(self.path), device="cpu", compute_type=compute_type, intra_threads=threads
            )
        return self.generators[compute_type]


class CTranslate2Model:
    """A transformers model converted by CTranslate2, on its CPU generator, behind the suite's model interface."""

    capabilities = frozenset({"logits", "greedy"})

    def __init__(self, converted: Converted, compute_type: str = "float32", threads: int = 1) -> None:
        """`threads`: CTranslate2's intra-op threads, one by default (parallel test workers would
        otherwise contend for the same cores)."""
        self.config = converted.config
        self.compute_type = compute_type
        self._names = converted.names
        self._ids = {name: i for i, name in enumerate(converted.names)}
        self._generator = converted.generator(compute_type, threads)
        self.precision: Any = "float32" if compute_type == "float32" else int8_precision(self.config)

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """[T] -> [T, V] or [B, T] -> [B, T, V]."""
        array = np.asarray(tokens, dtype=np.int64)
        rows = array.reshape(-1, array.shape[-1]).tolist()
        logits = np.array(self._generator.forward_batch(rows), dtype=np.float32)
        return logits if array.ndim == 2 else logits[0]

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        """The n_new tokens CTranslate2's greedy search picks after `prompt` [T], through its own KV cache."""
        start = [self._names[int(t)] for t in np.asarray(prompt).reshape(-1)]
        (result,) = self._generator.generate_batch(
            [start], max_length=n_new, sampling_topk=1, beam_size=1, end_token=[], include_prompt_in_result=False
        )
        return np.array(result.sequences_ids[0], dtype=np.int64)


def int8_precision(config: ModelConfig) -> precision.Precision:
    """Q8_0 with one group per row (the longest input a matrix product of `config` reads) and float32
    scales: what CTranslate2's int8 weights and its int8 inputs to each matrix product are."""
    longest = max(config.d_model, config.d_ff, config.n_heads * config.d_head, config.expert_d_ff or 0)
    return precision.q8_0(group_size=longest, float16_scales=False)


# The families it converts, every switch drawn (DEVIATIONS are reported, not refused).
SHAPES = Constraints(families=CONVERTED)


# A conversion writes and reads the model twice (a second or more): each config and weights once.
_converted = BuiltOnce(Converted)


def converted(config: ModelConfig, weights: Weights) -> Converted:
    """`config` and `weights` converted by CTranslate2's converter, once."""
    _ctranslate2()
    return _converted(config, weights)


def build(config: ModelConfig, weights: Weights) -> CTranslate2Model:
    """The family's transformers model in float32, converted by CTranslate2, on its CPU generator in float32."""
    return CTranslate2Model(converted(config, weights), "float32")


def build_int8(config: ModelConfig, weights: Weights) -> CTranslate2Model:
    """The same conversion, loaded with compute type int8_float32 (int8 weights and matrix-product inputs)."""
    return CTranslate2Model(converted(config, weights), "int8_float32")


build.constraints = build_int8.constraints = SHAPES  # type: ignore[attr-defined]
