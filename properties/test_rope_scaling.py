"""RoPE scaling (Llama 3.1's "llama3", and "linear"): it changes the rotation of every position
but shows most past the original context the model was trained at, which short prompts never
reach. Sequences here pass `original_n_ctx`, and the positions past it are reached both in one
full pass and after a cache of the original context's length (a position offset): both agree with
the oracle."""

from __future__ import annotations

from hypothesis import given

from verifier.analysis.divergence import chunk_list
from verifier.model.config import RopeScaling
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, rope_scaled_cases
from verifier.properties.models import requires
from verifier.properties.oracle import oracle
from verifier.properties.pinned_cases import pinned, small_case
from verifier.properties.strategies import SCALING_FAMILIES

_LLAMA31 = RopeScaling("llama3", 8.0, 1.0, 4.0, 32)  # Llama 3.1's factors, an original context of 32
SCALED = (
    small_case("llama", 48, rope_theta=500000.0, rope_scaling=_LLAMA31, head_dim=16),
    small_case("qwen3", 40, qk_norm=True, rope_scaling=RopeScaling("linear", 4.0)),
)
DRAWN = "configs with RoPE scaling of their own"


def _cached(case: Case) -> int:
    """The cache's length: the original context (for llama3), or half the sequence."""
    scaling = case.config.rope_scaling
    return scaling.original_n_ctx if scaling.kind == "llama3" and scaling.original_n_ctx < case.T else case.T // 2


@requires("decode", family=SCALING_FAMILIES, switch="rope_scaling", drawn=DRAWN)
@pinned(*SCALED)
@given(case=rope_scaled_cases(min_T=8, max_n_ctx=96))
def test_logits_past_the_original_context_agree_with_the_oracle(model_spec: ModelSpec, case: Case) -> None:
    """With RoPE scaling, logits past the original context length agree with the oracle."""
    model = models.build(model_spec, case, "decode")
    tokens = case.token_array()
    o = oracle(case)
    expected = o.logits(tokens)
    scaling = case.config.rope_scaling
    checks.agree(
        model.logits(tokens), expected, model=model, localize=checks.localizer(model, o, tokens),
        what=f"logits of {case.T} tokens with RoPE scaling {scaling.kind} x{scaling.factor:g} "
        f"(original context {scaling.original_n_ctx})",
    )  # fmt: skip
    cached = _cached(case)
    chunks = (cached, case.T - cached)
    _, cache = model.decode(tokens[:cached])
    found, _ = model.decode(tokens[cached:], cache)
    positions = [p for _, p in checks.decode_positions(model, chunks[1:], cached=cached)]
    checks.agree(
        found, expected[positions], model=model,
        what=f"logits at positions {cached}..{case.T - 1} decoded after a cache of {cached} (chunks "
        f"{chunk_list(chunks)}), RoPE scaling {scaling.kind} x{scaling.factor:g}",
        localize=checks.decode_localizer(model, o, tokens, chunks[1:], found, expected[positions], cached=cached),
    )  # fmt: skip
