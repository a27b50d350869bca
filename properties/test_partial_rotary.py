"""Partial rotary (Phi-3's partial_rotary_factor, GLM's 0.5): RoPE turns each head's first r =
rotary_dim dimensions and passes the other d_head - r, through the model's trace (q, k before and
q_rope, k_rope after RoPE, in the head's own order):

- the passed dimensions of q_rope and k_rope are q's and k's, unchanged, at every position;
- on tokens a, b, a, b, ... (in layer 0, q and k depend on the token alone), the passed dimensions'
  contribution to the score of query m and key n, q[r:] . k[r:] / sqrt(d_head), is the same at every
  (m, n) of the same tokens: it never depends on m - n; the rotated dimensions' contribution at
  (m + 2, n + 2) equals the one at (m, n): it obeys the relative-position law.

A model that rotates the whole head breaks both; one that rotates no dimension breaks none of these
(the agreement properties catch it).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, reject
from hypothesis import strategies as st

from verifier.model import stages
from verifier.model.config import FAMILIES, FAMILY_SWITCHES
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, cases
from verifier.properties.models import requires
from verifier.properties.oracle import exact, oracle

PARTIAL_FAMILIES = tuple(f for f in FAMILIES if "rotary_dim" in FAMILY_SWITCHES[f][1])


@st.composite
def partial_rotary_cases(draw: st.DrawFn, *, periodic: bool = False) -> Case:
    """A case (see `cases`) of a family with partial rotary, rotating r of each head's d_head >= 4
    dimensions, 2 <= r <= d_head - 2; with `periodic`, its tokens alternate its first two."""
    case = draw(cases(PARTIAL_FAMILIES, min_T=3, max_n_ctx=48), label="case")
    d_head = case.config.d_head
    if d_head < 4:
        reject()  # no room for a rotated and a passed pair
    r = 2 * draw(st.integers(1, d_head // 2 - 1), label="rotary_dim / 2")
    case = case._replace(config=case.config.replace(rotary_dim=r))
    if periodic:
        a, b = case.tokens[0], case.tokens[1]
        case = case._replace(tokens=tuple(a if p % 2 == 0 else b for p in range(case.T)))
    return case


def _pairs(trace: dict[str, np.ndarray], n_layers: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    found = []
    for layer in range(n_layers):
        for before, after in (("q", "q_rope"), ("k", "k_rope")):
            b, a = stages.layer_stage(layer, before), stages.layer_stage(layer, after)
            if b in trace and a in trace:
                found.append((f"layer {layer} {before}", trace[b], trace[a]))
    if not found:
        checks.nothing_compared("the trace has no q/k and q_rope/k_rope pairs (layers.<i>.q, .q_rope, ...)")
    return found


@requires("trace", family=PARTIAL_FAMILIES, drawn="a rotary_dim below d_head")
@given(case=partial_rotary_cases())
def test_partial_rotary_passes_the_dimensions_past_rotary_dim_unchanged(model_spec: ModelSpec, case: Case) -> None:
    """With rotary_dim below d_head, the dimensions of q and k past rotary_dim leave RoPE unchanged."""
    model = models.build(model_spec, case, "trace")
    tokens = case.token_array()
    r = case.config.rotated_dims
    for name, before, after in _pairs(model.trace(tokens), case.config.n_layers):
        checks.agree(
            np.asarray(after)[..., r:],
            exact(np.asarray(before)[..., r:]),
            what=f"{name}: dimensions {r}..{case.config.d_head - 1} of each head after RoPE (rotary_dim {r})",
            model=model,
            localize=checks.localizer(model, oracle(case), tokens),
        )


def _contributions(q: np.ndarray, k: np.ndarray, dims: slice) -> tuple[np.ndarray, np.ndarray]:
    """The part of each layer-0 score [h, T, T] that dimensions `dims` of q [h, T, d] and k [kv, T, d]
    give, q[dims] . k[dims] (unscaled: both sides of each law share 1/sqrt(d_head)), query head h on kv
    head h // group; and the root-sum-square of its terms (how far their roundings reach where the sum
    cancels)."""
    q = np.asarray(q, np.float64)[..., dims]
    k = np.repeat(np.asarray(k, np.float64), q.shape[0] // np.shape(k)[0], axis=0)[..., dims]
    terms = np.sqrt(np.square(q) @ np.square(k).transpose(0, 2, 1))
    return q @ k.transpose(0, 2, 1), terms


@requires("trace", family=PARTIAL_FAMILIES, drawn="a rotary_dim below d_head and tokens a, b, a, b, ...")
@given(case=partial_rotary_cases(periodic=True))
def test_partial_rotary_passed_part_ignores_m_minus_n_and_rotated_part_is_relative(
    model_spec: ModelSpec, case: Case
) -> None:
    """With partial rotary, the passed part of a layer-0 score never depends on m - n, and the rotated part obeys the
    relative-position law."""
    model = models.build(model_spec, case, "trace")
    tokens = case.token_array()
    trace = model.trace(tokens)
    q_name, k_name = stages.layer_stage(0, "q_rope"), stages.layer_stage(0, "k_rope")
    if q_name not in trace or k_name not in trace:
        checks.nothing_compared("the trace has no layers.0.q_rope and layers.0.k_rope stages")
        return
    r, T = case.config.rotated_dims, case.T
    layer_0 = next(g for g in oracle(case).model.trace_layers(tokens) if q_name in g)  # sizes the bounds
    causal = np.tril(np.ones((T, T), bool))
    # passed dims: the score part of (m, n) equals that of (m mod 2, n mod 2), the same tokens at positions 0, 1
    passed, _ = _contributions(trace[q_name], trace[k_name], slice(r, None))
    _, passed_terms = _contributions(layer_0[q_name], layer_0[k_name], slice(r, None))
    m, n = np.indices((T, T))
    same_tokens = passed[:, m % 2, n % 2]
    scale = np.abs(same_tokens) + passed_terms + passed_terms[:, m % 2, n % 2]
    checks.agree(
        np.where(causal, passed, 0),
        exact(np.where(causal, same_tokens, 0), T, scale=scale),
        what=f"layer 0: the passed dimensions' ({r}..) part of the score of (m, n) against that of "
        "(m mod 2, n mod 2), the same tokens",
        model=model,
    )
    # rotated dims: the score part of (m + 2, n + 2) equals that of (m, n)
    rotated, _ = _contributions(trace[q_name], trace[k_name], slice(0, r))
    _, rotated_terms = _contributions(layer_0[q_name], layer_0[k_name], slice(0, r))
    later, earlier = np.tril(rotated[:, 2:, 2:]), np.tril(rotated[:, :-2, :-2])
    scale = np.abs(earlier) + np.tril(rotated_terms[:, 2:, 2:]) + np.tril(rotated_terms[:, :-2, :-2])
    checks.agree(
        later,
        exact(earlier, T, scale=scale),
        what=f"layer 0: the rotated dimensions' (..{r - 1}) part of the score of (m + 2, n + 2) against (m, n)",
        model=model,
    )
