"""What the strategies draw on a fixed checkpoint: its config and weights only, lengths within the
property's limits, real text first where its tokenizer is known ("The capital of France is" is the
simplest case), drawn ids otherwise; a pinned case of the suite's own is rejected, not run; and a
checkpoint too large to hold in float64 is streamed by the oracle and mapped for the factory; a model
refused on every tiny probe of the checkpoint's kind is probed on the checkpoint itself."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from verifier.formats import load_checkpoint, save_checkpoint
from verifier.model.config import ModelConfig
from verifier.model.weights import LazyWeights, init_weights
from verifier.plugin import checkpoint
from verifier.plugin.adapters import reference
from verifier.plugin.checkpoint import FixedCheckpoint
from verifier.plugin.contract import build_checked
from verifier.plugin.interface import Unsupported
from verifier.plugin.probes import probe
from verifier.plugin.registry import ModelSpec
from verifier.properties import models
from verifier.properties.cases import Case, cases, chunked_cases
from verifier.properties.oracle import oracle
from verifier.properties.pinned_cases import RICH_GPT2
from verifier.reference import NumpyModel

CAPITAL_GPT2 = (464, 3139, 286, 4881, 318)  # "The capital of France is" in GPT-2's tokenizer
# GPT-2's vocabulary (so the shipped tokenizer fits), everything else tiny.
GPT2_VOCAB = ModelConfig("gpt2", 50257, 40, 8, 1, 2, 2, 16, norm_eps=1e-5, tie_embeddings=True)
LLAMA_VOCAB = ModelConfig("llama", 32000, 40, 8, 1, 2, 2, 16, norm_eps=1e-5, tie_embeddings=True)
NO_TOKENIZER = ModelConfig("gpt2", 11, 40, 8, 1, 2, 2, 16, norm_eps=1e-5, tie_embeddings=True)


@contextmanager
def using(directory: Path, config: ModelConfig, fmt: str = "hf") -> Iterator[FixedCheckpoint]:
    """`config`'s seeded weights written in `directory` and made the fixed checkpoint in this block."""
    path = directory / ("model.bin" if fmt == "llama2c" else "model")
    save_checkpoint(path, config, init_weights(config, seed=1), format=fmt)
    opened, before = FixedCheckpoint.open(str(path)), checkpoint.current()
    checkpoint.use(opened)
    try:
        yield opened
    finally:
        checkpoint.use(before)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixedCheckpoint]:
    with using(tmp_path_factory.mktemp("gpt2"), GPT2_VOCAB) as opened:
        yield opened


def test_the_simplest_case_is_the_capital_of_france_on_the_checkpoint(gpt2: FixedCheckpoint) -> None:
    case = find(cases(), lambda c: True)
    assert case.checkpoint is gpt2 and case.config == gpt2.config
    assert case.tokens == CAPITAL_GPT2
    for name, weight in gpt2.weights.items():
        np.testing.assert_array_equal(case.weights()[name], weight)


def test_llama2c_files_get_real_text_in_llama2cs_tokenizer_with_bos_first(tmp_path: Path) -> None:
    with using(tmp_path, LLAMA_VOCAB, "llama2c") as opened:
        tokens = find(cases(), lambda c: True).tokens
        assert tokens[0] == 1 and len(tokens) > 2  # BOS, then the pieces of the text
        assert opened.tokenizer is not None and opened.tokenizer.encode("The capital of France is") == list(tokens)


@settings(max_examples=60, database=None)
@given(case=cases(min_T=2, max_n_ctx=16, room=3))
def test_every_draw_is_the_checkpoint_within_the_propertys_lengths(gpt2: FixedCheckpoint, case: Case) -> None:
    assert case.checkpoint is gpt2 and case.config == gpt2.config
    assert 2 <= case.T <= 16 - 3
    assert all(0 <= t < gpt2.config.vocab_size for t in case.tokens)


