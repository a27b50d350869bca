"""Fused layouts (Phi-3's qkv_proj and gate_up_proj, GLM's gate_up_proj), a loader property: the model
reads a fused matrix by its halves, so swapping two of its blocks (gate and up; k and v; q and k where
they are the same size) in one layer changes the output, as it changes the oracle's. A loader that
leaves the fused matrix out (a Llama port whose gate_proj/up_proj find nothing and keep their
initialisation) or reads its blocks symmetrically gives the same output both ways."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from verifier.model.config import FAMILIES, FAMILY_SWITCHES, ModelConfig
from verifier.model.weights import WeightMap
from verifier.plugin.contract import build_checked
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, cases
from verifier.properties.models import requires
from verifier.properties.oracle import Oracle, oracle, precision

FUSED_FAMILIES = tuple(f for f in FAMILIES if FAMILY_SWITCHES[f][0].get("fused_gate_up"))


def _blocks(config: ModelConfig, layer: int) -> dict[str, tuple[str, slice, slice]]:
    """The swappable pairs of row blocks of layer `layer`'s fused matrices: {what: (weight, rows, rows)}."""
    p = f"model.layers.{layer}."
    found = {}
    if config.fused_gate_up and not config.is_moe_layer(layer):
        f = config.d_ff
        found["gate and up"] = (p + "mlp.gate_up_proj.weight", slice(0, f), slice(f, 2 * f))
    if config.fused_qkv:
        q, kv = config.n_heads * config.d_head, config.n_kv_heads * config.d_head
        found["k and v"] = (p + "self_attn.qkv_proj.weight", slice(q, q + kv), slice(q + kv, q + 2 * kv))
        if q == kv:
            found["q and k"] = (p + "self_attn.qkv_proj.weight", slice(0, q), slice(q, 2 * q))
    return found


def _swapped(weights: WeightMap, name: str, a: slice, b: slice) -> dict[str, np.ndarray]:
    w = np.array(weights[name])
    w[a], w[b] = np.array(w[b]), np.array(w[a])
    return dict(weights) | {name: w}


@requires("logits", family=FUSED_FAMILIES, drawn="weights of its own, a fused matrix's blocks swapped")
@given(case=cases(FUSED_FAMILIES, max_n_ctx=32), data=st.data())
def test_swapping_the_blocks_of_a_fused_matrix_changes_the_output(
    model_spec: ModelSpec, case: Case, data: st.DataObject
) -> None:
    """Swapping the blocks of a fused matrix (Phi-3's qkv_proj, gate_up_proj) changes the output as it changes the
    oracle's: the loader reads the fused matrix."""
    c = case.config
    layer = data.draw(st.integers(0, c.n_layers - 1), label="layer")
    what = data.draw(st.sampled_from(sorted(_blocks(c, layer))), label="blocks swapped")
    name, a, b = _blocks(c, layer)[what]
    weights = _swapped(case.weights(), name, a, b)
    tokens = case.token_array()
    expected = oracle(case).logits(tokens)
    swapped_expected = Oracle(c, weights, precision()).logits(tokens)
    moved = np.abs(swapped_expected.value - expected.value).max()
    bound = max(expected.bound(), swapped_expected.bound())
    if not moved > 4 * bound:  # the swap must move the oracle clear of the bound (tiny weights may not)
        checks.nothing_compared(f"swapping {what} moves the oracle's logits by {moved:.3g}, within 4x the bound")
        return
    model = models.build(model_spec, case)
    change = np.abs(
        np.asarray(build_checked(model_spec, c, weights).logits(tokens), np.float64) - model.logits(tokens)
    ).max()
    checks.record_ratio(bound / change if change > 0 else np.inf)
    if not change > bound:
        checks.fail(
            model,
            f"layer {layer}'s {name.rsplit('.', 2)[-2]} with {what} swapped",
            f"the logits move by {change:.3g}, within the {precision().label} tolerance {bound:.3g}, where the "
            f"oracle's move by {moved:.3g}: the model does not read the fused matrix by its blocks",
        )
