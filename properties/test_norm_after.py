"""Norms after the sublayers (Gemma 2's sandwich, OLMo 2's norms after attention and the MLP only): each
branch's output passes through an RMSNorm before it joins the residual stream, so the scale of the
output projection and of the MLP's down projection no longer matters: multiplying W_o (and its bias) or
W_down by c > 0 leaves the output unchanged, as long as the norm's eps is negligible against the mean
square of the branch (checked on the oracle first; where it is not, nothing is compared).

A model that norms the branch's input instead (a Llama block on OLMo 2's weights) or leaves the norm out
breaks it: its residual stream grows with c.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from verifier.plugin.contract import build_checked
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, cases
from verifier.properties.models import requires
from verifier.properties.oracle import Oracle, oracle, precision
from verifier.properties.strategies import NORM_AFTER_FAMILIES

FACTORS = (8.0, 0.25, 64.0)
# The matrix each branch ends with, by the layer's kind (a MoE layer's experts each end with their own).
PROJECTIONS = {"attention": "self_attn.o_proj", "MLP": "mlp.down_proj"}


@requires("logits", family=NORM_AFTER_FAMILIES, drawn="weights of its own, scaled")
@given(case=cases(NORM_AFTER_FAMILIES, scales=(0.3, 1.0), max_n_ctx=48), data=st.data())
def test_scaling_a_branch_s_last_projection_by_c_leaves_a_model_normed_after_it_unchanged(
    model_spec: ModelSpec, case: Case, data: st.DataObject
) -> None:
    """Scaling W_o or W_down by a constant leaves a model with a norm after each sublayer unchanged."""
    branch = data.draw(st.sampled_from(tuple(PROJECTIONS)), label="branch")
    c = data.draw(st.sampled_from(FACTORS), label="c")
    layer = data.draw(st.integers(0, case.config.n_layers - 1), label="layer")
    name = f"model.layers.{layer}.{PROJECTIONS[branch]}"
    weights = dict(case.weights())
    scaled_names = [name + part for part in (".weight", ".bias") if name + part in weights]
    if not scaled_names:  # a MoE layer's MLP: its experts' down projections are named otherwise
        checks.nothing_compared(f"layer {layer} has no {name}.weight")
        return
    for full in scaled_names:
        weights[full] = (weights[full] * np.float32(c)).astype(weights[full].dtype)
    tokens = case.token_array()
    expected = oracle(case).logits(tokens)
    scaled_expected = Oracle(case.config, weights, precision()).logits(tokens)
    # The law holds exactly only where eps is negligible: the oracle's own move is far within the bound.
    if not scaled_expected.compare(scaled_expected.value, against=expected.value).ratio <= 0.25:
        checks.nothing_compared(f"the norm's eps is not negligible after scaling {name} by {c:g}")
        return
    model = models.build(model_spec, case)
    scaled = build_checked(model_spec, case.config, weights)
    checks.agree(
        scaled.logits(tokens),
        scaled_expected,
        against=model.logits(tokens),
        model=model,
        what=f"logits with layer {layer}'s {PROJECTIONS[branch]} weight and bias times {c:g}, against the "
        "unscaled model's",
    )
