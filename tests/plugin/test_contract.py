"""The model contract: every rule, shown to catch a deliberately broken factory by name, and to
let the correct models (the reference, transformers, the example) through for any valid input."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests import needs
from tests.plugin import broken
from verifier.formats.llama2c import to_interleaved
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights
from verifier.plugin import isolation
from verifier.plugin.adapters import hf_transformers, reference
from verifier.plugin.contract import RULES, CheckedModel, ContractViolation, MissingCapability, build_checked
from verifier.plugin.interface import Unsupported
from verifier.plugin.probes import PROBE_CONFIGS, PROBE_KINDS, probe
from verifier.plugin.registry import ModelSpec
from verifier.properties.oracle import Oracle

GPT2 = PROBE_CONFIGS["gpt2"]
TOKENS = np.array([3, 1, 4, 1, 5])


@pytest.fixture
def call_timeout() -> Iterator[Callable[[float], None]]:
    """Sets how long a call into a model may take, for one test; then the default again."""
    yield isolation.set_call_timeout
    isolation.set_call_timeout(isolation.DEFAULT_TIMEOUT_S)


def checked(factory: Callable[..., Any], config: ModelConfig = GPT2) -> CheckedModel:
    return build_checked(ModelSpec(factory.__name__, factory, "test"), config, init_weights(config, seed=0))


def assert_violation(excinfo: pytest.ExceptionInfo[ContractViolation], rule: str, call: str) -> None:
    """The message names the model, the rule (by name and text) and the call that broke it."""
    message = str(excinfo.value)
    assert excinfo.value.rule == rule, message
    assert f"rule {rule!r} ({RULES[rule]})" in message, message
    assert call in message, f"the call {call!r} is not named in: {message}"


def _interleaved(x: np.ndarray) -> np.ndarray:
    """A stage [..., d_head] from rotate-half order to Meta's interleaved one: row 2i is rotate-half i,
    row 2i + 1 is i + d_head/2 (written here apart from verifier.model.stages)."""
    half = x.shape[-1] // 2
    found = np.empty_like(x)
    found[..., 0::2], found[..., 1::2] = x[..., :half], x[..., half:]
    return found


class _InterleavedTrace:
    """The reference, with q and k (before and after RoPE) traced in the interleaved order, as Meta's
    code holds them; declaring `rope_layout` if given; `wrong` adds a bug to its q (traced and used)."""

    def __init__(self, config: ModelConfig, weights: dict, rope_layout: str | None = None, wrong: bool = False) -> None:
        self.ref = reference.build(config, weights)
        self.wrong = wrong
        if rope_layout is not None:
            self.rope_layout = rope_layout

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        return self.ref.logits(tokens)

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        found = self.ref.trace(tokens)
        if self.wrong:
            found["layers.0.q"] = found["layers.0.q"] * 1.01
        per_head = ("q", "k", "q_rope", "k_rope")
        return {s: _interleaved(a) if s.endswith(per_head) and "layers." in s else a for s, a in found.items()}


def declares_an_unknown_rope_layout(config: ModelConfig, weights: dict) -> _InterleavedTrace:
    return _InterleavedTrace(config, weights, "meta")


def declares_logits_up_to_a_constant_as_text(config: ModelConfig, weights: dict) -> Any:
    model = reference.build(config, weights)
    model.logits_up_to_a_constant = "yes"  # type: ignore[attr-defined]
    return model


# Each case: the broken factory, what the test calls, the rule it must break, the call named.
CASES = {
    "factory raises": (broken.factory_raises, None, "factory", "factory(config=gpt2 d_model=8 n_layers=1, weights)"),
    "no model": (broken.returns_none, None, "has-logits", "factory(config=gpt2"),
    "logits raise": (broken.logits_raise, lambda m: m.logits(TOKENS), "no-exception", "logits(tokens int64 [5])"),
    "wrong shape": (broken.wrong_shape, lambda m: m.logits(TOKENS), "shape", "logits(tokens int64 [5])"),
    "int logits": (broken.int_logits, lambda m: m.logits(TOKENS), "dtype", "logits(tokens int64 [5])"),
    "a list": (broken.list_logits, lambda m: m.logits(TOKENS), "dtype", "logits(tokens int64 [5])"),
    "a grad tensor": (broken.grad_tensor, lambda m: m.logits(TOKENS), "dtype", "logits(tokens int64 [5])"),
    "NaN": (broken.nan_logits, lambda m: m.logits(TOKENS), "finite", "logits(tokens int64 [5])"),
    "decode not a pair": (
        broken.decode_not_pair,
        lambda m: m.decode(TOKENS),
        "decode-returns-pair",
        "decode(tokens int64 [5], cache=None)",
    ),
    "trace a list": (broken.trace_not_dict, lambda m: m.trace(TOKENS), "trace-returns-dict", "trace(tokens int64 [5])"),
    "trace own names": (broken.trace_own_names, lambda m: m.trace(TOKENS), "trace-stages", "trace(tokens int64 [5])"),
    "greedy out of range": (
        broken.greedy_out_of_range,
        lambda m: m.greedy(TOKENS, 3),
        "greedy-tokens",
        "greedy(prompt int64 [5], n_new=3)",
    ),
    "unknown capability": (broken.declares_unknown, None, "capabilities", "capabilities = ['beam_search', 'logits']"),
    "declared, no method": (
        broken.declares_missing_method,
        None,
        "capabilities",
        "capabilities = ['decode', 'logits']",
    ),
    "mask, no parameter": (
        broken.declares_mask_without_parameter,
        None,
        "capabilities",
        "capabilities = ['attention_mask', 'logits']",
    ),
    "unknown precision": (broken.declares_unknown_precision, None, "precision", "precision = 'int3'"),
    "edits its tokens": (broken.edits_its_tokens, lambda m: m.logits(TOKENS), "inputs-unchanged", "logits(tokens"),
    "exits in logits": (broken.exits_in_logits, lambda m: m.logits(TOKENS), "keeps-the-process", "logits(tokens"),
    "factory exits": (broken.factory_exits, None, "keeps-the-process", "factory(config=gpt2"),
    "hangs in logits": (broken.hangs_in_logits, lambda m: m.logits(TOKENS), "returns-in-time", "logits(tokens"),
    "factory hangs": (broken.factory_hangs, None, "returns-in-time", "factory(config=gpt2"),
    "unknown rope layout": (declares_an_unknown_rope_layout, None, "rope-layout", "rope_layout = 'meta'"),
    "not a bool up to a constant": (
        declares_logits_up_to_a_constant_as_text,
        None,
        "logits-up-to-a-constant",
        "logits_up_to_a_constant = 'yes'",
    ),
}


NEEDS_TORCH = {"a grad tensor"}


@pytest.mark.parametrize(
    ("factory", "call", "rule", "named"),
    [pytest.param(*case, id=name, marks=needs.torch if name in NEEDS_TORCH else ()) for name, case in CASES.items()],
)
def test_a_broken_factory_fails_with_the_rule_and_the_call(
    factory, call, rule: str, named: str, call_timeout: Callable[[float], None]
) -> None:
    if rule == "returns-in-time":
        call_timeout(0.5)  # the hanging models would never return: half a second each, not the default ten minutes
    with pytest.raises(ContractViolation) as excinfo:
        model = checked(factory)
        call(model)
    assert_violation(excinfo, rule, named)
    assert f"model {factory.__name__!r}" in str(excinfo.value)


# Rules that take more than one call are checked by properties; test_selection.py runs them.
RULES_OF_PROPERTIES = {"deterministic", "cache-reusable"}


def test_every_rule_is_proved_by_a_broken_factory() -> None:
    assert {rule for _, _, rule, _ in CASES.values()} == set(RULES) - RULES_OF_PROPERTIES


class _NaNWherePadded:
    """A masked model whose padded positions' logits are NaN (transformers in float16 gives such
    rows): undefined there, so no breach; a NaN at a real position still is one."""

    def __init__(self, config: ModelConfig, weights: dict, *, at_real: bool = False) -> None:
        self.ref, self.at_real = reference.build(config, weights), at_real

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        out = self.ref.logits(tokens, attention_mask).copy()
        if attention_mask is not None:
            out[np.asarray(attention_mask, dtype=bool) == self.at_real] = np.nan
        return out


def test_the_finite_rule_holds_at_real_positions_only() -> None:
    tokens, mask = np.array([TOKENS, TOKENS]), np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    logits = checked(_NaNWherePadded).logits(tokens, mask)
    assert np.isnan(logits[0, :2]).all() and np.isfinite(logits[mask.astype(bool)]).all()
    with pytest.raises(ContractViolation) as excinfo:
        checked(lambda c, w: _NaNWherePadded(c, w, at_real=True)).logits(tokens, mask)
    assert_violation(excinfo, "finite", "logits(tokens int64 [2, 5], attention_mask int64 [2, 5])")
    assert "first non-finite entry at [0, 2, 0]" in str(excinfo.value)


def test_an_exception_inside_the_model_is_kept_as_the_cause() -> None:
    with pytest.raises(ContractViolation) as excinfo:
        checked(broken.logits_raise).logits(TOKENS)
    assert isinstance(excinfo.value.__cause__, IndexError)
    assert "raised IndexError: index 7 is out of bounds" in str(excinfo.value)


@settings(max_examples=10)
@given(batch=st.one_of(st.none(), st.integers(1, 3)), T=st.integers(1, GPT2.n_ctx))
@example(batch=None, T=1).via("one token")
@example(batch=2, T=GPT2.n_ctx).via("a full batch")
def test_a_wrong_shape_is_caught_for_every_input_shape(batch: int | None, T: int) -> None:
    tokens = np.zeros((T,) if batch is None else (batch, T), dtype=np.int64)
    with pytest.raises(ContractViolation) as excinfo:
        checked(broken.wrong_shape).logits(tokens)
    expected = [*tokens.shape, GPT2.vocab_size]
    assert f"returned shape {[*tokens.shape, GPT2.vocab_size - 1]}, expected {expected}" in str(excinfo.value)


CORRECT = {"numpy": reference.build, "transformers": hf_transformers.build}


@pytest.mark.parametrize("kind", PROBE_CONFIGS)
@pytest.mark.parametrize("name", ["numpy", pytest.param("transformers", marks=needs.transformers)])
def test_correct_models_meet_every_rule(name: str, kind: str) -> None:
    config = PROBE_CONFIGS[kind]
    model = checked(CORRECT[name], config)
    assert model.capabilities == {"logits", "decode", "trace", "attention_mask"}
    tokens = np.arange(2 * 6).reshape(2, 6) % config.vocab_size
    assert model.logits(tokens).shape == model.logits(tokens, np.ones_like(tokens)).shape == (2, 6, config.vocab_size)
    logits, cache = model.decode(tokens[:, :4])
    assert logits.shape == (2, 4, config.vocab_size) and model.decode(tokens[:, 4:], cache)[0].shape == (
        2,
        2,
        config.vocab_size,
    )
    assert set(model.trace(tokens[0])) == set(reference.build(config, init_weights(config)).trace(tokens[0]))


def test_a_missing_capability_gives_a_skip_reason_and_guards_the_call() -> None:
    model = checked(broken.greedy_out_of_range)
    assert model.lacks("greedy") is None
    assert model.lacks("decode") == (
        "model 'greedy_out_of_range' has no 'decode' capability "
        "(decode(tokens, cache=None) -> (logits, cache), a KV-cached chunk)"
    )
    with pytest.raises(MissingCapability, match=r"must check CheckedModel.lacks\('logits'\) first"):
        model.logits(TOKENS)


def test_the_factory_gets_a_copy_of_the_weights() -> None:
    weights = init_weights(GPT2)
    before = {name: w.copy() for name, w in weights.items()}

    def vandal(config: ModelConfig, w: dict[str, np.ndarray]) -> Any:
        for array in w.values():
            array[...] = 0
        return reference.build(config, w)

    build_checked(ModelSpec("vandal", vandal, "test"), GPT2, weights)
    assert all(np.array_equal(weights[name], before[name]) for name in weights)


@needs.torch
def test_probe_reports_capabilities_unsupported_kinds_and_broken_factories() -> None:
    from examples import torch_gpt2

    probes = {p.kind: p.summary() for p in probe(ModelSpec("example", torch_gpt2.build, "test"))}
    assert probes == {
        "gpt2": "logits, decode, trace, attention_mask",
        **{
            kind: f"unsupported (this example implements GPT-2 only, not {PROBE_KINDS[kind][0]!r})"
            for kind in PROBE_KINDS
            if kind != "gpt2"
        },
    }
    assert list(probes) == list(PROBE_KINDS)  # every kind, in order
    broken_probe = probe(ModelSpec("raises", broken.factory_raises, "test"))[0].summary()
    assert broken_probe.startswith("broken (model 'raises' broke the contract rule 'factory'")


# A Llama whose heads have 8 dimensions (the interleaved order is no involution there, as with 4) and two kv heads.
LLAMA = ModelConfig(family="llama", vocab_size=32, n_ctx=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24,
                    norm_eps=1e-5, tie_embeddings=False)  # fmt: skip


def test_the_interleaved_order_is_the_one_of_transformers_conversion() -> None:
    """q of rows in Meta's order (llama2.c's file, `to_interleaved` of transformers' rows) per head, put
    in rotate-half order, is q of transformers' rows."""
    weights = init_weights(LLAMA, seed=2)
    w_q, x = weights["model.layers.0.self_attn.q_proj.weight"], np.random.default_rng(0).normal(size=(5, 32))
    per_head = (x @ to_interleaved(w_q, LLAMA.n_heads).T).reshape(5, LLAMA.n_heads, 8).transpose(1, 0, 2)
    expected = (x @ w_q.T).reshape(5, LLAMA.n_heads, 8).transpose(1, 0, 2)
    np.testing.assert_array_equal(stages.to_rotate_half(per_head, stages.INTERLEAVED), expected)
    np.testing.assert_array_equal(_interleaved(expected), per_head)
    np.testing.assert_array_equal(stages.from_rotate_half(expected, stages.INTERLEAVED), per_head)


