"""Mixture of experts (Mixtral, Qwen2-MoE), through the model's own outputs on weights changed on purpose:

- with every expert of every MoE layer the same gated MLP, a block that renormalises its top-k
  probabilities (Mixtral; Qwen2-MoE with norm_topk_prob) is that one dense MLP: the model equals the
  oracle of the dense twin (Mistral for Mixtral, Qwen2 for Qwen2-MoE, the same weights) - a missing
  renormalisation scales every MLP output by the top-k probabilities' sum, a dropped token loses it;
- permuting a layer's experts together with the router's rows leaves every output unchanged (what an
  expert computes follows its row, not its index);
- each token uses exactly top_k experts of the last MoE layer: removing an expert (its down projection
  zeroed) changes a token's logits exactly for the experts it uses (the last layer's MLP at position t
  reaches only position t's logits), and the model's count is top_k wherever the oracle's effects are
  clear of the bound.

That a token's output does not depend on the other rows of its batch, padding included (capacity
that drops tokens, padding that takes a routing slot), is `test_agreement.py`'s batch properties,
drawn on every family.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from verifier.model.config import MOE_FAMILIES, ModelConfig
from verifier.model.families import RECORDS
from verifier.model.weights import WeightMap, weight_shapes
from verifier.plugin.contract import build_checked
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, cases
from verifier.properties.models import requires
from verifier.properties.oracle import Oracle, oracle, precision

# The dense family whose layer is a MoE family's with one MLP (the same attention switches): the family it
# inherits from (Mixtral from Mistral, Qwen2-MoE from Qwen2, Qwen3-MoE from Qwen3).
DENSE_TWIN = {family: RECORDS[family].parent for family in MOE_FAMILIES}
moe_cases = cases(MOE_FAMILIES, scales=(0.3, 1.0, 0.02), max_n_ctx=32)


def expert_names(config: ModelConfig, layer: int) -> tuple[str, list[tuple[str, str, str]]]:
    """Layer `layer`'s router weight and each expert's (gate, up, down) weights, as published."""
    if config.family == "mixtral":
        m = f"model.layers.{layer}.block_sparse_moe."
        names = ("w1", "w3", "w2")
    else:
        m = f"model.layers.{layer}.mlp."
        names = ("gate_proj", "up_proj", "down_proj")
    experts = [tuple(f"{m}experts.{e}.{n}.weight" for n in names) for e in range(config.n_experts)]
    return m + "gate.weight", experts  # type: ignore[return-value]


def _moe_layers(config: ModelConfig) -> list[int]:
    return [i for i in range(config.n_layers) if config.is_moe_layer(i)]


def _dense_twin(case: Case) -> tuple[Case, ModelConfig, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(the case with experts of size d_ff, no shared expert and a renormalised top-k (or every expert
    chosen, where the family does not renormalise); its dense twin; the MoE weights with every expert of
    a layer equal to its expert 0; the twin's weights: the same, with that expert as each layer's MLP)."""
    moe = case.config.replace(d_expert=None, d_shared_expert=None)
    if not moe.norm_topk:  # Qwen2-MoE without renormalisation: every expert, whose probabilities sum to 1
        moe = moe.replace(top_k=moe.n_experts)
    dense = moe.replace(family=DENSE_TWIN[moe.family], n_experts=0, top_k=0, norm_topk=False, dense_layers=())
    same = case._replace(config=moe)
    weights = dict(same.weights())
    twin = {n: w for n, w in weights.items() if n in weight_shapes(dense)}
    for i in _moe_layers(moe):
        _, experts = expert_names(moe, i)
        for names in experts[1:]:
            for name, first in zip(names, experts[0], strict=True):
                weights[name] = weights[first]
        for part, name in zip(("gate_proj", "up_proj", "down_proj"), experts[0], strict=True):
            twin[f"model.layers.{i}.mlp.{part}.weight"] = weights[name]
    return same, dense, weights, twin


