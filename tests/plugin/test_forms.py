"""Models that take one sequence at a time ("unbatched") and models that give only the last
position's logits ("last_logits"): the suite gets every position of a batch from them (rows one at a
time, every prefix), and a model that answers in another form than it declares is told what to declare.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.plugin import forms
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights
from verifier.plugin.contract import CheckedModel, ContractViolation, MissingCapability, build_checked
from verifier.plugin.probes import PROBE_CONFIGS
from verifier.plugin.registry import ModelSpec
from verifier.reference import NumpyModel

LLAMA = PROBE_CONFIGS["llama-gqa"]
BATCH = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])


def checked(factory: Callable[..., Any], config: ModelConfig = LLAMA) -> CheckedModel:
    return build_checked(ModelSpec(factory.__name__, factory, "test"), config, init_weights(config, seed=0))


def expected(tokens: np.ndarray, config: ModelConfig = LLAMA) -> np.ndarray:
    return NumpyModel(config, init_weights(config, seed=0)).logits(tokens)


def test_a_last_logits_model_is_run_on_every_prefix() -> None:
    model = checked(forms.last_only)
    assert (model.every_position, model.batched) == (False, True)
    np.testing.assert_allclose(model.logits(BATCH), expected(BATCH), rtol=1e-5, atol=1e-6)
    assert model.model.calls == [(2, t) for t in range(1, 6)]
    np.testing.assert_allclose(model.last_logits(BATCH[0]), expected(BATCH[0])[-1], rtol=1e-5, atol=1e-6)
    assert model.model.calls[-1] == (5,)  # the last position: one call


def test_an_unbatched_model_is_run_row_by_row_and_never_given_a_batch() -> None:
    model = checked(forms.one_at_a_time)
    assert (model.every_position, model.batched) == (True, False)
    np.testing.assert_allclose(model.logits(BATCH), expected(BATCH), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.last_logits(BATCH), expected(BATCH)[:, -1], rtol=1e-5, atol=1e-6)
    assert model.model.calls == [(5,), (5,), (5,), (5,)]
    assert model.lacks("batch") == (
        "model 'one_at_a_time' takes one sequence at a time (it declares 'unbatched'): it has no batch to check"
    )
    with pytest.raises(MissingCapability, match=r"lacks\('batch'\) first"):
        model.logits(BATCH, attention_mask=np.ones_like(BATCH))


# Each case: the factory, the tokens given, the rule broken, and what the message tells the user to declare.
HINTS = {
    "last only, undeclared": (
        forms.last_only_undeclared, BATCH[0], "shape",
        "returned shape [32], expected [5, 32]; if the model gives only the last position's logits, declare it on "
        "the model: capabilities = {'last_logits'}",
    ),
    "one at a time, undeclared": (
        forms.one_at_a_time_undeclared, BATCH, "no-exception",
        "raised ValueError: expected one sequence, got shape (2, 5); if the model takes one sequence at a time, "
        "declare it on the model: capabilities = {'logits', 'unbatched'}",
    ),
    "drops the batch": (
        forms.drops_the_batch, BATCH, "shape",
        "returned shape [5, 32], expected [2, 5, 32]; if the model takes one sequence at a time, declare it on the "
        "model: capabilities = {'logits', 'unbatched'}",
    ),
    "says last, gives [1, V]": (
        forms.says_last_gives_all, BATCH[0, :1], "shape",
        "returned shape [1, 32], expected [32]; give the last position's logits without a position axis ([V], or "
        "[B, V] for a batch)",
    ),
    "says last, gives all": (
        forms.says_last_gives_all, BATCH[0], "shape",
        "returned shape [5, 32], expected [32]; if the model gives every position's logits, declare it on the "
        "model: capabilities = {'logits'}",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("factory", "tokens", "rule", "hint"), HINTS.values(), ids=HINTS.keys())
def test_a_model_in_another_form_than_declared_is_told_what_to_declare(
    factory: Callable[..., Any], tokens: np.ndarray, rule: str, hint: str
) -> None:
    with pytest.raises(ContractViolation) as caught:
        checked(factory).last_logits(tokens)
    assert caught.value.rule == rule and str(caught.value).endswith(hint), str(caught.value)


def test_a_model_cannot_declare_both_forms() -> None:
    with pytest.raises(ContractViolation, match=r"declares both 'logits' \(every position\) and 'last_logits'"):
        checked(forms.declares_both)