def _traced(factory: Callable[..., Any], config: ModelConfig = LLAMA) -> tuple[CheckedModel, dict[str, np.ndarray]]:
    model = checked(factory, config)
    return model, model.trace(TOKENS)


@pytest.mark.parametrize("on", ["model", "factory"])
def test_a_declared_interleaved_trace_is_read_in_rotate_half_order(on: str) -> None:
    def build(config: ModelConfig, weights: dict) -> _InterleavedTrace:
        return _InterleavedTrace(config, weights, "interleaved" if on == "model" else None)

    if on == "factory":
        build.rope_layout = "interleaved"  # type: ignore[attr-defined]
    model, trace = _traced(build)
    assert model.rope_layout == "interleaved"
    expected = reference.build(LLAMA, init_weights(LLAMA, seed=0)).trace(TOKENS)
    assert set(trace) == set(expected) and all(np.array_equal(trace[s], expected[s]) for s in trace)
    divergence = Oracle(LLAMA, init_weights(LLAMA, seed=0)).localize(trace, TOKENS, rope_layout=model.rope_layout)
    assert divergence.first is None, divergence.describe()


def test_a_rope_layout_leaves_a_gpt2_trace_as_it_is() -> None:
    """GPT-2 has no RoPE: a factory of both families may declare the layout of its Llama's trace."""
    model = checked(lambda c, w: _WithLayout(reference.build(c, w)), GPT2)
    assert model.rope_layout == "interleaved"
    expected = reference.build(GPT2, init_weights(GPT2, seed=0)).trace(TOKENS)
    assert all(np.array_equal(a, expected[s]) for s, a in model.trace(TOKENS).items())


