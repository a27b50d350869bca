"""Deliberately broken factories, one per contract rule: each wraps the NumPy reference and breaks
exactly one promise, so a test can show that the rule catches it and names itself and the call.
They are plain factories, usable as `--model tests.plugin.broken:<name>` like any user's model."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.reference import NumpyModel


class _Wrapped:
    """The float32 reference behind the plain contract; subclasses break one thing."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.ref = NumpyModel(config, weights)

    def logits(self, tokens: np.ndarray) -> Any:
        return self.ref.logits(tokens)

    def decode(self, tokens: np.ndarray, cache: Any = None) -> Any:
        return self.ref.decode(tokens, cache)

    def trace(self, tokens: np.ndarray) -> Any:
        return self.ref.trace(tokens)


def factory_raises(config: ModelConfig, weights: Weights) -> Any:
    raise RuntimeError("out of memory while allocating the embedding")


def returns_none(config: ModelConfig, weights: Weights) -> Any:
    return None


class _LogitsRaise(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        raise IndexError("index 7 is out of bounds for axis 0 with size 7")


def logits_raise(config: ModelConfig, weights: Weights) -> Any:
    return _LogitsRaise(config, weights)


class _WrongShape(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        return self.ref.logits(tokens)[..., :-1]  # forgot the last vocabulary entry


def wrong_shape(config: ModelConfig, weights: Weights) -> Any:
    return _WrongShape(config, weights)


class _IntLogits(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        return np.round(self.ref.logits(tokens) * 100).astype(np.int64)


def int_logits(config: ModelConfig, weights: Weights) -> Any:
    return _IntLogits(config, weights)


class _ListLogits(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        return self.ref.logits(tokens).tolist()


def list_logits(config: ModelConfig, weights: Weights) -> Any:
    return _ListLogits(config, weights)


class _GradTensor(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        import torch

        return torch.tensor(self.ref.logits(tokens), requires_grad=True)


def grad_tensor(config: ModelConfig, weights: Weights) -> Any:
    return _GradTensor(config, weights)


class _NaN(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        out = self.ref.logits(tokens).copy()
        out[..., -1, 0] = np.nan  # the last position overflowed
        return out


def nan_logits(config: ModelConfig, weights: Weights) -> Any:
    return _NaN(config, weights)


class _Noisy(_Wrapped):
    """Different answers for the same input, as from an uninitialised buffer or a random dropout."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        super().__init__(config, weights)
        self.rng = np.random.default_rng()

    def logits(self, tokens: np.ndarray) -> Any:
        out = self.ref.logits(tokens)
        return out + self.rng.normal(0, 1e-3, out.shape).astype(out.dtype)


def nondeterministic(config: ModelConfig, weights: Weights) -> Any:
    return _Noisy(config, weights)


class _DecodeLogitsOnly(_Wrapped):
    def decode(self, tokens: np.ndarray, cache: Any = None) -> Any:
        return self.ref.decode(tokens, cache)[0]


def decode_not_pair(config: ModelConfig, weights: Weights) -> Any:
    return _DecodeLogitsOnly(config, weights)


class _MutatingCache(_Wrapped):
    """Extends the cache it is given in place (as transformers' DynamicCache does, uncopied)."""

    def decode(self, tokens: np.ndarray, cache: Any = None) -> Any:
        box = cache if cache is not None else []
        logits, new = self.ref.decode(tokens, box[0] if box else None)
        box[:] = [new]
        return logits, box


def mutating_cache(config: ModelConfig, weights: Weights) -> Any:
    return _MutatingCache(config, weights)


class _TraceList(_Wrapped):
    def trace(self, tokens: np.ndarray) -> Any:
        return list(self.ref.trace(tokens).values())


def trace_not_dict(config: ModelConfig, weights: Weights) -> Any:
    return _TraceList(config, weights)


class _TraceOwnNames(_Wrapped):
    def trace(self, tokens: np.ndarray) -> Any:
        return {name.replace("layers.", "h").replace(".", "_"): v for name, v in self.ref.trace(tokens).items()}


def trace_own_names(config: ModelConfig, weights: Weights) -> Any:
    return _TraceOwnNames(config, weights)


class _GreedyOutOfRange:
    capabilities = frozenset({"greedy"})

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.vocab_size = config.vocab_size

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        return np.full(n_new, self.vocab_size)  # one past the last id


def greedy_out_of_range(config: ModelConfig, weights: Weights) -> Any:
    return _GreedyOutOfRange(config, weights)


class _DeclaresUnknown(_Wrapped):
    capabilities = frozenset({"logits", "beam_search"})


def declares_unknown(config: ModelConfig, weights: Weights) -> Any:
    return _DeclaresUnknown(config, weights)


class _DeclaresMissing:
    capabilities = frozenset({"logits", "decode"})

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.ref = NumpyModel(config, weights)

    def logits(self, tokens: np.ndarray) -> Any:
        return self.ref.logits(tokens)


def declares_missing_method(config: ModelConfig, weights: Weights) -> Any:
    return _DeclaresMissing(config, weights)


class _DeclaresMaskWithoutParameter(_Wrapped):
    capabilities = frozenset({"logits", "attention_mask"})


def declares_mask_without_parameter(config: ModelConfig, weights: Weights) -> Any:
    return _DeclaresMaskWithoutParameter(config, weights)


class _DeclaresUnknownPrecision(_Wrapped):
    precision = "int3"


def declares_unknown_precision(config: ModelConfig, weights: Weights) -> Any:
    return _DeclaresUnknownPrecision(config, weights)


class _EditsItsTokens(_Wrapped):
    """Maps its last token to 0 in place, then computes on what it edited: on a shared array the oracle
    would have computed on the edited tokens too, and agreed."""

    def logits(self, tokens: np.ndarray) -> Any:
        tokens[..., -1] = 0
        return self.ref.logits(tokens)


def edits_its_tokens(config: ModelConfig, weights: Weights) -> Any:
    return _EditsItsTokens(config, weights)


class _ExitsInLogits(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        os._exit(0)  # a CI job would pass: the process ends with status 0


def exits_in_logits(config: ModelConfig, weights: Weights) -> Any:
    return _ExitsInLogits(config, weights)


def factory_exits(config: ModelConfig, weights: Weights) -> Any:
    sys.exit("no GPU found")


class _HangsInLogits(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        while True:  # waiting on a server that never answers
            time.sleep(1)


def hangs_in_logits(config: ModelConfig, weights: Weights) -> Any:
    return _HangsInLogits(config, weights)


def factory_hangs(config: ModelConfig, weights: Weights) -> Any:
    threading.Event().wait()  # a lock no one releases
