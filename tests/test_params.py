"""Parameter counts beyond the property suite's (properties/test_parameter_totals.py): every preset
against transformers, the tied classifier, and the breakdown's rows."""

from __future__ import annotations

import math

import pytest

from tests import needs
from verifier.formats import hf
from verifier.model.config import ModelConfig
from verifier.model.params import count_parameters, parameter_table
from verifier.model.presets import PRESETS, preset
from verifier.model.weights import weight_shapes


def _size_of_weight_set(config: ModelConfig) -> int:
    return sum(math.prod(shape) for shape in weight_shapes(config).values())


@needs.transformers
@pytest.mark.parametrize("name", list(PRESETS))
def test_formula_equals_weight_set_and_transformers_for_preset(name: str) -> None:
    config = preset(name)
    assert count_parameters(config) == _size_of_weight_set(config)
    assert count_parameters(config) == hf.parameter_count(config.to_transformers())


def test_untying_the_classifier_adds_vocab_times_d_model() -> None:
    tied = preset("llama2c-stories15M")
    untied = tied.replace(tie_embeddings=False)
    assert count_parameters(untied) - count_parameters(tied) == 32000 * 288


def test_breakdown_rows_sum_to_the_total_and_shares_to_one() -> None:
    table = parameter_table(preset("gpt2"))
    assert sum(r.count for r in table.rows) == table.total
    assert sum(table.share(r) for r in table.rows) == pytest.approx(1.0)
    by_name = {r.component: r.count for r in table.rows}
    assert by_name["token embedding"] == 38_597_376
    assert by_name["position embedding"] == 786_432
