"""Shapes, the life of a tensor: every traced stage has the shape its formula gives
(`verifier.model.stages.stage_shapes`), logits are [T, V] and [B, T, V], and GPT-2 124M on 5 tokens
reproduces the articles' table."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from verifier.model import stages
from verifier.model.presets import preset
from verifier.plugin import checkpoint
from verifier.plugin.contract import CheckedModel, build_checked
from verifier.plugin.interface import Unsupported
from verifier.plugin.probes import build_on_checkpoint
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, cases
from verifier.properties.models import requires
from verifier.properties.oracle import oracle
from verifier.properties.pinned_cases import PINNED, pinned


def _assert_shapes(
    model_name: str, trace: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]], *, every_stage: bool = True
) -> None:
    """Each stage of `expected` the trace holds has its shape; with `every_stage`, it holds no other."""
    __tracebackhide__ = True
    wrong = [
        f"{stage} is {list(trace[stage].shape)}, the formula gives {list(shape)}"
        for stage, shape in expected.items()
        if stage in trace and trace[stage].shape != shape
    ]
    unknown = sorted(set(trace) - set(expected)) if every_stage else []
    checks.compared()
    if wrong or unknown:
        detail = "; ".join(wrong + ([f"stages not in verifier.model.stages: {unknown}"] if unknown else []))
        checks.fail(model_name, "traced stage shapes", detail)


@requires("trace")
@pinned(*PINNED)
@given(case=cases())
def test_every_traced_stage_has_its_formula_shape(model_spec: ModelSpec, case: Case) -> None:
    """Every traced stage has the shape its formula gives (the life of a tensor)."""
    model = models.build(model_spec, case, "trace")
    _assert_shapes(model.name, model.trace(case.token_array()), stages.stage_shapes(case.config, case.T))


@requires("logits")
@pinned(*PINNED[:4])
@given(case=cases(max_n_ctx=32))
def test_logits_are_t_by_vocab_for_a_sequence_and_b_by_t_by_vocab_for_a_batch(
    model_spec: ModelSpec, case: Case
) -> None:
    # The contract (verifier.plugin.contract) rejects any other shape with the rule it breaks: [T, V] and
    # [B, T, V], or [V] and [B, V] for a model that gives only the last position's; one that takes one
    # sequence at a time is given no batch.
    """Logits are [T, V] for a sequence and [B, T, V] for a batch."""
    model = models.build(model_spec, case)
    tokens = case.token_array()
    call = model.logits if model.every_position else model.last_logits  # one call of the model each
    expected = oracle(case).logits(tokens) if model.every_position else oracle(case).logits(tokens)[-1]
    single = call(tokens)
    if not model.batched:
        checks.agree(single, expected, what="the logits of one sequence", model=model)
        return
    batch = call(np.stack([tokens, tokens[::-1]]))
    checks.agree(batch[0], expected, what="row 0 of a batch", model=model, against=single, slack=2)


def _gpt2_small(model_spec: ModelSpec) -> tuple[CheckedModel, Case]:
    """`model_spec`'s model of GPT-2 124M, and its weights as a Case without tokens: seeded (seed 0,
    scale 0.02), or with --checkpoint the checkpoint's, where it is GPT-2 124M."""
    config, fixed = preset("gpt2"), checkpoint.current()
    if fixed is not None and fixed.config != config:
        pytest.skip(f"about GPT-2 124M; the checkpoint {fixed.spec} is another model ({fixed.config.family}, "
                    f"d_model {fixed.config.d_model}, {fixed.config.n_layers} layers)")  # fmt: skip
    reason = models.skip_reason(model_spec, ("trace",), "gpt2") or models.support(model_spec).refusal(config)
    if reason:
        pytest.skip(reason)
    weights = Case(config, 0, 0.02, (), fixed)
    try:
        model = (
            build_on_checkpoint(model_spec, fixed) if fixed else build_checked(model_spec, config, weights.weights())
        )
    except Unsupported as e:
        pytest.skip(f"model {model_spec.name!r} does not run GPT-2 124M: {e}")
    checks.judge_at(model)  # the fixed input's comparisons use the model's precision class
    checks.record_example()
    return model, weights


# The table of the articles: tokens [5] -> embedding [5, 768] -> per head q, k, v [5, 64] x 12 ->
# scores [5, 5] -> attention [5, 768] -> MLP [5, 3072] -> [5, 768], x 12 layers -> logits [5, 50257].
ARTICLES_TABLE = {
    "embed": (5, 768),
    "layers.0.q": (12, 5, 64),
    "layers.0.k": (12, 5, 64),
    "layers.0.v": (12, 5, 64),
    "layers.0.scores": (12, 5, 5),
    "layers.0.attn": (5, 768),
    "layers.0.mlp_up": (5, 3072),
    "layers.0.mlp_act": (5, 3072),
    "layers.0.mlp_out": (5, 768),
    "layers.11.resid_mlp": (5, 768),
    "final_norm": (5, 768),
    "logits": (5, 50257),
}


def test_gpt2_124m_on_5_tokens_reproduces_the_articles_table(model_spec: ModelSpec) -> None:
    """GPT-2 124M on 5 tokens reproduces the articles' table of shapes."""
    model, _ = _gpt2_small(model_spec)
    trace = model.trace(np.array([464, 3139, 286, 4881, 318]))  # "The capital of France is"
    # A trace may hold any subset of the stages: the table is checked on the stages it has.
    if not set(ARTICLES_TABLE) & set(trace):
        checks.nothing_compared(f"the trace has none of the table's stages {list(ARTICLES_TABLE)}")
        return
    _assert_shapes(model.name, trace, ARTICLES_TABLE, every_stage=False)
    if "logits" in trace and trace["logits"][-1].shape != (50257,):
        checks.fail(model.name, "the last row", f"is {list(trace['logits'][-1].shape)}, not [50257]")


@pytest.mark.slow
def test_padding_gpt2_124m_to_1024_tokens_gives_1024_by_768_and_changes_no_real_position(
    model_spec: ModelSpec,
) -> None:
    """Padding GPT-2 124M's input to 1,024 tokens gives [1024, 768] and changes no real position's logits."""
    model, weights = _gpt2_small(model_spec)
    real = np.array([464, 3139, 286, 4881, 318])
    padded = np.concatenate([real, np.full(1024 - 5, 50256)])  # <|endoftext|> after the real tokens
    trace = model.trace(padded)
    padded_shapes = {"embed": (1024, 768), "final_norm": (1024, 768), "logits": (1024, 50257)}
    _assert_shapes(model.name, trace, padded_shapes, every_stage=False)
    alone = model.trace(real)["logits"]
    o = oracle(weights._replace(tokens=tuple(int(t) for t in real)))
    checks.agree(
        trace["logits"][:5], o.logits(real), what="real positions after padding", model=model, against=alone, slack=2
    )
