"""Fixtures of the library's tests: the real tokenizers when the shared data has them, or none at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from verifier import extra
from verifier.analysis.audit.articles import SEEDS_ENV
from verifier.formats.data import DATA_DIR_ENV
from verifier.formats.tokenizer import GPT2Tokenizer, Llama2cTokenizer, TokenizerNotFound, find_tokenizer

_ABSENT = f"the real {{}} tokenizer is not available: {DATA_DIR_ENV} points where it is not"


@pytest.fixture(scope="session")
def gpt2_tokenizer() -> GPT2Tokenizer:
    """GPT-2's real tokenizer, or a skip saying where to get it."""
    try:
        tokenizer = find_tokenizer("gpt2", 50257)
    except TokenizerNotFound:
        pytest.skip(_ABSENT.format("GPT-2"))
    assert isinstance(tokenizer, GPT2Tokenizer)
    return tokenizer


@pytest.fixture(scope="session")
def llama_tokenizer() -> Llama2cTokenizer:
    """llama2.c's real tokenizer.bin (Llama 2's 32,000 pieces), or a skip saying where to get it."""
    try:
        tokenizer = find_tokenizer("llama", 32000)
    except TokenizerNotFound:
        pytest.skip(_ABSENT.format("llama2.c"))
    assert isinstance(tokenizer, Llama2cTokenizer)
    return tokenizer


@pytest.fixture
def no_tokenizers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No shared data and an empty Hugging Face cache: nowhere a tokenizer could be found."""
    (tmp_path / "data").mkdir()
    (tmp_path / "hf").mkdir()
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    return tmp_path


@pytest.fixture
def no_transformers_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the `transformers` extra were not installed: torch and transformers look absent."""
    really_installed = extra.installed
    monkeypatch.setattr(extra, "installed", lambda module: module not in extra.MODULES and really_installed(module))


@pytest.fixture(scope="session")
def seeds_dir() -> Path:
    """The five source articles (`../shared/seeds` beside the checkout, or $VERIFIER_SEEDS_DIR), or a skip."""
    seeds = Path(os.environ.get(SEEDS_ENV) or Path(__file__).resolve().parents[1].parent / "shared" / "seeds")
    if not seeds.is_dir():
        pytest.skip(f"the source articles are not here ({seeds}): set {SEEDS_ENV} to the shared seeds directory")
    return seeds
