"""TransformerLens as a model under test: a `TransformerBridge` (TransformerLens 4's model; 4.0 removed
`HookedTransformer`) booted over the family's transformers model, in float32 on the CPU, as its users
boot a model they already hold: `TransformerBridge.boot_transformers(name, hf_model=model)`.

The transformers model is the built-in `transformers` model's (`hf_transformers.TransformersModel`:
the canonical weights as transformers 5 holds them, eager attention and experts). The bridge wraps its
modules in TransformerLens's hooked components; for these families its attention component computes
attention (and extends the KV cache) itself. Booted as it is by default, the bridge keeps the weights
as they are ("Returns raw HF weights by default"): no folded norms, no centred weights or unembedding.
Its compatibility mode (`enable_compatibility_mode()`: HookedTransformer's `fold_ln`,
`center_writing_weights`, `center_unembed`) changes the logits by a constant per position, which the
suite's logits properties do not allow; tests/transformer_lens measures it.

`boot_transformers` needs a tokenizer, and loads the model name's from the Hub when none is given: it
is handed a stand-in (`_tokenizer`: one word per token id, no BOS token, since TransformerLens
reloads a tokenizer that has one from the Hub). The adapter passes token ids, never text.

- `logits`: `bridge(ids, return_type="logits")`, [B, T] -> [B, T, V].
- `decode`: the bridge's KV-cache entry point, `bridge(ids, return_type="logits_and_cache",
  use_cache=True, past_key_values=cache)`, which hands transformers' own `DynamicCache` in and back
  out; copied before each call, because it is extended in place. With transformers 5.24 the bridge
  never extends it (its attention looks for the cache under `past_key_values` or `layer_past`, and
  transformers 5.24's layers pass it as `cache`): the cache handed back is empty and a chunk after it
  attends to itself only, which the suite reports (tests/transformer_lens measures it).

Where TransformerLens (or torch and transformers) is missing, the factory raises `Unsupported` with
the way to install it.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
from typing import Any

import numpy as np

from verifier import extra
from verifier.model.config import FAMILIES, HF_CLASSES, ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.adapters.hf_transformers import TransformersModel
from verifier.plugin.interface import Constraints, Unsupported

INSTALL = "pip install 'lm-verifier[transformer-lens]'"


def missing() -> str | None:
    """Why the built-in TransformerLens model cannot run here (a package not installed), or None when it can."""
    if importlib.util.find_spec("transformer_lens") is None:
        return f"TransformerLens is needed (transformer_lens not installed here): {INSTALL}"
    reason = extra.missing("the built-in TransformerLens model")  # torch and transformers
    return None if reason is None else f"{reason}; {INSTALL} installs them with TransformerLens"


def _bridge_class() -> Any:
    reason = missing()
    if reason is not None:
        raise Unsupported(reason)
    try:
        return importlib.import_module("transformer_lens.model_bridge").TransformerBridge
    except ImportError as e:  # found but broken: the reason is the import's own
        raise Unsupported(f"TransformerLens cannot be imported here ({e}): {INSTALL}") from None


def _tokenizer(vocab_size: int) -> Any:
    """A stand-in tokenizer: token id i is the word `t{i}`; EOS t2 where the vocabulary has it, no BOS."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab_size)}
    tokenizer = Tokenizer(WordLevel(words, unk_token="t0"))
    eos = f"t{min(2, vocab_size - 1)}"
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=eos, pad_token="t0", unk_token="t0")


class TransformerLensModel:
    """A TransformerLens `TransformerBridge` over a transformers model, behind the suite's model interface."""

    precision = "float32"

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        bridge_class = _bridge_class()
        import torch

        self._torch = torch
        self.config = config
        hf_model = TransformersModel(config, weights).model
        # TransformerLens picks its adapter by the config's architectures (a config.json's), and by the model
        # type only for some: a config built in memory names none (Qwen3-MoE's was not found without it).
        hf_model.config.architectures = [HF_CLASSES[config.family][1]]
        self.bridge = bridge_class.boot_transformers(
            f"lm-verifier/{config.family}",
            hf_model=hf_model,
            tokenizer=_tokenizer(config.vocab_size),
            device="cpu",
            dtype=torch.float32,
        )

    def _ids(self, tokens: np.ndarray) -> Any:
        return self._torch.from_numpy(np.asarray(tokens, dtype=np.int64).reshape(-1, np.shape(tokens)[-1]))

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """[T] -> [T, V] or [B, T] -> [B, T, V]."""
        with self._torch.no_grad():
            logits = self.bridge(self._ids(tokens), return_type="logits")
        out = logits.float().numpy()
        return out if np.ndim(tokens) == 2 else out[0]

    def decode(self, tokens: np.ndarray, cache: Any = None) -> tuple[np.ndarray, Any]:
        """Logits of a chunk after `cache` (transformers' DynamicCache, or None) and the extended cache."""
        past = {} if cache is None else {"past_key_values": copy.deepcopy(cache)}
        with self._torch.no_grad():
            logits, new = self.bridge(self._ids(tokens), return_type="logits_and_cache", use_cache=True, **past)
        out = logits.float().numpy()
        return (out if np.ndim(tokens) == 2 else out[0]), new


# Every family: TransformerLens 4.3 has an adapter for each (GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma,
# Gemma 2, Mixtral, Qwen2-MoE, Phi-3, GLM, Qwen3-MoE), and the default bridge's logits agree with the oracle
# (tests/transformer_lens). No `trace` (the hooks' names and shapes are TransformerLens's), no
# `attention_mask`.
SHAPES = Constraints(families=FAMILIES)


def build(config: ModelConfig, weights: Weights) -> TransformerLensModel:
    """A TransformerBridge, booted as it is by default, over the family's transformers model in float32."""
    _bridge_class()
    return TransformerLensModel(config, weights)


build.constraints = SHAPES  # type: ignore[attr-defined]
