"""The built-in models at each precision class (`fixtures/builtin.py`, run by name) agree with the
oracle within their class's bounds, and each with one deliberate bug fails, the message naming the
class. The checks are the suite's own (`checks.agree`, the greedy tie rule), on pinned cases; the
slow tier runs the whole suite on each (`test_each_built_in_conforms`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.meta.suite_runs import run_suite
from tests.precision import buggy
from verifier.analysis.precision import BFLOAT16, FLOAT16, Q8_0, TF32
from verifier.fixtures.builtin import PRECISION_MODELS
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights
from verifier.plugin.contract import CheckedModel, build_checked
from verifier.plugin.interface import Unsupported
from verifier.plugin.llama2c import Llama2cUnavailable, checkout
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks
from verifier.properties import oracle as oracles
from verifier.properties.cases import Case
from verifier.properties.pinned_cases import LARGE_LOGITS, ONE_KV_HEAD, RICH_GPT2, RICH_LLAMA, SMALL_ACTIVATIONS
from verifier.report.inprocess import check

# Q8_0 and Q4_0 GGUF files need rows a multiple of 32: d_model 64, d_ff 96; llama.cpp's K types, 256.
ROWS_OF_32 = RICH_LLAMA._replace(config=RICH_LLAMA.config.replace(d_model=64, d_ff=96))
# At RICH_LLAMA's scale 0.3 the bound of d_model 256 (its logits reach tens) passes the bug below at 0.79
# of it; at 0.05 (logits up to 2.3) it fails by 3.2x (Q4_K_M) and 2.9x (Q6_K), the correct file 0.12 and 0.14.
ROWS_OF_256 = RICH_LLAMA._replace(config=RICH_LLAMA.config.replace(d_model=256, d_ff=256), scale=0.05)
CASES = (RICH_LLAMA, RICH_GPT2, SMALL_ACTIVATIONS, ONE_KV_HEAD, LARGE_LOGITS, ROWS_OF_32, ROWS_OF_256)
LOGITS_MODELS = [name for name in PRECISION_MODELS if name != "runq"]
BUGGY = {
    **buggy.TRANSFORMERS,
    **{f"numpy-{p.name}": buggy.reference_output_projection_transposed(p) for p in (TF32, FLOAT16, BFLOAT16, Q8_0)},
    "llama2c-v2-reader": buggy.v2_reader_keeping_interleaved_rows,
    "llamacpp-q8_0": buggy.llamacpp_rows_not_interleaved(PRECISION_MODELS["llamacpp-q8_0"]),
    **{
        name: buggy.llamacpp_rows_not_interleaved(PRECISION_MODELS[name])
        for name in ("llamacpp-q8_0", "llamacpp-q4_0", "llamacpp-q4_k_m", "llamacpp-q5_k_m", "llamacpp-q6_k")
    },
}
LLAMACPP = ("llamacpp-q8_0", "llamacpp-q4_0", "llamacpp-q4_k_m", "llamacpp-q5_k_m", "llamacpp-q6_k")
K_TYPES = ("llamacpp-q4_k_m", "llamacpp-q5_k_m", "llamacpp-q6_k")  # files of llama.cpp's own quantizer


def _needs(name: str) -> None:
    """Skip, saying why, where a built-in's engine is not installed here."""
    if name.partition("@")[0] in LLAMACPP:
        pytest.importorskip(
            "llama_cpp", reason="llama-cpp-python is not installed (pip install 'lm-verifier[llamacpp]')"
        )
    if name == "runq":
        try:
            checkout.program("runq")
        except Llama2cUnavailable as e:
            pytest.skip(f"llama2.c's runq.c is unavailable: {e}")


def _built(name: str, factory, case: Case) -> CheckedModel | None:  # type: ignore[no-untyped-def]
    try:
        model = build_checked(ModelSpec(name, factory, "test"), case.config, case.weights())
    except Unsupported:
        return None
    checks.judge_at(model, case)
    return model


def _agree(model: CheckedModel, case: Case) -> float:
    tokens = case.token_array()
    expected = oracles.oracle(case).logits(tokens)
    return checks.agree(model.logits(tokens), expected, what="logits", model=model)


@pytest.mark.parametrize("name", LOGITS_MODELS)
def test_a_correct_built_in_agrees_within_its_class(name: str) -> None:
    _needs(name)
    with checks.recording("test"):
        ran = [
            case for case in CASES if (model := _built(name, PRECISION_MODELS[name], case)) and _agree(model, case) <= 1
        ]
    assert ran, f"{name} ran no case"


