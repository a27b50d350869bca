"""Numerical robustness: no NaN or Inf with weights large enough that attention scores reach the
hundreds (where a softmax that does not subtract its max overflows), and the error stays within
the tolerance policy for sequences up to the context limit."""

from __future__ import annotations

from hypothesis import given

from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import LARGE_SCALES, Case, cases
from verifier.properties.models import requires
from verifier.properties.oracle import oracle
from verifier.properties.pinned_cases import (
    FULL_CONTEXT,
    LARGE_LOGITS,
    PUBLISHED_LLAMA,
    RICH_GPT2,
    RICH_LLAMA,
    pinned,
    published,
)

LARGE = (RICH_LLAMA._replace(scale=10.0), LARGE_LOGITS, RICH_GPT2._replace(scale=10.0),
         published(LARGE_LOGITS), PUBLISHED_LLAMA._replace(scale=10.0))  # fmt: skip
LONG_LLAMA = FULL_CONTEXT._replace(config=FULL_CONTEXT.config.replace(family="llama", n_kv_heads=1))


@requires("logits", drawn="weights drawn at large scales (1 to 10)")
@pinned(*LARGE)
@given(case=cases(scales=LARGE_SCALES))
def test_large_logit_weights_give_finite_logits_within_tolerance(model_spec: ModelSpec, case: Case) -> None:
    # Non-finite logits break the contract rule 'finite' inside model.logits.
    """Weights that give large logits give finite logits within tolerance."""
    model = models.build(model_spec, case)
    tokens = case.token_array()
    o = oracle(case)
    checks.agree(model.logits(tokens), o.logits(tokens), what=f"logits at weight scale {case.scale}", model=model,
                 localize=checks.localizer(model, o, tokens))  # fmt: skip


@requires("logits")
@pinned(FULL_CONTEXT, LONG_LLAMA, published(FULL_CONTEXT), published(LONG_LLAMA, tie_embeddings=True))
@given(case=cases(full_context=True))
def test_error_stays_within_tolerance_up_to_the_context_limit(model_spec: ModelSpec, case: Case) -> None:
    """The error against the oracle stays within tolerance up to the context limit."""
    model = models.build(model_spec, case)
    tokens = case.token_array()
    o = oracle(case)
    checks.agree(model.logits(tokens), o.logits(tokens), what=f"logits of a full context of {case.T} tokens",
                 model=model, localize=checks.localizer(model, o, tokens))  # fmt: skip