class _WithLayout:
    rope_layout = "interleaved"

    def __init__(self, ref: Any) -> None:
        self.logits, self.trace = ref.logits, ref.trace


def _localized(factory: Callable[..., Any]) -> str:
    model, trace = _traced(factory)
    divergence = Oracle(LLAMA, init_weights(LLAMA, seed=0)).localize(trace, TOKENS, rope_layout=model.rope_layout)
    assert divergence.first is not None and divergence.first.stage == "layers.0.q", divergence.describe()
    return divergence.describe()


def test_an_undeclared_interleaved_trace_is_told_what_to_declare() -> None:
    message = _localized(_InterleavedTrace)
    assert message.startswith("layer 0 q: read in the interleaved order (pairs (2i, 2i + 1) of each head) it "
                              "matches the oracle's (max |diff| "), message  # fmt: skip
    assert "in the rotate-half order it is read in, it does not" in message, message
    assert message.split("; before it")[0].endswith("declare rope_layout = 'interleaved' on the model or its factory")


def test_a_rotate_half_trace_declared_interleaved_is_told_what_to_declare() -> None:
    message = _localized(lambda c, w: _WithLayout(reference.build(c, w)))
    assert "read in the rotate-half order (pairs (i, i + d_head/2) of each head) it matches" in message, message
    assert "declare rope_layout = 'rotate_half'" in message, message


