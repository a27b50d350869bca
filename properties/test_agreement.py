"""Differential agreement: a model computes what the float64 oracle computes, for any config,
weights and tokens; a batch computes what its rows compute alone; the same input gives the same
output. A failure of a model that traces names the first stage that departs from the oracle.
A model that gives only the last position's logits is compared on every prefix."""

from __future__ import annotations

import numpy as np
from hypothesis import given

from verifier.plugin.contract import RULES
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Batched, Case, batched_cases, cases
from verifier.properties.models import requires
from verifier.properties.oracle import oracle
from verifier.properties.pinned_cases import (
    PINNED,
    PUBLISHED_GPT2,
    PUBLISHED_LLAMA,
    RICH_FAMILIES,
    RICH_GPT2,
    RICH_LLAMA,
    STORIES15M,
    pinned,
)


@requires("logits")
@pinned(*PINNED, *RICH_FAMILIES, STORIES15M)
@given(case=cases())
def test_logits_agree_with_the_oracle(model_spec: ModelSpec, case: Case) -> None:
    """Every position's logits agree with the float64 oracle's within the bound of the model's precision class."""
    model = models.build(model_spec, case)
    tokens = case.token_array()
    o = oracle(case)
    checks.agree(
        model.logits(tokens),
        o.logits(tokens),
        what=f"logits of {case.T} tokens against the float64 oracle",
        model=model,
        localize=checks.localizer(model, o, tokens),
    )


@requires("trace")
@pinned(*PINNED, *RICH_FAMILIES)
@given(case=cases())
def test_every_traced_stage_agrees_with_the_oracle(model_spec: ModelSpec, case: Case) -> None:
    """Every stage the model's trace holds agrees with the oracle's; a failure names the first divergent stage."""
    model = models.build(model_spec, case, "trace")
    tokens = case.token_array()
    divergence = oracle(case).localize(model.trace(tokens), tokens, rope_layout=model.rope_layout)
    checks.trace_agrees(divergence, what=f"trace of {case.T} tokens against the oracle's", model=model)


def _rows_alone(model_spec: ModelSpec, batched: Batched, *, masked: bool) -> None:
    case = batched.case
    model = models.build(model_spec, case, "batch", *(["attention_mask"] if masked else []))
    tokens, mask = batched.padded()
    o = oracle(case)
    if not model.every_position:  # a left-padded batch's prefixes may be all padding: check each row's end
        out = model.last_logits(tokens, attention_mask=mask if masked else None)
        for b, row in enumerate(batched.all_rows()):
            alone = np.array(row, dtype=np.int64)
            checks.agree(out[b], o.logits(alone)[-1], what=f"the last logits of row {b} of a [{len(tokens)}, "
                         f"{case.T}] batch{' (left-padded, masked)' if masked else ''} against the same {len(row)} "
                         "tokens run alone", model=model, against=model.last_logits(alone), slack=2.0)  # fmt: skip
        return
    out = model.logits(tokens, attention_mask=mask) if masked else model.logits(tokens)
    for b, row in enumerate(batched.all_rows()):
        alone = np.array(row, dtype=np.int64)
        checks.agree(
            out[b, case.T - len(row) :],
            o.logits(alone),
            what=f"row {b} of a [{len(tokens)}, {case.T}] batch{' (left-padded, masked)' if masked else ''} "
            f"against the same {len(row)} tokens run alone",
            model=model,
            against=model.logits(alone),
            slack=2.0,
        )


@requires("logits", "batch")
@pinned(
    Batched(RICH_LLAMA, (RICH_GPT2.tokens[: RICH_LLAMA.T],)),
    Batched(RICH_GPT2, (RICH_GPT2.tokens[::-1],) * 2),
    Batched(PUBLISHED_LLAMA, (RICH_GPT2.tokens[: RICH_LLAMA.T],)),
    Batched(PUBLISHED_GPT2, (RICH_GPT2.tokens[::-1],) * 2),
    arg="batched",
)
@given(batched=batched_cases(ragged=False, max_n_ctx=64))
def test_batch_rows_equal_the_rows_run_alone(model_spec: ModelSpec, batched: Batched) -> None:
    """Each row of a batch gives the logits of that row run alone (no row leaks into another)."""
    _rows_alone(model_spec, batched, masked=False)


@requires("attention_mask", "batch")
@pinned(
    Batched(RICH_LLAMA, (RICH_LLAMA.tokens[:5], RICH_LLAMA.tokens[3:])),
    Batched(RICH_GPT2, ((7,), (1, 2, 3))),
    Batched(PUBLISHED_LLAMA, (RICH_LLAMA.tokens[:5], RICH_LLAMA.tokens[3:])),
    Batched(PUBLISHED_GPT2, ((7,), (1, 2, 3))),
    arg="batched",
)
@given(batched=batched_cases(ragged=True, max_n_ctx=64))
def test_left_padded_rows_with_a_mask_equal_the_rows_run_alone(model_spec: ModelSpec, batched: Batched) -> None:
    """Left-padded rows with their attention mask give, at their real positions, the logits of the rows run alone."""
    _rows_alone(model_spec, batched, masked=True)


@requires("logits")
@pinned(RICH_LLAMA, RICH_GPT2, PUBLISHED_LLAMA, PUBLISHED_GPT2)
@given(case=cases(max_n_ctx=64))
def test_the_same_input_gives_the_same_output(model_spec: ModelSpec, case: Case) -> None:
    """The same input gives the same output, also after other calls (no state kept between calls)."""
    model = models.build(model_spec, case)
    tokens = case.token_array()
    first = model.logits(tokens)
    model.logits(tokens[::-1].copy())  # another input in between: no state may leak into the next call
    checks.agree(
        model.logits(tokens),
        oracle(case).logits(tokens),
        what=f"contract rule 'deterministic' ({RULES['deterministic']}): logits(tokens) called again",
        model=model,
        against=first,
    )
