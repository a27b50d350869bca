"""What a run keeps between tests (`verifier.properties.recent`): each property runs every model on the
same derandomized cases, so the next model's oracle and weights are the ones just made, while large
values (GPT-2 124M's weights) are dropped as soon as another is asked for."""

from __future__ import annotations

import numpy as np

from verifier.model.config import ModelConfig
from verifier.properties import oracle, recent
from verifier.properties.cases import Case
from verifier.properties.recent import Recent

LLAMA = ModelConfig(family="llama", vocab_size=40, n_ctx=16, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                    d_ff=24, norm_eps=1e-5, tie_embeddings=True)  # fmt: skip


def test_the_least_recently_used_go_first_and_the_value_just_made_always_stays() -> None:
    made: list[str] = []

    def make(key: str) -> str:
        made.append(key)
        return key

    sizes = {"a": 4, "b": 4, "c": 4, "big": 50}
    recent = Recent(budget=10)
    for key in ("a", "b", "a", "c"):  # a used again before c: b is the least recently used
        recent.get(key, lambda k=key: make(k), sizes.__getitem__)
    assert made == ["a", "b", "c"] and len(recent) == 2
    recent.get("a", lambda: make("a"), sizes.__getitem__)
    recent.get("b", lambda: make("b"), sizes.__getitem__)
    assert made == ["a", "b", "c", "b"]
    assert recent.get("big", lambda: make("big"), sizes.__getitem__) == "big" and len(recent) == 1  # kept alone
    recent.get("big", lambda: make("big"), sizes.__getitem__)
    assert made.count("big") == 1


def test_the_next_model_meets_the_oracle_and_the_weights_already_made() -> None:
    first, second = (Case(LLAMA, seed=s, scale=0.02, tokens=(1, 5, 9, 2)) for s in (1, 2))
    one = oracle.oracle(first)
    one.logits(first.token_array()).bound()  # the neighbours, the costly part, made once
    assert oracle.oracle(second) is not one  # ... the first model's next case, then the next model's first:
    assert oracle.oracle(first) is one and first.weights() is one.weights
    assert one.neighbour_models(one.precision) is oracle.oracle(first).neighbour_models(one.precision)


def test_weights_beyond_the_budget_are_made_again() -> None:
    budget = recent.KEPT.budget
    try:
        recent.KEPT.budget = 1  # every weight set is over it: only the last is kept
        first, second = (Case(LLAMA, seed=s, scale=0.02, tokens=(1,)) for s in (3, 4))
        held = first.weights()
        assert first.weights() is held
        second.weights()
        assert first.weights() is not held
        np.testing.assert_array_equal(first.weights()["model.embed_tokens.weight"], held["model.embed_tokens.weight"])
    finally:
        recent.KEPT.budget = budget