@pytest.mark.parametrize("rope_layout", [None, "interleaved"])
def test_a_wrong_q_in_either_order_gets_no_layout_hint(rope_layout: str | None) -> None:
    message = _localized(lambda c, w: _InterleavedTrace(c, w, rope_layout, wrong=True))
    assert "rope_layout" not in message and message.startswith("layer 0 q: max |diff| "), message


def test_no_mutant_of_the_catalog_is_told_to_declare_a_rope_layout() -> None:
    """The hint is for a correct trace in another order only: every catalog mutant that a Llama trace
    shows wrong is localized without it."""
    from tests.meta.mutants import catalog

    weights = init_weights(LLAMA, seed=0)
    oracle, shown = Oracle(LLAMA, weights), 0
    for name, factory in vars(catalog.mutants).items():
        try:
            model, trace = _traced(factory)
        except Unsupported:
            continue
        divergence = oracle.localize(trace, TOKENS, rope_layout=model.rope_layout)
        shown += divergence.first is not None
        assert "rope_layout" not in divergence.describe(), (name, divergence.describe())
    assert shown >= 20, shown


class _ArrayCache:
    """Decodes with a cache that is one array of the logits so far, and notes the cache object it is given."""

    def __init__(self, config: ModelConfig, weights: dict) -> None:
        self.ref = reference.build(config, weights)
        self.given: list[object] = []

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        return self.ref.logits(tokens)

    def decode(self, tokens: np.ndarray, cache: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        self.given.append(cache)
        seen = tokens if cache is None else np.concatenate([cache, tokens])
        return self.ref.logits(seen)[-len(tokens) :], seen


def test_a_cache_is_handed_back_as_the_model_returned_it_and_only_the_tokens_are_copied() -> None:
    model = checked(_ArrayCache)
    tokens = TOKENS.copy()
    _, cache = model.decode(tokens[:3])
    model.decode(tokens[3:], cache)
    given = model.model.given
    assert given[0] is None and given[1] is cache  # the model's own object: a KV cache may be gigabytes
