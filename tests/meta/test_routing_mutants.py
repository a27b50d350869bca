"""The mutants of issue 27 are bugs where their family has the piece they break, and nothing elsewhere;
the equivalent-by-construction one is shown equivalent.

Each mutant runs in float64 beside the base (which equals `transformers`, tests/meta/test_base.py) on
the rich config of each family of issue 27: where the family has the piece, the logits move by far
more than float64's rounding; where it has not (no renormalisation to drop, no fused matrix, no
interleaved pairs), the mutant computes the base's logits to rounding, and that is why the suite kills
it only on the families listed.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.meta.mutants import catalog
from tests.meta.mutants.base import Transformer
from tests.meta.test_base import RICH
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights

# mutant: the families of issue 27 whose rich config it changes (on the others it is the base)
CHANGES = {
    "TopOneInsteadOfTopK": {"mixtral", "qwen2_moe"},
    "RoutingNotRenormalised": {"mixtral"},
    "RoutingRenormalisedWhereNot": {"qwen2_moe"},
    "RouterSoftmaxWrongAxis": {"mixtral", "qwen2_moe"},
    "SharedExpertUngated": {"qwen2_moe"},
    "FusedGateUpSwapped": {"phi3", "glm"},
    "FusedQKSwapped": {"phi3"},
    "PartialRotaryWholeHead": {"phi3", "glm"},
    "InterleavedPairsAsRotateHalf": {"glm"},
    "TopKLogitsThenSoftmax": {"qwen2_moe"},
    "ExpertBySlot": {"mixtral", "qwen2_moe"},
    "ExpertCapacityDropsTokens": {"mixtral", "qwen2_moe"},
    "FusedGateUpNotLoaded": {"phi3", "glm"},
}
FAMILIES = ("mixtral", "qwen2_moe", "phi3", "glm")


def _logits(cls: type[Transformer], config: ModelConfig, seed: int = 0) -> np.ndarray:
    weights = init_weights(config, seed=seed, scale=0.5, dtype=np.float64)
    tokens = np.random.default_rng(seed).integers(0, config.vocab_size, 24)
    return cls(config, weights, "float64").logits(tokens)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", list(CHANGES))
def test_a_mutant_changes_the_logits_exactly_where_its_family_has_the_piece(name: str, family: str) -> None:
    base = _logits(Transformer, RICH[family])
    diff = np.abs(_logits(getattr(catalog, name), RICH[family]) - base).max()
    if family in CHANGES[name]:
        assert diff > 1e-3 * np.abs(base).max(), f"{name} does not change {family}'s logits ({diff:.3g})"
    else:
        assert diff <= 1e-12 * np.abs(base).max(), f"{name} changes {family}'s logits ({diff:.3g}): list it"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_k_logits_then_softmax_is_softmax_top_k_renormalised(seed: int) -> None:
    """Equivalent by construction: for the k largest logits l_i (the k largest probabilities, softmax
    being monotone), exp(l_i) / sum_j exp(l_j) over those k = p_i / sum_j p_j with p = softmax(l) over
    every expert (the full partition function cancels). So on Mixtral, and on Qwen2-MoE with
    norm_topk_prob, no property can kill TopKLogitsThenSoftmax; only where the family does not
    renormalise is it a bug (the test above), and there it is RoutingRenormalisedWhereNot's."""
    for config in (RICH["mixtral"], RICH["qwen2_moe"].replace(norm_topk=True)):
        base = _logits(Transformer, config, seed)
        found = _logits(catalog.TopKLogitsThenSoftmax, config, seed)
        np.testing.assert_allclose(found, base, rtol=0, atol=1e-12 * np.abs(base).max())
    # where the family does not renormalise, it is the same bug as RoutingRenormalisedWhereNot
    config = RICH["qwen2_moe"].replace(norm_topk=False)
    renormalised = _logits(catalog.RoutingRenormalisedWhereNot, config, seed)
    found = _logits(catalog.TopKLogitsThenSoftmax, config, seed)
    np.testing.assert_allclose(found, renormalised, rtol=0, atol=1e-12 * np.abs(renormalised).max())
    # and the law itself, on one row of logits
    logits = np.random.default_rng(seed).normal(size=8) * 3
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    top = np.argsort(-logits)[:2]
    e = np.exp(logits[top] - logits[top].max())
    np.testing.assert_allclose(e / e.sum(), p[top] / p[top].sum(), rtol=1e-14)
