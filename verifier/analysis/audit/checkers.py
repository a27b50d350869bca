"""The audit's checkers, by the name a row of the claims file gives (`verifier/data/audit/claims.toml`).

A checker is a function of (inputs, stated, **arguments) that returns `Evidence`: the row's `check`
names it and its `arguments` are the keyword arguments. The code of most checks is in `gpt2_claims`,
`stories15m_claims` and `checks`; some of it is written as a factory of the arguments, which `_made`
turns into a checker. `FORMULAS` are the formulas as the articles state them, which a row's stated
value names (`{formula = NAME}`); a check runs them on the reference's inputs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from verifier.analysis.audit import checks
from verifier.analysis.audit import gpt2_claims as gpt2
from verifier.analysis.audit import stories15m_claims as story
from verifier.analysis.audit.checks import Shape, merged_heads, shapes_check, stage_shape
from verifier.analysis.audit.claim import Check
from verifier.analysis.audit.inputs import Inputs, Run
from verifier.analysis.audit.verdict import Evidence

Checker = Callable[..., Evidence]

# The seeded runs a shared check reads, by the `model` argument.
RUNS: dict[str, Callable[[Inputs], Run]] = {"gpt2": gpt2.gpt2_run, "stories15m": story.story_run}


def _made(factory: Callable[..., Check]) -> Checker:
    """The checker of a factory of checks: its arguments are the factory's (keyword-only)."""

    def checker(inputs: Inputs, stated: Any, **arguments: Any) -> Evidence:
        return factory(**arguments)(inputs, stated)

    own = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("inputs", "stated")]
    made = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in inspect.signature(factory).parameters.values()]
    checker.__signature__ = inspect.Signature([*own, *made])  # type: ignore[attr-defined]
    return checker


def _on_model(factory: Callable[[Callable[[Inputs], Run]], Check]) -> Checker:
    """The checker of a shared check of one model's run, named by the `model` argument."""

    def checker(inputs: Inputs, stated: Any, *, model: str) -> Evidence:
        return factory(RUNS[model])(inputs, stated)

    return checker


def stage_shapes(
    inputs: Inputs,
    stated: Any,
    *,
    model: str,
    stages: Sequence[str],
    weights: Sequence[str] = (),
    joined: bool = False,
    note: str = "",
) -> Evidence:
    """Stated shapes {T: shapes} against the named weights' shapes, then the layer-0 stages' (with the
    heads joined back to one matrix when `joined`)."""

    def shapes(run: Run, T: int) -> list[Shape]:
        found = [stage_shape(run, op, T) for op in stages]
        return [tuple(run.weight(w).shape) for w in weights] + [merged_heads(s) if joined else s for s in found]

    return shapes_check(shapes, RUNS[model], note)(inputs, stated)


CHECKERS: dict[str, Checker] = {
    # shared by both models' claims
    "stage-shapes": stage_shapes,
    "head-split": _on_model(checks.head_split),
    "embedding-rows": _on_model(checks.embedding_rows),
    "mapped-back": _on_model(checks.mapped_back),
    # GPT-2
    "gpt2-pieces": gpt2.pieces,
    "gpt2-token-ids": gpt2.token_ids,
    "gpt2-input-shape": gpt2.input_shape,
    "gpt2-config-value": _made(gpt2.config_value),
    "gpt2-table-shape": gpt2.table_shape,
    "gpt2-embedding-values": gpt2.embedding_values,
    "gpt2-heads": gpt2.heads,
    "gpt2-qkv-weights": gpt2.qkv_weights,
    "gpt2-one-head": shapes_check(gpt2.one_head, gpt2.gpt2_run),
    "gpt2-attention": gpt2.attention,
    "gpt2-attention-formula": gpt2.attention_formula,
    "gpt2-mlp-weights": gpt2.mlp_weights,
    "gpt2-layers": gpt2.layers,
    "gpt2-every-layer": gpt2.every_layer,
    "gpt2-last-row": gpt2.last_row,
    "gpt2-tied": gpt2.tied,
    "gpt2-prediction": gpt2.prediction,
    "gpt2-formula-arithmetic": gpt2.formula_arithmetic,
    "gpt2-formula-count": gpt2.formula_count,
    "gpt2-component": _made(gpt2.component),
    "gpt2-total": gpt2.total,
    "gpt2-primarily": gpt2.primarily,
    "gpt2-padded-last-row": gpt2.padded_last_row,
    "gpt2-generation": gpt2.generation,
    # stories15M
    "stories15m-parameters": story.parameters,
    "stories15m-hyperparameter": _made(story.hyperparameter),
    "stories15m-segment-shapes": _made(story.segment_shapes),
    "stories15m-first-token": story.first_token,
    "stories15m-weights-learned": story.weights_learned,
    "stories15m-position-zero": story.position_zero,
    "stories15m-rms": story.rms,
    "stories15m-projections": _made(story.projections),
    "stories15m-rotated": story.rotated,
    "stories15m-relative": story.relative,
    "stories15m-rope-learned": story.rope_learned,
    "stories15m-table-sharing": story.table_sharing,
    "stories15m-rope-pairs": story.rope_pairs,
    "stories15m-cache-contents": story.cache_contents,
    "stories15m-cache-growth": story.cache_growth,
    "stories15m-attention": story.attention,
    "stories15m-span": story.span,
    "stories15m-residuals": story.residuals,
    "stories15m-order": story.order,
    "stories15m-ffn": story.ffn,
    "stories15m-tied": story.tied,
    "stories15m-classifier": story.classifier_shapes,
    "stories15m-table5-row": _made(story.table5_row),
    "stories15m-classifier-row": story.classifier_row,
    "stories15m-table5-total": story.table5_total,
    "stories15m-embedding-share": story.embedding_share,
    "stories15m-known-range": _made(story.known_range),
    "stories15m-embedding-range": story.embedding_range,
}

FORMULAS: dict[str, Callable[..., Any]] = {
    "gpt2-attention": gpt2.attention_formula_as_stated,
    "stories15m-rms-norm": story.rms_norm_as_stated,
    "stories15m-rope": story.rope_as_stated,
    "stories15m-attention": story.attention_as_stated,
    "stories15m-ffn": story.ffn_as_stated,
}
