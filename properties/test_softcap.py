"""Soft-capping (Gemma 2): logits pass through cap * tanh(x / cap), so every logit lies within
[-cap, cap] (closed: tanh rounds to 1 in any float format once |x| is a few times the cap); and
attention scores are capped the same way before the mask, so within a row the probabilities of the
keys a query sees differ by at most a factor exp(2 cap) (scores within (-cap, cap)). Weights at
large scales (1 to 10) make the uncapped values far exceed the caps, so a missing cap shows."""

from __future__ import annotations

import numpy as np
from hypothesis import given

from verifier.model import stages
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.models import requires
from verifier.properties.oracle import exact
from verifier.properties.strategies import FINAL_SOFTCAPS, Case, capped_cases, pinned, small_case

# Probabilities as small as exp(-2 cap) / T must not underflow in the narrowest class (float16):
# the score law is checked for caps up to 3 (exp(-6) / 256 = 1e-5).
CHECKED_ATTN_CAPS = (1.0, 3.0)
CAPPED = (
    small_case("gemma2", 24, scale=3.0, n_kv_heads=2, attn_softcap=3.0, final_softcap=5.0),
    small_case("gemma2", 24, scale=10.0, sliding_window=4, layer_types=("sliding_attention", "full_attention"),
               attn_softcap=1.0, final_softcap=30.0),
)  # fmt: skip
DRAWN = "weights drawn at large scales (1 to 10) and caps of their own"


@requires("logits", drawn=DRAWN)
@pinned(*CAPPED)
@given(case=capped_cases(attn_caps=(50.0, *CHECKED_ATTN_CAPS), final_caps=FINAL_SOFTCAPS, max_n_ctx=64))
def test_every_logit_lies_within_the_final_softcap(model_spec: ModelSpec, case: Case) -> None:
    cap = case.config.final_softcap
    model = models.build(model_spec, case)
    logits = np.asarray(model.logits(case.token_array()), np.float64)
    beyond = np.maximum(np.abs(logits) - cap, 0.0)  # [T, V]: how far each logit lies outside [-cap, cap]
    checks.agree(
        beyond, exact(np.zeros_like(beyond), scale=np.full_like(beyond, cap)), model=model,
        what=f"how far each logit lies beyond the final soft-cap {cap:g} (largest |logit| {np.abs(logits).max():.6g})",
    )  # fmt: skip


@requires("trace", drawn=DRAWN)
@pinned(*CAPPED)
@given(case=capped_cases(attn_caps=CHECKED_ATTN_CAPS, final_caps=FINAL_SOFTCAPS, max_n_ctx=64))
def test_attention_probabilities_of_a_row_differ_by_at_most_exp_2_cap(model_spec: ModelSpec, case: Case) -> None:
    """Scores capped within (-cap, cap) give, over the keys a query sees, log(max p) - log(min p) < 2 cap."""
    cap = case.config.attn_softcap
    model = models.build(model_spec, case, "trace")
    trace = model.trace(case.token_array())
    T = case.T
    for layer in range(case.config.n_layers):
        probs = trace.get(stages.layer_stage(layer, "probs"))
        if probs is None:
            checks.nothing_compared("the trace has no attention probabilities (no layers.<i>.probs stage)")
            continue
        W = case.config.window(layer)
        keys, queries = np.arange(T)[None, :], np.arange(T)[:, None]
        seen = (keys <= queries) & (True if W is None else keys > queries - W)  # [T, T]
        p = np.asarray(probs, np.float64)
        with np.errstate(divide="ignore"):
            logs = np.log(p)
        spread = np.where(seen, logs, -np.inf).max(-1) - np.where(seen, logs, np.inf).min(-1)  # [n_heads, T]
        beyond = np.maximum(spread - 2 * cap, 0.0)
        checks.agree(
            beyond, exact(np.zeros_like(beyond), scale=np.full_like(beyond, 2 * cap)), model=model,
            what=f"layer {layer}: log(max p) - log(min p) over the keys each query sees, beyond 2 x the attention "
            f"soft-cap {cap:g} (largest spread {spread.max():.6g})",
        )  # fmt: skip