@pytest.mark.parametrize("name", LOGITS_MODELS)
def test_the_built_in_with_one_bug_fails_naming_its_class(name: str) -> None:
    _needs(name)
    case = ROWS_OF_256 if name in K_TYPES else ROWS_OF_32
    with checks.recording("test"):
        model = _built(name, BUGGY[name], case)
        assert model is not None
        with pytest.raises(checks.PropertyFailure) as failure:
            _agree(model, case)
    label = model.precision.label
    assert f"model {name!r} ({label}), logits" in str(failure.value)
    assert f"exceeds the {label} tolerance" in str(failure.value)


def _greedy_shortfalls(model: CheckedModel, case: Case, n_new: int = 4) -> list[float]:
    """The greedy test's rule: each picked token's shortfall in the oracle's logits over the tie bound."""
    prompt = case.token_array()[:8]
    picked = model.greedy(prompt, n_new)
    expected = oracles.oracle(case).logits(np.concatenate([prompt, picked]))[len(prompt) - 1 : -1]
    return [
        float(expected.value[t].max() - expected.value[t][token]) / expected[t].bound()
        for t, token in enumerate(picked)
    ]


@pytest.fixture(scope="module")
def llama2c_tree() -> Path:
    try:
        checkout.program("runq")
        return checkout.source_tree()
    except Llama2cUnavailable as e:
        pytest.skip(f"llama2.c's runq.c is unavailable: {e}")


@pytest.mark.needs_cc
def test_runq_picks_the_dequantized_oracle_s_argmax_and_with_one_bug_does_not(
    llama2c_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = RICH_LLAMA._replace(tokens=(1, *RICH_LLAMA.tokens[1:]))  # llama2.c prompts start with BOS
    with checks.recording("test"):
        model = _built("runq", PRECISION_MODELS["runq"], case)
        assert model is not None and model.precision.label == "q8_0 (groups of 8, float32 scales)"
        assert max(_greedy_shortfalls(model, case)) <= 1
        monkeypatch.setenv(checkout.SOURCE_ENV, str(buggy.runq_tree_scaled_by_d_head(llama2c_tree, tmp_path / "bug")))
        broken = _built("runq", PRECISION_MODELS["runq"], case)
        assert broken is not None
        assert max(_greedy_shortfalls(broken, case)) > 1, "runq.c scaling scores by head_size picked the same tokens"


# llama.cpp's quantized files are drawn configs whose rows are blocks of 32 (their declared `block`;
# until they were, their verdict was "untested"), on Llama: its other families compute otherwise at any
# precision (windows ignored, a tabulated GELU: the engine matrix, docs/engine-matrix.md).
# Of the K types, Q4_K_M (the same code as Q5_K_M's and Q6_K's; the engine matrix runs all three).
@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [f"{n}@llama" if n in LLAMACPP else n for n in PRECISION_MODELS if n not in K_TYPES[1:]]
)
def test_each_built_in_conforms(name: str, tmp_path: Path) -> None:
    _needs(name)
    report = run_suite(name, tmp_path)
    assert report.conforms, "\n".join(f"{r.property}: {r.detail}" for r in report.failures) or report.verdict


@pytest.mark.parametrize("name", ["numpy-bfloat16", "numpy-float16"])
def test_the_relative_position_law_holds_where_a_score_s_terms_cancel(name: str) -> None:
    """The property's pinned `CANCELLING_SCORES` (a layer-0 score of -1.6e-4 from terms of 7.6e-3):
    the reference rounded to bfloat16 failed it by 3.05x, to float16 by 1.25x, while the bound was
    relative to |score| alone."""
    law = "test_rope_layer_0_scores_depend_only_on_the_distance_m_minus_n"
    report = check(name, profile="ci", pytest_args=["-p", "no:cacheprovider", "-k", law])
    assert report.conforms, "\n".join(f"{r.property}: {r.detail}" for r in report.failures) or report.verdict


def test_transformers_in_float16_declares_no_attention_mask_as_left_padding_gives_nan_there() -> None:
    """transformers' eager attention in float16 gives NaN at the real positions of a left-padded row
    (the mask's -65,504 plus a score below -16 overflows to -inf; see `hf_transformers`): the
    built-in must not offer the mask, and once transformers stops doing this the limit can go."""
    pytest.importorskip("transformers", reason="needs the transformers extra")
    config = ModelConfig(
        "gpt2", vocab_size=2, n_ctx=24, d_model=6, n_layers=2, n_heads=3, n_kv_heads=3, d_ff=1, norm_eps=1e-5,
        tie_embeddings=False,
    )  # fmt: skip
    model = PRECISION_MODELS["transformers-float16"](config, init_weights(config, seed=0, scale=1.0))
    assert "attention_mask" not in model.capabilities
    logits = type(model).logits(model, np.zeros((2, 2), np.int64), attention_mask=np.array([[1, 1], [0, 1]]))
    assert np.isnan(logits[1, 1]).all() and np.isfinite(logits[0]).all()


