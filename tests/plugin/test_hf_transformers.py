"""The built-in transformers adapter against the transformers installed: its KV cache is used (a
chunk decoded after a cached prefix equals the full pass), it calls no deprecated argument, and a
transformers too old for its `cache` argument counts as the extra missing. `.ci/transformers-range`
runs this file at the lowest and the newest transformers the `transformers` extra allows."""

from __future__ import annotations

import logging
import re
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests import needs
from tests.plugin.project import ROOT
from verifier import extra
from verifier.analysis import tolerance
from verifier.extra import ExtraMissing
from verifier.formats.hf import model_class
from verifier.model.weights import init_weights
from verifier.plugin.adapters import hf_transformers
from verifier.plugin.contract import build_checked
from verifier.plugin.probes import PROBE_CONFIGS
from verifier.plugin.registry import ModelSpec
from verifier.properties.oracle import Oracle


@needs.transformers
@pytest.mark.parametrize("kind", PROBE_CONFIGS)
def test_a_chunk_after_a_cached_prefix_equals_the_full_pass(kind: str) -> None:
    config = PROBE_CONFIGS[kind]
    model = hf_transformers.build(config, init_weights(config, seed=1))
    tokens = np.arange(2 * 7).reshape(2, 7) % config.vocab_size
    full = model.logits(tokens)
    first, cache = model.decode(tokens[:, :4])
    second, _ = model.decode(tokens[:, 4:], cache)
    again, _ = model.decode(tokens[:, 4:], cache)  # the cache stays reusable
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), full, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(again, second)


@needs.transformers
@pytest.mark.parametrize("kind", ["mistral", "gemma2"])
def test_decoding_token_by_token_past_the_window_equals_the_full_pass(kind: str) -> None:
    """transformers keeps the last W - 1 keys of a sliding layer (DynamicSlidingWindowLayer): decoding one
    token at a time to the end of the context, far past the window, is the full pass."""
    config = PROBE_CONFIGS[kind]
    weights = init_weights(config, seed=3, scale=1.0)
    model = hf_transformers.build(config, weights)
    tokens = np.random.default_rng(3).integers(0, config.vocab_size, (2, config.n_ctx))
    full = model.logits(tokens)
    # The window matters at these weights: without it, the positions past it differ.
    windowless = hf_transformers.build(config.replace(sliding_window=None, layer_types=()), weights)
    W = config.sliding_window
    assert W is not None and np.abs(windowless.logits(tokens)[:, W:] - full[:, W:]).max() > 1e-2
    cache, steps = None, []
    for t in range(config.n_ctx):
        logits, cache = model.decode(tokens[:, t : t + 1], cache)
        steps.append(logits)
    assert "SlidingWindow" in type(cache.layers[0]).__name__
    ratio = tolerance.error_ratio(np.concatenate(steps, axis=1), full)
    assert ratio <= 1, ratio


@needs.transformers
@pytest.mark.parametrize("kind", PROBE_CONFIGS)
@pytest.mark.parametrize("factory", ["build_bfloat16", "build_float16"])
def test_every_family_runs_in_the_narrower_classes(kind: str, factory: str) -> None:
    config = PROBE_CONFIGS[kind]
    model = getattr(hf_transformers, factory)(config, init_weights(config, seed=4))
    tokens = np.arange(2 * 9).reshape(2, 9) % config.vocab_size
    logits = model.logits(tokens)
    assert model.precision == factory.removeprefix("build_") and logits.dtype == np.float32
    assert logits.shape == (2, 9, config.vocab_size) and np.isfinite(logits).all()
    first, cache = model.decode(tokens[:, :5])
    assert np.array_equal(np.concatenate([first, model.decode(tokens[:, 5:], cache)[0]], axis=1).shape, logits.shape)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@needs.transformers
@pytest.mark.parametrize("kind", PROBE_CONFIGS)
def test_no_call_of_the_adapter_uses_a_deprecated_argument(kind: str) -> None:
    from transformers.utils import logging as hf_logging

    config = PROBE_CONFIGS[kind]
    model = hf_transformers.build(config, init_weights(config, seed=2))
    tokens = np.array([[3, 1, 4, 1], [5, 9, 2, 6]]) % config.vocab_size
    # transformers says some deprecations once per process through its logger, not `warnings`.
    hf_logging.warning_once.cache_clear()  # type: ignore[attr-defined]
    records = _Records()
    logging.getLogger("transformers").addHandler(records)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            warnings.simplefilter("error", FutureWarning)
            model.logits(tokens)
            model.logits(tokens, attention_mask=np.array([[0, 1, 1, 1], [1, 1, 1, 1]]))
            _, cache = model.decode(tokens[:, :2])
            model.decode(tokens[:, 2:], cache)
            model.trace(tokens[0])
    finally:
        logging.getLogger("transformers").removeHandler(records)
    assert not [m for m in records.messages if "deprecated" in m], records.messages


def test_the_minimum_is_the_extras_lower_bound() -> None:
    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    bound = next(re.search(r">=([\d.]+)", r) for r in requirements["transformers"] if r.startswith("transformers"))
    assert bound is not None and tuple(map(int, bound[1].split("."))) == extra.MINIMUM["transformers"]


