"""The example third-party GPT-2s: examples/torch_gpt2.py, a factory of at most 30 lines that meets the
contract and agrees with the oracle through every capability it has, and examples/numpy_gpt2.py,
which needs no torch and agrees with the oracle through `logits`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import needs
from verifier.analysis import tolerance
from verifier.model import stages
from verifier.model.weights import init_weights
from verifier.plugin.contract import build_checked
from verifier.plugin.registry import load_spec
from verifier.properties.strategies import configs
from verifier.reference import NumpyModel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_plug_in_code_is_at_most_30_lines() -> None:
    source = (EXAMPLES / "torch_gpt2.py").read_text()
    plug_in = source[source.index("# The plug-in:") :]
    assert len(plug_in.strip().splitlines()) <= 30, plug_in


@needs.torch
@settings(max_examples=5, deadline=None)
@given(config=configs(("gpt2",), max_n_ctx=64, max_layers=3), scale=st.sampled_from([0.02, 0.5]), data=st.data())
def test_the_example_agrees_with_the_oracle_in_every_capability(config, scale: float, data: st.DataObject) -> None:
    weights = init_weights(config, seed=1, scale=scale)
    model = build_checked(load_spec("examples.torch_gpt2:build"), config, weights)
    oracle = NumpyModel(config, weights, np.float64)
    B = data.draw(st.integers(1, 3), label="B")
    T = data.draw(st.integers(1, config.n_ctx), label="T")
    tokens = np.random.default_rng(T).integers(0, config.vocab_size, (B, T))
    expected = oracle.logits(tokens)
    assert tolerance.error_ratio(model.logits(tokens), expected) <= 1

    pad = data.draw(st.integers(0, T - 1), label="left padding of row 0")
    mask = np.ones_like(tokens)
    mask[0, :pad] = 0
    real = mask.astype(bool)
    assert tolerance.error_ratio(model.logits(tokens, mask)[real], oracle.logits(tokens, mask)[real]) <= 1

    cut = data.draw(st.integers(0, T - 1), label="prefix length")
    first, cache = model.decode(tokens[:, :cut]) if cut else (np.zeros((B, 0, config.vocab_size)), None)
    rest, _ = model.decode(tokens[:, cut:], cache)
    assert tolerance.error_ratio(np.concatenate([first, rest], axis=1), expected) <= 1

    trace = model.trace(tokens[0])
    assert list(trace) == list(stages.stage_shapes(config, T))
    below = np.tril(np.ones((T, T), dtype=bool))
    for stage, e in oracle.trace(tokens[0]).items():
        a = trace[stage]
        a, e = (a[:, below], e[:, below]) if stages.split_stage(stage)[1] in stages.CAUSAL_OPS else (a, e)
        assert tolerance.error_ratio(a, e) <= 1, stage


@settings(max_examples=5, deadline=None)
@given(config=configs(("gpt2",), max_n_ctx=32, max_layers=2), scale=st.sampled_from([0.02, 0.5]), data=st.data())
def test_the_numpy_example_agrees_with_the_oracle(config, scale: float, data: st.DataObject) -> None:
    weights = init_weights(config, seed=1, scale=scale)
    model = build_checked(load_spec("examples.numpy_gpt2:build"), config, weights)
    assert model.capabilities == {"logits"}
    B = data.draw(st.integers(1, 2), label="B")
    T = data.draw(st.integers(1, config.n_ctx), label="T")
    tokens = np.random.default_rng(T).integers(0, config.vocab_size, (B, T))
    expected = NumpyModel(config, weights, np.float64).logits(tokens)
    assert tolerance.error_ratio(model.logits(tokens), expected) <= 1
    assert tolerance.error_ratio(model.logits(tokens[0]), expected[0]) <= 1
