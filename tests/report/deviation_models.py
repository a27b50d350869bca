"""Models that declare deviations (`verifier.Deviation`), for tests/report/test_deviations.py: the
catalog's ScaleByDHead (attention scores over d_head, not its square root: the logits differ on every
family) and the correct base, each with a declaration."""

from __future__ import annotations

from typing import Any

from tests.meta.mutants import catalog
from verifier import Deviation, ModelConfig, Weights

LOGITS = "test_logits_agree_with_the_oracle"
WHY = "scores over d_head (this engine's documented choice)"


def _declaring(factory: Any, *deviations: Deviation) -> Any:
    def build(config: ModelConfig, weights: Weights) -> Any:
        return factory(config, weights)

    build.deviations = deviations  # type: ignore[attr-defined]
    return build


# Declared on every family, without a size: the logits property deviates, the others judge as usual.
declared = _declaring(catalog.mutants.ScaleByDHead, Deviation(LOGITS, WHY))
# Declared up to a size it exceeds: the property fails.
declared_too_small = _declaring(catalog.mutants.ScaleByDHead, Deviation(LOGITS, WHY, up_to=1.5))
# Declared on Llama only: its GPT-2 failures are failures.
declared_on_llama = _declaring(catalog.mutants.ScaleByDHead, Deviation(LOGITS, WHY, families=("llama",)))
# A correct model that declares the deviation: it did not happen, and the report says so.
correct_declaring = _declaring(catalog.correct, Deviation(LOGITS, WHY))
