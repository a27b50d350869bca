"""Trained weights when the user has them: GPT-2 small from the Hugging Face cache, llama2.c's
stories15M.bin given by path ($VERIFIER_STORIES15M) or found in the cache (karpathy/tinyllamas).

Each test runs when its weights are here and otherwise skips saying what would run it; nothing is
downloaded (HF_HUB_OFFLINE is set by the root conftest). The same pipelines also run everywhere on
stand-ins the suite writes (seeded weights in the real vocabularies, put where the real files would
be), so the code a real run goes through is always tested; only the trained predictions are not.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.meta.suite_runs import run_suite
from tests.test_audit_real_weights import _fake_hf_cache
from verifier.analysis.audit.inputs import (
    CAPITAL_TEXT,
    GPT2_TOKENS,
    PARIS,
    STORIES15M_ENV,
    STORIES15M_HF,
    STORY_TEXT,
)
from verifier.formats import load_checkpoint, map_checkpoint, save_checkpoint
from verifier.formats.hf_cache import cached_file
from verifier.formats.sources import SourceError, locate
from verifier.formats.tokenizer import GPT2_HF_REPOS, find_tokenizer
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.adapters import hf_transformers
from verifier.properties.oracle import Oracle
from verifier.reference import NumpyModel


def _cached_gpt2() -> str:
    for repo in GPT2_HF_REPOS:
        try:
            locate(repo)
            return repo
        except SourceError:
            continue
    pytest.skip("GPT-2's trained weights are not in the Hugging Face cache (openai-community/gpt2; never downloaded)")


def _stories15m() -> Path:
    path = os.environ.get(STORIES15M_ENV)
    if path:
        return Path(path)
    cached = cached_file(*STORIES15M_HF)
    if cached is None:
        pytest.skip(
            f"no trained stories15M.bin (never downloaded): set {STORIES15M_ENV} to its path, or have "
            f"{STORIES15M_HF[0]} in the Hugging Face cache"
        )
    return Path(cached)


def _next_token_logits(spec: str | Path, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """The last position's logits of `tokens` from the checkpoint `spec` names (a path or a cached repo id):
    the oracle loaded, the oracle streamed from the mapped file, and `transformers`."""
    path = locate(str(spec))
    loaded, mapped = load_checkpoint(path), map_checkpoint(path)
    config = loaded.config
    oracle = Oracle(config, dict(loaded.weights))
    expected = oracle.logits(tokens)
    found = hf_transformers.build(config, dict(loaded.weights)).logits(tokens)
    comparison = expected.compare(found)
    assert comparison.ok, f"transformers against the oracle on {spec}: {comparison}"
    return {
        "oracle": expected.value[-1],
        "streamed": NumpyModel(config, mapped.weights, np.float64, stream=True).logits(tokens)[-1],
        "transformers": found[-1],
    }


def _gpt2_capital(spec: str) -> dict[str, np.ndarray]:
    tokenizer = find_tokenizer("gpt2", 50257, model_dir=locate(spec))
    tokens = np.array(tokenizer.encode(CAPITAL_TEXT))
    assert tuple(tokens) == GPT2_TOKENS
    logits = _next_token_logits(spec, tokens)
    np.testing.assert_array_equal(logits["streamed"], logits["oracle"])
    return logits


def test_trained_gpt2_says_the_capital_of_france_is_paris() -> None:
    logits = _gpt2_capital(_cached_gpt2())
    for who, row in logits.items():
        assert int(np.argmax(row)) == PARIS, f"{who}: next token {int(np.argmax(row))}, expected {PARIS} (' Paris')"


def test_the_gpt2_pipeline_runs_on_a_stand_in_in_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-2's vocabulary and tokenizer, small seeded layers, cached as openai-community/gpt2."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    config = preset("gpt2").replace(d_model=64, n_heads=4, n_kv_heads=4, n_layers=2, d_ff=128)
    save_checkpoint(tmp_path / "model", config, init_weights(config, seed=3, scale=0.2))
    _fake_hf_cache(tmp_path / "hub", "openai-community/gpt2", tmp_path / "model")
    logits = _gpt2_capital(_cached_gpt2())  # seeded weights: the next token is nobody's in particular
    assert set(logits) == {"oracle", "streamed", "transformers"}


def _properties_conform_on(repo: str, reports: Path) -> None:
    """The reference conforms on the checkpoint `repo` names through `--checkpoint`: the oracle's agreement,
    greedy decoding after real text ("The capital of France is" first) and the articles' 124M table."""
    report = run_suite("numpy", reports, "--checkpoint", repo, "-k", "logits_agree or greedy or articles_table",
                       profile="checkpoint")  # fmt: skip
    verdict = next(v for v in report.verdicts() if v.model == "numpy")
    assert verdict.verdict == "conforms", [(r.property, r.outcome, r.detail[:300]) for r in report.results]
    assert verdict.passed == 3 and report.header.checkpoint is not None
    assert report.header.checkpoint.startswith(repo)


@pytest.mark.slow
def test_the_properties_run_on_trained_gpt2_from_the_cache_by_repo_id(tmp_path: Path) -> None:
    _properties_conform_on(_cached_gpt2(), tmp_path)


@pytest.mark.slow  # GPT-2 124M's shape, so that the articles' table runs on it
def test_the_checkpoint_option_finds_a_stand_in_in_the_cache_by_repo_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPT-2 124M's shape with seeded weights, cached as openai-community/gpt2 (run by the subprocess)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    config = preset("gpt2")
    save_checkpoint(tmp_path / "model", config, init_weights(config, seed=3))
    _fake_hf_cache(tmp_path / "hub", "openai-community/gpt2", tmp_path / "model")
    _properties_conform_on("openai-community/gpt2", tmp_path / "reports")


def _greedy(path: Path, n_new: int) -> tuple[list[int], np.ndarray, np.ndarray]:
    """n_new greedy tokens after BOS from the float64 oracle (KV cache), and the first step's logits
    from the oracle and the streamed oracle."""
    loaded, mapped = load_checkpoint(path), map_checkpoint(path)
    model = NumpyModel(loaded.config, loaded.weights, np.float64)
    logits, cache = model.decode(np.array([1]))
    ids = []
    for _ in range(n_new):
        ids.append(int(np.argmax(logits[-1])))
        logits, cache = model.decode(np.array([ids[-1]]), cache)
    first = model.logits(np.array([1, *ids]))
    streamed = NumpyModel(loaded.config, mapped.weights, np.float64, stream=True).logits(np.array([1, *ids]))
    return ids, first, streamed


def test_trained_stories15m_tells_a_story() -> None:
    path = _stories15m()
    assert load_checkpoint(path).config == preset("llama2c-stories15M")
    ids, logits, streamed = _greedy(path, 6)
    np.testing.assert_array_equal(streamed, logits)
    text = "".join(find_tokenizer("llama", 32000).piece(i) for i in ids)
    assert text.lstrip().startswith(STORY_TEXT), f"greedy from BOS: {text!r}"
    _next_token_logits(path, np.array([1, *ids]))


def test_the_stories15m_pipeline_runs_on_a_stand_in_given_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = preset("llama2c-stories15M").replace(n_layers=2)
    path = tmp_path / "stories15M.bin"
    save_checkpoint(path, config, init_weights(config, seed=2), format="llama2c")
    monkeypatch.setenv(STORIES15M_ENV, str(path))
    ids, logits, streamed = _greedy(_stories15m(), 3)
    np.testing.assert_array_equal(streamed, logits)
    assert len(ids) == 3 and all(0 <= i < 32000 for i in ids)
    _next_token_logits(path, np.array([1, *ids]))
