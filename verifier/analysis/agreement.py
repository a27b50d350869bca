"""Greedy agreement of a black box with the reference, as a rate rather than a verdict.

For models that are not expected to match float32 (llama2.c's runq.c quantizes its activations to
int8 as well as its weights) until precision classes say how close is close enough: each generated
token is compared with the reference's argmax after the same prefix (teacher-forced on the
model's own picks), and the share that agree is reported.
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
