"""How far a model's next-token distributions are from the oracle's over a text, in the statistics
llama.cpp's `llama-perplexity --kl-divergence` prints for a quantized model against its base.

For each position t of a text (tokens [T]), the reference distribution P_t (the float64 oracle's
softmax) and the model's Q_t give KL(P_t || Q_t) = sum_v P_t(v) (log P_t(v) - log Q_t(v)); the
statistics are over the T positions: mean, median, 99th percentile and max KL; how often the
model's top token is the oracle's; and Delta p, the change in the probability of the text's next
token (Q_t(x_{t+1}) - P_t(x_{t+1}), over the T - 1 positions that have one): mean, RMS, min and
max.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class DistributionStats:
    """KL divergence and top-token statistics of a model against the oracle over one text."""

    positions: int
    mean_kl: float
    median_kl: float
    p99_kl: float
    max_kl: float
    same_top: float  # the fraction of positions whose top token is the oracle's
    mean_dp: float  # Delta p of the next token: mean, root mean square, min, max
    rms_dp: float
    min_dp: float
    max_dp: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def describe(self) -> str:
        """`KL mean 1.2e-06, median ..., same top 100.0%, Delta p RMS 0.01%` on one line."""
        return (
            f"KL mean {self.mean_kl:.3g}, median {self.median_kl:.3g}, 99% {self.p99_kl:.3g}, max {self.max_kl:.3g}; "
            f"same top token {100 * self.same_top:.1f}%; Delta p mean {100 * self.mean_dp:+.3g}%, "
            f"RMS {100 * self.rms_dp:.3g}%, [{100 * self.min_dp:+.3g}%, {100 * self.max_dp:+.3g}%] "
            f"over {self.positions} positions"
        )


def log_probs(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis, in float64."""
    x = np.asarray(logits, np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def distribution_stats(reference: np.ndarray, logits: np.ndarray, tokens: np.ndarray) -> DistributionStats:
    """The statistics of `logits` [T, V] (the model's) against `reference` [T, V] (the oracle's) over the
    text `tokens` [T] they were computed on."""
    ref, mine = log_probs(reference), log_probs(logits)
    if ref.shape != mine.shape or ref.ndim != 2 or len(tokens) != ref.shape[0]:
        raise ValueError(f"expected logits [T, V] of the same shape for tokens [T]; got {ref.shape}, {mine.shape}")
    p = np.exp(ref)
    kl = np.maximum((p * (ref - mine)).sum(axis=-1), 0.0)  # >= 0 in exact arithmetic; rounding can dip below
    nxt = np.asarray(tokens[1:])
    rows = np.arange(len(nxt))
    dp = np.exp(mine[rows, nxt]) - p[rows, nxt] if len(nxt) else np.zeros(1)
    return DistributionStats(
        positions=int(ref.shape[0]),
        mean_kl=float(kl.mean()),
        median_kl=float(np.median(kl)),
        p99_kl=float(np.percentile(kl, 99)),
        max_kl=float(kl.max()),
        same_top=float((ref.argmax(axis=-1) == mine.argmax(axis=-1)).mean()),
        mean_dp=float(dp.mean()),
        rms_dp=float(np.sqrt((dp**2).mean())),
        min_dp=float(dp.min()),
        max_dp=float(dp.max()),
    )
