"""Agreement as rates rather than elementwise bounds: greedy tokens, and next-token distributions.

`greedy_agreement`: each token a black box generates is compared with the reference's argmax after
the same prefix (teacher-forced on the model's own picks), and the share that agree is reported.
`distribution_agreement`: the statistics llama.cpp's perplexity tool reports when it compares a
quantized model with the full-precision one (`--kl-divergence`): the KL divergence of next-token
distributions, KL(p_reference || p_model) per position, and "same top p", the share of positions
whose most likely token is the same. The quantized precision classes bound them
(`verifier.analysis.precision`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from verifier.plugin.interface import Unsupported
from verifier.reference import NumpyModel


@dataclass(frozen=True)
class Agreement:
    """How many continuations ran, their tokens, how many agreed with the reference, prompts declined."""

    continuations: int
    tokens: int
    agreed: int
    declined: int

    @property
    def rate(self) -> float:
        """The share of generated tokens equal to the reference's argmax (nan if none ran)."""
        return self.agreed / self.tokens if self.tokens else float("nan")

    def describe(self) -> str:
        return (
            f"{self.agreed} of {self.tokens} tokens ({self.rate:.1%}) equal the reference's argmax over "
            f"{self.continuations} continuations ({self.declined} prompts declined by the model)"
        )


def greedy_agreement(model: Any, reference: NumpyModel, prompts: Iterable[np.ndarray], n_new: int) -> Agreement:
    """Run `model.greedy(prompt [T], n_new)` on each prompt and count tokens equal to the reference's argmax."""
    continuations = tokens = agreed = declined = 0
    for prompt in prompts:
        try:
            generated = np.asarray(model.greedy(prompt, n_new))
        except Unsupported:
            declined += 1
            continue
        continuations += 1
        logits = reference.logits(np.concatenate([prompt, generated]))[len(prompt) - 1 : -1]  # [n_new, V]
        tokens += len(generated)
        agreed += int((np.argmax(logits, axis=-1) == generated).sum())
    return Agreement(continuations, tokens, agreed, declined)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log p over the last axis, in float64: [..., V] -> [..., V]."""
    x = np.asarray(logits, np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def kl_divergence(reference: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL(p_reference || p_model) in nats per position, from logits [..., V] -> [...]."""
    log_p, log_q = log_softmax(reference), log_softmax(logits)
    return np.maximum((np.exp(log_p) * (log_p - log_q)).sum(axis=-1), 0.0)  # >= 0 up to rounding


@dataclass(frozen=True)
class DistributionAgreement:
    """llama.cpp's statistics of a model's next-token distributions against a reference's."""

    positions: int
    mean_kl: float  # nats
    max_kl: float
    same_top: float  # the share of positions whose argmax is the reference's

    def describe(self) -> str:
        return (
            f"mean KL divergence {self.mean_kl:.3g} nats (max {self.max_kl:.3g}), same top token at "
            f"{self.same_top:.1%} of {self.positions} positions"
        )


def distribution_agreement(reference: np.ndarray, logits: np.ndarray) -> DistributionAgreement:
    """A model's `logits` [..., V] against the `reference` logits of the same positions."""
    kl = kl_divergence(reference, logits).reshape(-1)
    same = np.argmax(reference, axis=-1) == np.argmax(logits, axis=-1)
    return DistributionAgreement(kl.size, float(kl.mean()), float(kl.max(initial=0.0)), float(np.mean(same)))
