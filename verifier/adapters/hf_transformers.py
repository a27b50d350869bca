"""`transformers`' `GPT2LMHeadModel` / `LlamaForCausalLM` on the CPU, as a model under test.

The KV cache is transformers' own `DynamicCache`, copied before each call because transformers
extends it in place and the contract promises that a cache stays reusable.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from verifier.config import ModelConfig
from verifier.hf import build_model
from verifier.weights import Weights


class TransformersModel:
    """A transformers causal LM behind the suite's model interface."""

    def __init__(self, config: ModelConfig, weights: Weights, dtype: Any = None) -> None:
        import torch

        self._torch = torch
        self.config = config
        self.model = build_model(config, weights, dtype=dtype)

    def _run(self, tokens: np.ndarray, **kwargs: Any) -> Any:
        torch = self._torch
        ids = torch.from_numpy(np.asarray(tokens, dtype=np.int64).reshape(-1, np.shape(tokens)[-1]))
        with torch.no_grad():
            return self.model(input_ids=ids, **kwargs)

    def _out(self, logits: Any, tokens: np.ndarray) -> np.ndarray:
        array = logits.float().numpy() if logits.dtype != self._torch.float64 else logits.numpy()
        return array if np.ndim(tokens) == 2 else array[0]

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        """[T] -> [T, V] or [B, T] -> [B, T, V]; with a mask, positions count real tokens only."""
        if attention_mask is None:
            return self._out(self._run(tokens, use_cache=False).logits, tokens)
        torch = self._torch
        mask = torch.from_numpy(np.asarray(attention_mask, dtype=np.int64).reshape(-1, np.shape(tokens)[-1]))
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self._run(tokens, attention_mask=mask, position_ids=positions, use_cache=False)
        return self._out(out.logits, tokens)

    def decode(self, tokens: np.ndarray, cache: Any = None) -> tuple[np.ndarray, Any]:
        """Logits of a chunk after `cache` (a DynamicCache, or None) and the extended cache."""
        out = self._run(tokens, past_key_values=copy.deepcopy(cache), use_cache=True)
        return self._out(out.logits, tokens), out.past_key_values


def build(config: ModelConfig, weights: Weights) -> TransformersModel:
    """`GPT2LMHeadModel` or `LlamaForCausalLM` in float32, eager attention."""
    return TransformersModel(config, weights)
