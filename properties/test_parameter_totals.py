"""Parameter totals: the formula (`verifier.model.params`) equals the size of the canonical weight set
for any config; the presets have their published totals (GPT-2 124,439,808; stories15M 15,191,712
learned, 15,204,000 stored).

These claims are about the suite's own formula and weights, so they run once, not per model. Both
agree with `transformers`' own count on the meta device too, but that is checked by the project's
tests (tests/test_params.py, tests/test_known_models.py), not here: torch and transformers take
seconds to import, and a run whose models do not need them never imports them."""

from __future__ import annotations

import math

from hypothesis import example, given

from verifier.model.config import ModelConfig
from verifier.model.params import parameter_table
from verifier.model.presets import preset
from verifier.model.weights import weight_shapes
from verifier.properties import checks
from verifier.properties.strategies import configs


@example(config=preset("gpt2"))
@example(config=preset("llama2c-stories15M"))
@example(config=preset("llama2c-stories260K"))
@given(config=configs())
def test_formula_equals_weight_set(config: ModelConfig) -> None:
    """The parameter formula equals the size of the weight set."""
    formula = parameter_table(config).total
    weights = sum(math.prod(shape) for shape in weight_shapes(config).values())
    if formula != weights:
        checks.fail("formula", f"parameter count of {config!r}", f"formula {formula:,}, weight set {weights:,}")


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
