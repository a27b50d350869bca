"""Greedy generation: the tokens a model picks after a prompt are the oracle's argmax, teacher-forced
through the prompt and the model's own earlier picks; where the oracle's best logits are tied within
the tolerance, either token is accepted. Black boxes that only generate (`greedy`) are checked this
way; models with logits are checked by generating with their last position's argmax (one call per
token for a model that gives only the last position's logits)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, note, reject

from verifier.plugin.contract import CheckedModel
from verifier.plugin.interface import Unsupported
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Prompted, prompted_cases
from verifier.properties.models import requires
from verifier.properties.oracle import oracle
from verifier.properties.pinned_cases import (
    LARGE_LOGITS,
    ONE_KV_HEAD,
    PUBLISHED_GPT2,
    PUBLISHED_LLAMA,
    RICH_GPT2,
    RICH_LLAMA,
    pinned,
)

PROMPTED = (
    Prompted(RICH_LLAMA, 8), Prompted(RICH_GPT2, 8), Prompted(PUBLISHED_LLAMA, 8), Prompted(PUBLISHED_GPT2, 8),
    Prompted(ONE_KV_HEAD, 4), Prompted(LARGE_LOGITS, 6),
)  # fmt: skip


def _generate(model: CheckedModel, prompt: np.ndarray, n_new: int) -> np.ndarray:
    """The model's n_new greedy tokens: its own `greedy`, else the argmax of its last row of logits."""
    if "greedy" in model.capabilities:
        return model.greedy(prompt, n_new)
    tokens = list(prompt)
    for _ in range(n_new):
        tokens.append(int(np.argmax(model.last_logits(np.array(tokens)))))
    return np.array(tokens[len(prompt) :])


@requires()
@pinned(*PROMPTED, arg="prompted")
@given(prompted=prompted_cases(max_n_ctx=64))
def test_greedy_tokens_are_the_oracle_argmax_up_to_ties(model_spec: ModelSpec, prompted: Prompted) -> None:
    """Greedy tokens are the oracle's argmax, either token of a tie within the bound accepted (for black boxes that
    give no logits)."""
    case = prompted.case
    model = models.build(model_spec, case)
    if model.lacks("greedy") and model.lacks("logits"):
        pytest.skip(f"model {model.name!r} has neither 'greedy' nor logits")
    prompt = case.token_array()
    # The model runs its picks too: the class's range must hold there (measured: float16 gave NaN at a
    # second token whose scores reach 1.4e5 before scaling, the prompt alone being in range). The picks
    # cost n_new - 1 oracle passes: only a class with a finite range needs them.
    if math.isfinite(model.precision.max_value):
        checks.reject_out_of_range(model, case, oracle(case).continued(prompt, prompted.n_new - 1))
    try:
        picked = _generate(model, prompt, prompted.n_new)
    except Unsupported as e:  # e.g. run.c's prompt encoding has one-byte pieces for ~250 distinct ids
        note(f"the model refused this prompt: {e}")
        checks.record_refusal(f"the model refused a prompt: {e}")
        reject()
    expected = oracle(case).logits(np.concatenate([prompt, picked]))[case.T - 1 : -1]  # [n_new, V], teacher-forced
    for step, token in enumerate(picked):
        what = f"greedy token {step} after a prompt of {case.T} tokens (picked so far {picked[: step + 1].tolist()})"
        checks.top_token(model, expected.value[step], int(token), expected[step].bound(), what=what)