def test_a_transformers_older_than_the_cache_argument_counts_as_the_extra_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # transformers 5.23's models take `past_key_values`; an unknown `cache=` vanishes into their **kwargs.
    monkeypatch.setattr(extra, "installed", lambda module: True)
    monkeypatch.setattr(extra, "release", lambda module: {"torch": (2, 13, 0), "transformers": (5, 23, 0)}[module])
    reason = "this model needs transformers >= 5.24 (5.23.0 is installed here): pip install 'lm-verifier[transformers]'"
    assert extra.missing("this model") == reason
    config = PROBE_CONFIGS["gpt2"]
    with pytest.raises(ExtraMissing, match=re.escape(reason.replace("this model", "the built-in transformers model"))):
        hf_transformers.build(config, init_weights(config))
    monkeypatch.setattr(extra, "release", lambda module: {"torch": (2, 13, 0), "transformers": (5, 24, 0)}[module])
    assert extra.missing("this model") is None


def test_release_numbers_are_read_from_the_installed_distribution() -> None:
    assert extra.release("no-such-distribution-xyz") is None
    found = extra.release("pytest")
    assert found is not None and len(found) >= 2 and found >= (7,)


def test_each_distribution_s_metadata_is_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each build of the built-in model asks `missing`; reading the metadata every time cost 18 s of a
    # 64 s profiled `verifier check --model transformers`.
    reads: list[str] = []
    monkeypatch.setattr(extra.metadata, "version", lambda name: reads.append(name) or "5.24.0")
    extra.release.cache_clear()
    try:
        assert [extra.release("transformers") for _ in range(3)] == [(5, 24, 0)] * 3
        assert reads == ["transformers"]
    finally:
        extra.release.cache_clear()  # the next caller reads the real metadata


FACTORIES = {"float32": "build", "bfloat16": "build_bfloat16", "float16": "build_float16"}


@needs.transformers
@pytest.mark.parametrize("kind", PROBE_CONFIGS)
@pytest.mark.parametrize("precision", FACTORIES)
def test_every_family_agrees_with_the_oracle_in_its_class(precision: str, kind: str) -> None:
    """The reference (float64) at the class the model declares judges it: the whole context (past any
    window and any original context of RoPE scaling), decoded in chunks after a cache, and left-padded."""
    config = PROBE_CONFIGS[kind]
    weights = init_weights(config, seed=6, scale=0.3)
    factory = getattr(hf_transformers, FACTORIES[precision])
    model = build_checked(ModelSpec(f"transformers-{precision}", factory, "test"), config, weights)
    assert model.precision.name == precision
    oracle = Oracle(config, weights, model.precision)
    tokens = np.random.default_rng(6).integers(0, config.vocab_size, (2, config.n_ctx))
    expected = oracle.logits(tokens)
    whole = expected.compare(model.logits(tokens))
    first, cache = model.decode(tokens[:, :5])
    chunked = expected.compare(np.concatenate([first, model.decode(tokens[:, 5:], cache)[0]], axis=1))
    assert whole.ok and chunked.ok, (whole, chunked)
    if model.lacks("attention_mask") is None:  # row 0 left-padded: its real tokens at positions 0..T-4
        mask = np.ones_like(tokens)
        mask[0, :3] = 0
        padded = model.logits(tokens, attention_mask=mask)
        rows = oracle.logits(tokens[0, 3:]).compare(padded[0, 3:]), oracle.logits(tokens[1]).compare(padded[1])
        assert all(c.ok for c in rows), rows


# Configs whose stored weights transformers 5 converts on load: routed experts (Mixtral's w1/w3/w2
# under block_sparse_moe; Qwen2-MoE's with a shared expert and a dense layer, and without a shared
# expert), and the fused layouts (loaded as they are).
CONVERTED = {
    "mixtral": PROBE_CONFIGS["mixtral"].replace(n_layers=2),
    "qwen2_moe shared, dense layer 1": PROBE_CONFIGS["qwen2_moe"].replace(n_layers=2, dense_layers=(1,)),
    "qwen2_moe without a shared expert": PROBE_CONFIGS["qwen2_moe"].replace(d_shared_expert=None, top_k=1),
    "phi3": PROBE_CONFIGS["phi3"],
    "glm": PROBE_CONFIGS["glm"],
}


@needs.transformers
@pytest.mark.parametrize("name", CONVERTED)
def test_the_model_holds_what_transformers_loads_from_the_published_names(name: str, tmp_path: Path) -> None:
    """The adapter stacks canonical weights (the published checkpoint names) into the live model as
    transformers' own loader does: `from_pretrained` on a directory holding them under those names
    gives the same parameters, bit for bit (but the gate of Qwen2-MoE's absent shared expert, which
    multiplies an output of size 0: the loader leaves it random)."""
    import torch
    from safetensors.numpy import save_file

    config = CONVERTED[name]
    weights = init_weights(config, seed=4)
    config.to_transformers().save_pretrained(tmp_path)
    save_file({n: np.ascontiguousarray(w, dtype=np.float32) for n, w in weights.items()},
              tmp_path / "model.safetensors", metadata={"format": "pt"})  # fmt: skip
    loaded = model_class(config).from_pretrained(tmp_path, dtype=torch.float32).state_dict()
    built = hf_transformers.build(config, weights).model.state_dict()
    assert set(built) == set(loaded)
    unused = {n for n in loaded if config.d_shared_expert is None and "shared_expert" in n}
    assert all(loaded[n].numel() == 0 for n in unused if not n.endswith("shared_expert_gate.weight"))
    assert [n for n in loaded if n not in unused and not torch.equal(loaded[n], built[n])] == []
