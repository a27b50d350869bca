"""Agreement as rates rather than elementwise bounds: greedy tokens, and next-token distributions.

`greedy_agreement`: each token a black box generates is compared with the reference's argmax after
the same prefix (teacher-forced on the model's own picks), and the share that agree is reported.
`distribution_agreement`: the statistics llama.cpp's perplexity tool reports when it compares a
quantized model with the full-precision one (`--kl-divergence`): the KL divergence of next-token
distributions, KL(p_reference || p_model) per position, "same top p", the share of positions whose most
likely token is the same, and over a text, the change in its next token's probability (`verifier kl`).
The quantized precision classes bound them (`verifier.analysis.precision`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from verifier.model.unsupported import Unsupported
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
    """llama.cpp's statistics of a model's next-token distributions against a reference's: KL(P || Q) per
    position (mean, median, 99th percentile, max), the share of positions whose top token is the
    reference's, and, where the text is given, Delta p: the change in the probability of its next token
    (Q_t(x_t+1) - P_t(x_t+1); mean, RMS, min, max; None without the text)."""

    positions: int
    mean_kl: float  # nats
    max_kl: float
    same_top: float  # the share of positions whose argmax is the reference's
    median_kl: float = 0.0
    p99_kl: float = 0.0
    mean_dp: float | None = None
    rms_dp: float | None = None
    min_dp: float | None = None
    max_dp: float | None = None

    def describe(self) -> str:
        text = (
            f"mean KL divergence {self.mean_kl:.3g} nats (median {self.median_kl:.3g}, 99% {self.p99_kl:.3g}, "
            f"max {self.max_kl:.3g}), same top token at {self.same_top:.1%} of {self.positions} positions"
        )
        if self.rms_dp is not None and self.mean_dp is not None and self.min_dp is not None and self.max_dp is not None:
            text += (
                f"; Delta p mean {100 * self.mean_dp:+.3g}%, RMS {100 * self.rms_dp:.3g}%, "
                f"[{100 * self.min_dp:+.3g}%, {100 * self.max_dp:+.3g}%]"
            )
        return text


def distribution_agreement(
    reference: np.ndarray, logits: np.ndarray, tokens: np.ndarray | None = None
) -> DistributionAgreement:
    """A model's `logits` [..., V] against the `reference` logits of the same positions; with the text
    `tokens` [T] they were computed on (logits [T, V]), Delta p of its next tokens too."""
    if np.shape(reference) != np.shape(logits):
        raise ValueError(f"expected logits of the same shape; got {np.shape(reference)} and {np.shape(logits)}")
    kl = kl_divergence(reference, logits).reshape(-1)
    same = np.argmax(reference, axis=-1) == np.argmax(logits, axis=-1)
    found = DistributionAgreement(
        kl.size, float(kl.mean()), float(kl.max(initial=0.0)), float(np.mean(same)),
        float(np.median(kl)), float(np.percentile(kl, 99)),
    )  # fmt: skip
    if tokens is None or len(tokens) < 2:
        return found
    if np.ndim(logits) != 2 or len(tokens) != np.shape(logits)[0]:
        raise ValueError(f"expected logits [T, V] for tokens [T]; got {np.shape(logits)} for {len(tokens)} tokens")
    rows, nxt = np.arange(len(tokens) - 1), np.asarray(tokens[1:])
    dp = np.exp(log_softmax(logits)[rows, nxt]) - np.exp(log_softmax(reference)[rows, nxt])
    return dataclasses.replace(
        found, mean_dp=float(dp.mean()), rms_dp=float(np.sqrt((dp**2).mean())), min_dp=float(dp.min()),
        max_dp=float(dp.max()),
    )  # fmt: skip
