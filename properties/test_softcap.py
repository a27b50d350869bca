"""Soft-capping (Gemma 2): logits pass through cap * tanh(x / cap), so every logit lies within
[-cap, cap] (closed: tanh rounds to 1 in any float format once |x| is a few times the cap); and
attention scores are capped the same way before the mask, so every traced score a query uses lies
within [-cap, cap]. Weights at large scales (1 to 10) make the uncapped values far exceed the caps,
so a missing cap shows."""

from __future__ import annotations

import numpy as np
from hypothesis import given

from verifier.model import stages
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, capped_cases
from verifier.properties.models import requires
from verifier.properties.oracle import exact
from verifier.properties.pinned_cases import pinned, small_case
from verifier.properties.strategies import ATTN_SOFTCAPS, FINAL_SOFTCAPS, SOFTCAP_FAMILIES

CAPPED = (
    small_case("gemma2", 24, scale=3.0, n_kv_heads=2, attn_softcap=3.0, final_softcap=5.0),
    small_case("gemma2", 24, scale=10.0, sliding_window=4, layer_types=("sliding_attention", "full_attention"),
               attn_softcap=1.0, final_softcap=30.0),
)  # fmt: skip
DRAWN = "weights drawn at large scales (1 to 10) and caps of their own"


@requires("logits", family=SOFTCAP_FAMILIES, switch="final_softcap", drawn=DRAWN)
@pinned(*CAPPED)
@given(case=capped_cases(attn_caps=ATTN_SOFTCAPS, final_caps=FINAL_SOFTCAPS, max_n_ctx=64))
def test_every_logit_lies_within_the_final_softcap(model_spec: ModelSpec, case: Case) -> None:
    """Every logit lies within the final soft-cap."""
    cap = case.config.final_softcap
    model = models.build(model_spec, case)
    logits = np.asarray(model.logits(case.token_array()), np.float64)
    beyond = np.maximum(np.abs(logits) - cap, 0.0)  # [T, V]: how far each logit lies outside [-cap, cap]
    checks.agree(
        beyond, exact(np.zeros_like(beyond), scale=np.full_like(beyond, cap)), model=model,
        what=f"how far each logit lies beyond the final soft-cap {cap:g} (largest |logit| {np.abs(logits).max():.6g})",
    )  # fmt: skip


@requires("trace", family=SOFTCAP_FAMILIES, switch="attn_softcap", drawn=DRAWN)
@pinned(*CAPPED)
@given(case=capped_cases(attn_caps=ATTN_SOFTCAPS, final_caps=FINAL_SOFTCAPS, max_n_ctx=64))
def test_every_attention_score_lies_within_the_attention_softcap(model_spec: ModelSpec, case: Case) -> None:
    """The traced scores (scaled, soft-capped, before the mask) within [-cap, cap] wherever the query
    sees the key (elsewhere a model may hold anything)."""
    cap = case.config.attn_softcap
    model = models.build(model_spec, case, "trace")
    trace = model.trace(case.token_array())
    keys, queries = np.arange(case.T)[None, :], np.arange(case.T)[:, None]
    for layer in range(case.config.n_layers):
        scores = trace.get(stages.layer_stage(layer, "scores"))
        if scores is None:
            checks.nothing_compared("the trace has no attention scores (no layers.<i>.scores stage)")
            continue
        W = case.config.window(layer)
        seen = (keys <= queries) & (True if W is None else keys > queries - W)  # [T, T]
        beyond = np.where(seen, np.maximum(np.abs(np.asarray(scores, np.float64)) - cap, 0.0), 0.0)
        checks.agree(
            beyond, exact(np.zeros_like(beyond), scale=np.full_like(beyond, cap)), model=model,
            what=f"layer {layer}: how far each attention score lies beyond the soft-cap {cap:g} (largest "
            f"|score| {np.abs(np.where(seen, scores, 0)).max():.6g})",
        )  # fmt: skip