def test_transformers_in_bfloat16_agrees_at_a_near_tie_its_rounding_closes() -> None:
    """The thorough profile's case: the oracle's scores 511.5 and 514.9 (probabilities 0.035, 0.965)
    are 516 and 516 in transformers' bfloat16 (0.5, 0.5); a correct bfloat16 model may round so, and
    the bound must say so (1.35x it before the nudged oracles pulled scores toward near-ties)."""
    pytest.importorskip("transformers", reason="needs the transformers extra")
    config = ModelConfig(
        "gpt2", vocab_size=194, n_ctx=5, d_model=90, n_layers=1, n_heads=3, n_kv_heads=3, d_ff=360, norm_eps=1e-5,
        tie_embeddings=True,
    )  # fmt: skip
    case = Case(config, 371, 1.0, (5, 0, 3, 173, 173))
    with checks.recording("test"):
        model = _built("transformers-bfloat16", PRECISION_MODELS["transformers-bfloat16"], case)
        assert model is not None and _agree(model, case) <= 1


def _llama(vocab_size: int, n_ctx: int, d_model: int, n_heads: int, d_ff: int) -> ModelConfig:
    return ModelConfig(
        "llama", vocab_size=vocab_size, n_ctx=n_ctx, d_model=d_model, n_layers=1, n_heads=n_heads,
        n_kv_heads=n_heads, d_ff=d_ff, norm_eps=1e-5, tie_embeddings=False,
    )  # fmt: skip


# The thorough profile's near-ties that the error of q and k closes (logits over the bfloat16 bound
# before the near-tie neighbour had the |q| |k| / d_head term and ran on unnudged weights).
Q_K_NEAR_TIES = [
    pytest.param(Case(_llama(149, 3, 102, 3, 288), 1757, 3.0, (33, 0, 141)), id="1.50x"),
    pytest.param(Case(_llama(580, 2, 128, 2, 352), 65536, 3.0, (0, 2)), id="2.86x"),
]


@pytest.mark.parametrize("case", Q_K_NEAR_TIES)
def test_transformers_in_bfloat16_agrees_at_a_near_tie_the_error_of_q_and_k_closes(case: Case) -> None:
    """The oracle's scores -255.0 and -259.6 (probabilities 0.99, 0.01) are -255 and -256 in
    transformers' bfloat16 (0.73, 0.27): the gap of 4.6 closed by the error q and k carry (the
    scores' own rounding moves them by 2 at most), while the nudged oracles widened it."""
    pytest.importorskip("transformers", reason="needs the transformers extra")
    with checks.recording("test"):
        model = _built("transformers-bfloat16", PRECISION_MODELS["transformers-bfloat16"], case)
        assert model is not None and _agree(model, case) <= 1


@pytest.mark.parametrize("name", ["transformers-bfloat16", "transformers-float16"])
def test_transformers_gelu_tail_in_a_narrow_format_is_within_the_trace_s_bound(name: str) -> None:
    """The thorough profile's case: with d_ff 1, layer 1's one GELU input is -3.69; transformers'
    tanh GELU gives exactly 0 in bfloat16 and float16 (the oracle -2.88e-4): 1.1x and 9.4x the
    bound before GPT-2's GELU floor followed its input."""
    pytest.importorskip("transformers", reason="needs the transformers extra")
    config = ModelConfig(
        "gpt2", vocab_size=254, n_ctx=1, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=1, norm_eps=1e-5,
        tie_embeddings=False,
    )  # fmt: skip
    case = Case(config, 1, 0.3, (1,))
    with checks.recording("test"):
        model = _built(name, PRECISION_MODELS[name], case)
        assert model is not None
        tokens = case.token_array()
        assert model.trace(tokens)["layers.1.mlp_act"].item() == 0
        checks.trace_agrees(oracles.oracle(case).localize(model.trace(tokens), tokens), what="trace", model=model)


def test_a_greedy_case_can_leave_float16_s_range_only_at_its_picks() -> None:
    """The prompt (0,) is in float16's range but the oracle's first pick, 3, takes the scores to 1.4e5
    before scaling (transformers in float16 gives NaN there): the greedy property checks the range
    on the prompt and the oracle's picks (`Oracle.continued`), not on the prompt alone."""
    config = ModelConfig(
        "gpt2", vocab_size=6, n_ctx=3, d_model=110, n_layers=1, n_heads=1, n_kv_heads=1, d_ff=440, norm_eps=1e-5,
        tie_embeddings=True,
    )  # fmt: skip
    o = oracles.Oracle(config, init_weights(config, seed=60912, scale=3.0), FLOAT16)
    continued = o.continued(np.array([0]), 1)
    assert continued.tolist() == [0, 3]
    assert FLOAT16.out_of_range(o.trace(np.array([0])), config.d_head) is None
    assert "scores reaches 1.41e+05" in str(FLOAT16.out_of_range(o.trace(continued), config.d_head))