@requires("logits", family=MOE_FAMILIES, drawn="weights of its own, with identical experts")
@given(case=moe_cases)
def test_identical_experts_make_the_moe_block_one_dense_mlp(model_spec: ModelSpec, case: Case) -> None:
    """With every expert the same MLP, a renormalising MoE block equals that one dense MLP (its dense twin's oracle)."""
    same, dense, weights, twin = _dense_twin(case)
    moe = same.config
    models.build(model_spec, same)  # the model runs this config (else the case is rejected)
    model = build_checked(model_spec, moe, weights)
    tokens = case.token_array()
    checks.agree(
        model.logits(tokens),
        Oracle(dense, twin, precision()).logits(tokens),
        what=f"logits with every expert of each MoE layer the same MLP (top_k {moe.top_k} of {moe.n_experts}, "
        f"renormalised), against the oracle of the dense {dense.family} model with that MLP",
        model=model,
    )


def _permuted(config: ModelConfig, weights: WeightMap, layer: int, order: list[int]) -> dict[str, np.ndarray]:
    """`weights` with layer `layer`'s experts in `order` (new expert e is old expert order[e]) and
    the router's rows permuted alike."""
    router, experts = expert_names(config, layer)
    out = dict(weights)
    out[router] = np.asarray(weights[router])[order]
    for e, old in enumerate(order):
        for name, source in zip(experts[e], experts[old], strict=True):
            out[name] = weights[source]
    return out


@requires("logits", family=MOE_FAMILIES, drawn="weights of its own, experts permuted")
@given(case=moe_cases, data=st.data())
def test_permuting_the_experts_with_the_router_rows_leaves_the_output_unchanged(
    model_spec: ModelSpec, case: Case, data: st.DataObject
) -> None:
    """Permuting the experts together with the router's rows leaves the output unchanged."""
    c = case.config
    layer = data.draw(st.sampled_from(_moe_layers(c)), label="MoE layer")
    order = data.draw(st.permutations(range(c.n_experts)).filter(lambda p: p != sorted(p)), label="expert order")
    model = models.build(model_spec, case)
    permuted = build_checked(model_spec, c, _permuted(c, case.weights(), layer, list(order)))
    tokens = case.token_array()
    checks.agree(
        permuted.logits(tokens),
        oracle(case).logits(tokens),
        against=model.logits(tokens),
        slack=2.0,
        what=f"logits with layer {layer}'s experts and router rows in the order {list(order)}, against the "
        "unpermuted model's",
        model=model,
    )


def _without_expert(config: ModelConfig, weights: WeightMap, layer: int, expert: int) -> dict[str, np.ndarray]:
    """`weights` with one expert's down projection zeroed: it adds nothing where it is used."""
    _, experts = expert_names(config, layer)
    down = experts[expert][2]
    return dict(weights) | {down: np.zeros_like(np.asarray(weights[down]))}


@requires("logits", family=MOE_FAMILIES, drawn="weights of its own, one expert removed at a time")
@given(case=moe_cases)
def test_each_token_uses_exactly_top_k_experts(model_spec: ModelSpec, case: Case) -> None:
    """Each token uses exactly top_k experts: removing one expert at a time changes a token's logits for top_k
    of them."""
    c = case.config
    layer = c.n_layers - 1
    if not c.is_moe_layer(layer):  # the last layer's MLP reaches only its own position's logits
        c = c.replace(dense_layers=tuple(i for i in c.dense_layers if i != layer))
        case = case._replace(config=c)
    model = models.build(model_spec, case)
    tokens = case.token_array()
    expected = oracle(case).logits(tokens)
    found = model.logits(tokens)
    used = np.zeros(case.T, int)
    clear = np.ones(case.T, bool)  # positions where every expert's effect on the oracle is 0 or far beyond the bound
    for e in range(c.n_experts):
        weights = _without_expert(c, case.weights(), layer, e)
        removed = Oracle(c, weights, precision()).logits(tokens)
        effect = np.abs(removed.value - expected.value).max(-1)
        bound = np.array([removed[t].bound() for t in range(case.T)])
        clear &= (effect == 0) | (effect > 4 * bound)
        change = np.abs(np.asarray(build_checked(model_spec, c, weights).logits(tokens), np.float64) - found).max(-1)
        used += change > 2 * bound
    if not clear.any():
        checks.nothing_compared("no position where every expert's effect on the oracle is clear of the bound")
        return
    counts = used[clear]
    checks.compared()
    if (counts != c.top_k).any():
        t = int(np.flatnonzero(clear)[np.argmax(counts != c.top_k)])
        checks.fail(
            model,
            f"experts used by each token in layer {layer} (top_k {c.top_k} of {c.n_experts})",
            f"position {t}'s logits change when {used[t]} experts are removed one at a time, not {c.top_k}",
        )
