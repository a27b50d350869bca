"""The mutant catalog as constrained real code runs it: published shapes only (declared), one
sequence at a time, and only the last position's logits, where the bug allows.

`constrained.<ClassName>` is the factory of catalog mutant `<ClassName>` wrapped so:
`--model tests.meta.mutants.constrained:constrained.ScaleByDHead`; `correct` wraps the unmutated base.
A bug that only a batch can show (a reduction over the batch axis, a mask ignored) keeps its batch
(`BATCH_BUGS`); every other mutant takes one sequence at a time. Every wrapped model gives the last
position's logits only, from `logits` and `decode`, and keeps its trace and greedy generation.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from tests.meta.mutants.base import Cache, Transformer
from tests.meta.mutants.catalog import FLOAT32_INVISIBLE, MUTANTS
from verifier import GPT2_PUBLISHED, LLAMA2C_PUBLISHED, Unsupported
from verifier.model.config import ROPE_FAMILIES
from verifier.plugin.interface import Constraints

# The other families at their published norm eps (every published Mistral, Qwen and Gemma config has 1e-6).
FAMILIES_PUBLISHED = Constraints(families=tuple(f for f in ROPE_FAMILIES if f != "llama"), norm_eps=1e-6)
PUBLISHED = (GPT2_PUBLISHED, LLAMA2C_PUBLISHED, FAMILIES_PUBLISHED)
# Bugs that only a batch can show: these mutants keep their batch (and attention mask).
BATCH_BUGS = frozenset({"RMSNormOverBatch", "AttentionMaskIgnored"})
# Mutants whose bug the constrained form cannot show, and why (the mutation report prints it).
EXPLAINED: dict[str, str] = dict(FLOAT32_INVISIBLE)


class NextTokenOnly:
    """A model as an inference engine: the last position's logits of a sequence (or of a batch, if
    `batched`), a KV-cached decode that gives its chunk's last position, its trace and greedy."""

    def __init__(self, inner: Transformer, *, batched: bool) -> None:
        self.inner, self.batched = inner, batched
        self.capabilities = {"last_logits", "decode", "trace", "greedy"}
        self.capabilities |= {"attention_mask"} if batched else {"unbatched"}

    def _one_sequence(self, tokens: np.ndarray) -> None:
        if not self.batched and np.ndim(tokens) != 1:
            raise ValueError(f"this model takes one sequence [T] at a time, not {list(np.shape(tokens))}")

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        self._one_sequence(tokens)
        return self.inner.logits(tokens, attention_mask)[..., -1, :]

    def decode(self, tokens: np.ndarray, cache: Cache | None = None) -> tuple[np.ndarray, Cache]:
        self._one_sequence(tokens)
        out, new_cache = self.inner.decode(tokens, cache)
        return out[..., -1, :], new_cache

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        return self.inner.trace(tokens)

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        return self.inner.greedy(prompt, n_new)


def factory(
    cls: type[Transformer], *, batched: bool | None = None
) -> Callable[[Any, dict[str, np.ndarray]], NextTokenOnly]:
    """The factory of `cls` as constrained code: it runs the published shapes only, and declares them;
    it takes a batch if `batched` (by default, if its bug is one only a batch shows)."""

    def build(config: Any, weights: dict[str, np.ndarray]) -> NextTokenOnly:
        if all(c.refusal(config) for c in PUBLISHED):
            raise Unsupported(f"this model runs the published shapes only: {PUBLISHED[0].refusal(config)}")
        return NextTokenOnly(cls(config, weights), batched=cls.__name__ in BATCH_BUGS if batched is None else batched)

    build.__name__ = build.__qualname__ = f"build_constrained_{cls.__name__}"
    build.constraints = PUBLISHED  # type: ignore[attr-defined]
    return build


constrained = SimpleNamespace(**{cls.__name__: factory(cls) for cls in MUTANTS})
correct = factory(Transformer)
correct_batched = factory(Transformer, batched=True)  # the base of the mutants of BATCH_BUGS