def test_drawn_ids_and_the_full_context_are_reached(gpt2: FixedCheckpoint) -> None:
    find(cases(), lambda c: c.tokens[: len(CAPITAL_GPT2)] != CAPITAL_GPT2)  # raises if never drawn
    full = find(cases(full_context=True, room=2), lambda c: True)
    assert len(full.tokens) == gpt2.config.n_ctx - 2  # the checkpoint's context, not the suite's drawn limit
    chunked = find(chunked_cases(), lambda c: len(c.chunks) > 1)
    assert sum(chunked.chunks) == chunked.case.T


def test_without_a_tokenizer_only_ids_are_drawn(tmp_path: Path) -> None:
    with using(tmp_path, NO_TOKENIZER) as opened:
        assert opened.tokenizer is None
        case = find(cases(), lambda c: True)
        assert case.config == NO_TOKENIZER and case.checkpoint is opened


def test_a_property_about_the_other_family_is_unsatisfiable_not_run(gpt2: FixedCheckpoint) -> None:
    with pytest.raises(Unsatisfiable):
        find(cases(("llama",)), lambda c: True)


def test_a_pinned_case_of_the_suites_own_is_rejected_on_a_checkpoint(gpt2: FixedCheckpoint) -> None:
    def never_built(config: ModelConfig, weights: object) -> None:
        raise AssertionError("a pinned case was built on a checkpoint run")

    spec = ModelSpec("never-built", never_built, "test")

    @settings(database=None)
    @given(st.just(RICH_GPT2))
    def build(case: Case) -> None:
        models.build(spec, case)

    with pytest.raises(Unsatisfiable):
        build()


def test_a_checkpoint_too_large_to_hold_streams_the_oracle_and_maps_the_factorys_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint, "RESIDENT_BYTES", 0)  # every checkpoint is "too large" now
    given_to_factory = []

    def factory(config: ModelConfig, weights: Mapping[str, np.ndarray]) -> NumpyModel:
        given_to_factory.append(weights)
        return NumpyModel(config, weights, np.float32, stream=True)

    with using(tmp_path, GPT2_VOCAB) as opened:
        assert opened.streams and isinstance(opened.weights, LazyWeights)
        case = find(cases(), lambda c: True)
        streamed = oracle(case)
        assert streamed.stream and streamed.model.stream
        resident = NumpyModel(opened.config, load_checkpoint(opened.path).weights, np.float64)
        np.testing.assert_array_equal(streamed.logits(case.token_array()).value, resident.logits(case.token_array()))
        build_checked(ModelSpec("streamed", factory, "test"), opened.config, opened.weights)
        assert isinstance(given_to_factory[0], LazyWeights)  # not a dict of every weight
        assert reference.build(opened.config, opened.weights).stream  # the built-in streams it too


def test_a_model_refusing_every_tiny_probe_is_probed_on_the_checkpoint(tmp_path: Path) -> None:
    """A model that runs real sizes only (rows of 64 here, wider than any tiny probe's d_model):
    refused on the tiny probes, it runs the checkpoint."""

    def real_sizes_only(config: ModelConfig, weights: Mapping[str, np.ndarray]) -> NumpyModel:
        if config.d_model % 64:
            raise Unsupported(f"d_model {config.d_model} is no multiple of 64")
        return NumpyModel(config, weights, np.float32)

    spec = ModelSpec("real-sizes-only", real_sizes_only, "test")
    assert all(p.unsupported for p in probe(spec))  # no checkpoint: the tiny probes only
    with using(tmp_path, GPT2_VOCAB.replace(d_model=64)):
        probes = {p.kind: p for p in probe(spec)}
    assert probes["gpt2"].unsupported is None and "trace" in probes["gpt2"].capabilities
    assert probes["llama"].unsupported is not None  # the other kinds keep their refusals
    with using(tmp_path, GPT2_VOCAB):  # d_model 8: the checkpoint is refused too, and says so
        refused = {p.kind: p for p in probe(spec)}["gpt2"].unsupported
    assert refused is not None and "the checkpoint: d_model 8 is no multiple of 64" in refused
