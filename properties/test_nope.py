"""Layers without RoPE (SmolLM3's NoPE layers, `nope_layers`; `no_rope_layers[i] == 0` in its config):
their attention sees no position but through the causal mask. Through the model's trace:

- on a NoPE layer, q_rope and k_rope are q and k, unchanged, at every position;
- on tokens a, b, a, b, ... with layer 0 a NoPE layer (where q and k depend on the token alone), the
  score of query m and key n is the same at every (m, n) of the same two tokens: it depends neither on
  the positions nor on their distance m - n (a rotated layer's depends on m - n).

A model that rotates its NoPE layers breaks both; one that reads `no_rope_layers` the other way round
(1 as "no RoPE") breaks the first wherever a drawn NoPE layer is rotated, and the agreement properties
wherever it leaves a RoPE layer unrotated.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from verifier.model import stages
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, cases
from verifier.properties.models import requires
from verifier.properties.oracle import exact, oracle
from verifier.properties.strategies import NOPE_FAMILIES


@st.composite
def nope_cases(draw: st.DrawFn, *, periodic: bool = False) -> Case:
    """A case (see `cases`) of a family with NoPE layers, some of its layers without RoPE (the case's own,
    or drawn where it has none); with `periodic`, layer 0 is one of them and its tokens alternate its first two."""
    case = draw(cases(NOPE_FAMILIES, min_T=3, max_n_ctx=48), label="case")
    layers = range(case.config.n_layers)
    nope = set(case.config.nope_layers) or draw(st.sets(st.sampled_from(layers), min_size=1), label="nope_layers")
    if periodic:
        nope |= {0}
        a, b = case.tokens[0], case.tokens[1]
        case = case._replace(tokens=tuple(a if p % 2 == 0 else b for p in range(case.T)))
    return case._replace(config=case.config.replace(nope_layers=tuple(sorted(nope))))


@requires("trace", family=NOPE_FAMILIES, drawn="layers without RoPE")
@given(case=nope_cases())
def test_a_nope_layer_leaves_q_and_k_unrotated(model_spec: ModelSpec, case: Case) -> None:
    """On a layer without RoPE, q and k after the place of RoPE are q and k."""
    model = models.build(model_spec, case, "trace")
    tokens = case.token_array()
    trace = model.trace(tokens)
    compared = False
    for layer in case.config.nope_layers:
        for before, after in (("q", "q_rope"), ("k", "k_rope")):
            b, a = stages.layer_stage(layer, before), stages.layer_stage(layer, after)
            if b not in trace or a not in trace:
                continue
            compared = True
            checks.agree(
                trace[a],
                exact(trace[b]),
                what=f"layer {layer} (no RoPE): {after} against {before}",
                model=model,
                localize=checks.localizer(model, oracle(case), tokens),
            )
    if not compared:
        checks.nothing_compared("the trace has no q/k and q_rope/k_rope pairs of a NoPE layer")


@requires("trace", family=NOPE_FAMILIES, drawn="layer 0 without RoPE and tokens a, b, a, b, ...")
@given(case=nope_cases(periodic=True))
def test_a_nope_layer_0_score_depends_on_the_tokens_alone(model_spec: ModelSpec, case: Case) -> None:
    """On tokens a, b, a, b, ..., the layer-0 scores of a layer without RoPE are the same at every (m, n) of the
    same two tokens."""
    model = models.build(model_spec, case, "trace")
    tokens = case.token_array()
    name = stages.layer_stage(0, "scores")
    trace = model.trace(tokens)
    if name not in trace:
        checks.nothing_compared("the trace has no layers.0.scores stage")
        return
    T, window = case.T, case.config.window(0)
    m, n = np.indices((T, T))
    # the first pair of the same two tokens on or below the diagonal: n' = n mod 2, m' = n' or n' + 1
    n_first = n % 2
    m_first = n_first + (m - n) % 2
    seen = (m >= n) & ((m - n < window) if window is not None else True)
    seen &= (m_first - n_first < window) if window is not None else True
    scores = np.asarray(trace[name], np.float64)
    first = scores[:, m_first, n_first]
    # the size of each score's terms (its rounding grows with them, not with the sum they may cancel to)
    layer_0 = next(g for g in oracle(case).model.trace_layers(tokens) if name in g)
    q, k = (np.asarray(layer_0[stages.layer_stage(0, s)], np.float64) for s in ("q_rope", "k_rope"))
    k = np.repeat(k, q.shape[0] // k.shape[0], axis=0)
    terms = np.sqrt(np.square(q) @ np.square(k).transpose(0, 2, 1)) * case.config.attention_scale
    checks.agree(
        np.where(seen, scores, 0),
        exact(np.where(seen, first, 0), scale=np.abs(first) + terms + terms[:, m_first, n_first]),
        what="layer 0 (no RoPE): the score of (m, n) against that of the first (m', n') of the same tokens",
        model=model,
    )
