"""Qwen3's q/k norm: each head's q and k pass through an RMSNorm (over d_head) before RoPE, so the
scale of W_q and of W_k no longer matters: multiplying W_q (and its bias) or W_k (and its bias) by
c > 0 leaves the output unchanged, as long as the norm's eps is negligible against the mean square
of q and k (checked on the oracle first; where it is not, nothing is compared)."""

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
from verifier.properties.strategies import QK_NORM_FAMILIES

FACTORS = (8.0, 0.25, 64.0)


@requires("logits", family=QK_NORM_FAMILIES, drawn="weights of its own, scaled")
@given(case=cases(QK_NORM_FAMILIES, scales=(0.3, 1.0), max_n_ctx=48), data=st.data())
def test_scaling_w_q_or_w_k_by_c_leaves_a_qk_normed_model_unchanged(
    model_spec: ModelSpec, case: Case, data: st.DataObject
) -> None:
    """Scaling W_q or W_k by a constant leaves a model with q/k norms unchanged."""
    which = data.draw(st.sampled_from(("q_proj", "k_proj")), label="projection scaled")
    c = data.draw(st.sampled_from(FACTORS), label="c")
    layer = data.draw(st.integers(0, case.config.n_layers - 1), label="layer")
    name = f"model.layers.{layer}.self_attn.{which}"
    weights = dict(case.weights())
    for part in (".weight", ".bias"):
        if name + part in weights:
            weights[name + part] = (weights[name + part] * np.float32(c)).astype(weights[name + part].dtype)
    tokens = case.token_array()
    expected = oracle(case).logits(tokens)
    scaled_expected = Oracle(case.config, weights, precision()).logits(tokens)
    # The law holds exactly only where eps is negligible: the oracle's own move is far within the bound.
    if not scaled_expected.compare(scaled_expected.value, against=expected.value).ratio <= 0.25:
        checks.nothing_compared(f"the q/k norm's eps is not negligible after scaling {which} by {c:g}")
        return
    model = models.build(model_spec, case)
    scaled = build_checked(model_spec, case.config, weights)
    checks.agree(
        scaled.logits(tokens),
        scaled_expected,
        against=model.logits(tokens),
        model=model,
        what=f"logits with layer {layer}'s {which} weight and bias times {c:g}, against the unscaled model's",
    )
