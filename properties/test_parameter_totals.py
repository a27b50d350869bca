"""Parameter totals: the formula (`verifier.model.params`), the size of the canonical weight set and
`transformers`' own count on the meta device (less what it holds that computes nothing,
`hf.inert_parameters`) agree for any config; the presets have their
published totals (GPT-2 124,439,808; stories15M 15,191,712 learned, 15,204,000 stored). The
comparison with transformers skips where the `transformers` extra is not installed.

These claims are about the suite's own formula and weights, so they run once, not per model."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given

from verifier import extra
from verifier.formats import hf
from verifier.model.config import ModelConfig
from verifier.model.params import parameter_table
from verifier.model.presets import preset
from verifier.model.weights import weight_shapes
from verifier.properties import checks
from verifier.properties.strategies import configs

_NO_TRANSFORMERS = extra.missing("the comparison with transformers' count")


@pytest.mark.skipif(_NO_TRANSFORMERS is not None, reason=str(_NO_TRANSFORMERS))
@example(config=preset("gpt2"))
@example(config=preset("llama2c-stories15M"))
@example(config=preset("llama2c-stories260K"))
@given(config=configs())
def test_formula_equals_weight_set_equals_transformers_meta_count(config: ModelConfig) -> None:
    """The parameter formula equals the size of the weight set and transformers' count on the meta device."""
    formula = parameter_table(config).total
    weights = sum(math.prod(shape) for shape in weight_shapes(config).values())
    meta = hf.parameter_count(config.to_transformers()) - hf.inert_parameters(config)
    if not formula == weights == meta:
        checks.fail("formula", f"parameter count of {config!r}", f"formula {formula:,}, weight set {weights:,}, "
                    f"transformers on the meta device {meta:,}")  # fmt: skip


def test_presets_have_their_published_totals() -> None:
    """The presets have their published totals (124,439,808 for GPT-2 small; 15,191,712 and 15,204,000 for
    stories15M)."""
    found = {
        "gpt2": parameter_table(preset("gpt2")).total,
        "llama2c-stories15M learned": parameter_table(preset("llama2c-stories15M")).total,
        "llama2c-stories15M stored": parameter_table(preset("llama2c-stories15M")).total_with_stored_rope,
    }
    published = {"gpt2": 124_439_808, "llama2c-stories15M learned": 15_191_712, "llama2c-stories15M stored": 15_204_000}
    wrong = {name: (found[name], total) for name, total in published.items() if found[name] != total}
    if wrong:
        checks.fail(
            "formula", "preset totals", "; ".join(f"{n}: {f:,}, published {p:,}" for n, (f, p) in wrong.items())
        )
