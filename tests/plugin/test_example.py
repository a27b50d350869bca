"""The example third-party GPT-2s: examples/torch_gpt2.py, a factory of at most 30 lines that meets the
contract and agrees with the oracle through every capability it has, and examples/numpy_gpt2.py,
which needs no torch and agrees with the oracle through `logits`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import needs
from verifier.model import stages
from verifier.model.weights import init_weights
from verifier.plugin.contract import build_checked
from verifier.plugin.registry import load_spec
from verifier.properties.oracle import Oracle
from verifier.properties.strategies import configs

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
    oracle = Oracle(config, weights)  # the suite's tolerance policy, neighbours included
    B = data.draw(st.integers(1, 3), label="B")
    T = data.draw(st.integers(1, config.n_ctx), label="T")
    tokens = np.random.default_rng(T).integers(0, config.vocab_size, (B, T))
    expected = oracle.logits(tokens)
    assert expected.compare(model.logits(tokens)).ok

    pad = data.draw(st.integers(0, T - 1), label="left padding of row 0")
    mask = np.ones_like(tokens)
    mask[0, :pad] = 0
    real = mask.astype(bool)
    assert oracle.logits(tokens, mask)[real].compare(model.logits(tokens, mask)[real]).ok

    cut = data.draw(st.integers(0, T - 1), label="prefix length")
    first, cache = model.decode(tokens[:, :cut]) if cut else (np.zeros((B, 0, config.vocab_size)), None)
    rest, _ = model.decode(tokens[:, cut:], cache)
    assert expected.compare(np.concatenate([first, rest], axis=1)).ok

    trace = model.trace(tokens[0])
    assert list(trace) == list(stages.stage_shapes(config, T))
    divergence = oracle.localize(trace, tokens[0])
    assert divergence.first is None and not divergence.untraced, divergence.describe()


@settings(max_examples=5, deadline=None)
@given(config=configs(("gpt2",), max_n_ctx=32, max_layers=2), scale=st.sampled_from([0.02, 0.5]), data=st.data())
def test_the_numpy_example_agrees_with_the_oracle(config, scale: float, data: st.DataObject) -> None:
    weights = init_weights(config, seed=1, scale=scale)
    model = build_checked(load_spec("examples.numpy_gpt2:build"), config, weights)
    assert model.capabilities == {"logits"}
    oracle = Oracle(config, weights)
    B = data.draw(st.integers(1, 2), label="B")
    T = data.draw(st.integers(1, config.n_ctx), label="T")
    tokens = np.random.default_rng(T).integers(0, config.vocab_size, (B, T))
    assert oracle.logits(tokens).compare(model.logits(tokens)).ok
    assert oracle.logits(tokens[0]).compare(model.logits(tokens[0])).ok
