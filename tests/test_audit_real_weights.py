"""The audit's rows about trained weights: checked with GPT-2's trained weights from the Hugging Face
cache and a trained stories15M.bin when they are here (skipped, saying so, when not), and the same
code paths exercised everywhere with stand-ins the suite writes (seeded weights, clearly not trained).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from verifier.analysis.audit import CLAIMS, AuditError, check
from verifier.analysis.audit.inputs import NO_GPT2, STORIES15M_ENV, Inputs
from verifier.analysis.audit.verdict import CORRECT, MISLEADING, NOT_CHECKABLE, WRONG
from verifier.formats import save_checkpoint
from verifier.formats.sources import SourceError, resolve_repo
from verifier.model.presets import preset
from verifier.model.weights import init_weights

BY_ID = {claim.id: claim for _, claim in CLAIMS}
STORIES15M_ROWS = ("stories15m-n-layers", "stories15m-vocab", "stories15m-dim", "stories15m-seq-len",
                   "stories15m-hidden-dim", "stories15m-n-heads")  # fmt: skip


def _fake_hf_cache(root: Path, repo: str, model_dir: Path) -> None:
    """A Hugging Face hub cache holding `model_dir` as `repo`'s main revision."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for f in model_dir.iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text("0123abcd")


# ---- trained weights, when they are here ----------------------------------------------------------


def _cached_gpt2() -> Path:
    for repo in ("openai-community/gpt2", "gpt2"):
        try:
            return resolve_repo(repo)
        except SourceError:
            continue
    pytest.skip("GPT-2's trained weights are not in the Hugging Face cache (openai-community/gpt2; never downloaded)")


def test_trained_gpt2_rows() -> None:
    _cached_gpt2()
    inputs = Inputs()
    values = check(BY_ID["gpt2-embedding-values"], inputs)
    assert values.verdict == WRONG, values  # the articles' rows are illustrations (0.123, 0.234, 0.345, ...)
    paris = check(BY_ID["gpt2-paris"], inputs)
    predicted = int(paris.exact.split()[0])
    assert paris.verdict == (CORRECT if predicted == 6342 else WRONG) and "GPT-2 predicts" in paris.why
    assert check(BY_ID["gpt2-paris"], inputs, stated=predicted).verdict == CORRECT


def test_trained_stories15m_rows() -> None:
    path = os.environ.get(STORIES15M_ENV)
    if not path:
        pytest.skip(f"no trained stories15M.bin: set {STORIES15M_ENV} to llama2.c's stories15M.bin")
    inputs = Inputs()
    for claim_id in STORIES15M_ROWS:
        row = check(BY_ID[claim_id], inputs)
        assert row.verdict == CORRECT and f"header of the trained stories15M.bin at {path}" in row.how, row
    learned = check(BY_ID["stories15m-rope-learned"], inputs)
    assert learned.verdict == WRONG and "RoPE tables match theta 10000, every entry checked" in learned.how
    assert check(BY_ID["stories15m-table5-total"], inputs).verdict == MISLEADING


# ---- the same paths with stand-ins ------------------------------------------------------------


@pytest.fixture
def empty_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv(STORIES15M_ENV, raising=False)
    return tmp_path / "hub"


def test_without_trained_weights_the_rows_are_not_checkable_and_say_what_would_check_them(empty_hf_cache: Path) -> None:
    inputs = Inputs()
    assert inputs.real_gpt2 == NO_GPT2
    for claim_id in ("gpt2-embedding-values", "gpt2-paris"):
        row = check(BY_ID[claim_id], inputs)
        assert row.verdict == NOT_CHECKABLE and row.why == NO_GPT2 and row.how.startswith("GPT-2's trained")


def test_gpt2_is_looked_for_in_the_hugging_face_cache_and_must_be_gpt2_small(
    empty_hf_cache: Path, tmp_path: Path
) -> None:
    tiny = preset("gpt2").replace(vocab_size=1000, d_model=64, n_heads=4, n_kv_heads=4, d_ff=256, n_layers=2)
    save_checkpoint(tmp_path / "model", tiny, init_weights(tiny))
    _fake_hf_cache(empty_hf_cache, "openai-community/gpt2", tmp_path / "model")
    with pytest.raises(AuditError, match=r"not GPT-2 small: .* found gpt2, 1000, 64, 2, 4$"):
        _ = Inputs().real_gpt2


def test_a_stories15m_file_is_read_when_given(empty_hf_cache: Path, tmp_path: Path, monkeypatch) -> None:
    """A stories15M-shaped file the suite writes (seeded weights, llama2.c's layout) stands in for the trained one."""
    config = preset("llama2c-stories15M")
    path = tmp_path / "stories15M.bin"
    save_checkpoint(path, config, init_weights(config), format="llama2c")
    monkeypatch.setenv(STORIES15M_ENV, str(path))
    inputs = Inputs()
    for claim_id in STORIES15M_ROWS:
        row = check(BY_ID[claim_id], inputs)
        assert row.verdict == CORRECT and f"header of the trained stories15M.bin at {path}" in row.how, row
    learned = check(BY_ID["stories15m-rope-learned"], inputs)
    assert learned.verdict == WRONG and "RoPE tables match theta 10000, every entry checked" in learned.how
    total = check(BY_ID["stories15m-table5-total"], inputs)
    assert total.verdict == MISLEADING and f"the trained stories15M.bin at {path}" in total.how


def test_a_stories15m_file_in_the_hugging_face_cache_is_read(empty_hf_cache: Path, tmp_path: Path) -> None:
    """Where llama2.c's author publishes it (karpathy/tinyllamas), found in the cache, never downloaded."""
    config = preset("llama2c-stories15M")
    (tmp_path / "repo").mkdir()
    save_checkpoint(tmp_path / "repo" / "stories15M.bin", config, init_weights(config), format="llama2c")
    _fake_hf_cache(empty_hf_cache, "karpathy/tinyllamas", tmp_path / "repo")
    row = check(BY_ID["stories15m-dim"], Inputs())
    cached = empty_hf_cache / "models--karpathy--tinyllamas" / "snapshots" / "0123abcd" / "stories15M.bin"
    assert row.verdict == CORRECT and f"header of the trained stories15M.bin at {cached}" in row.how, row


def test_a_stories15m_file_with_other_sizes_decides_the_hyperparameter_rows(
    empty_hf_cache: Path, tmp_path: Path
) -> None:
    """The file, not the preset, is the exact value when given: one with seq_len 512 makes the article's 256 wrong."""
    config = dataclasses.replace(preset("llama2c-stories15M"), n_ctx=512)
    path = tmp_path / "stories15M.bin"
    save_checkpoint(path, config, init_weights(config), format="llama2c")
    row = check(BY_ID["stories15m-seq-len"], Inputs(stories15m=path))
    assert (row.exact, row.verdict) == ("512", WRONG)


def test_only_the_version_0_file_llama2c_publishes_is_taken(empty_hf_cache: Path, tmp_path: Path) -> None:
    config = preset("llama2c-stories15M")
    path = tmp_path / "stories15M-v1.bin"
    save_checkpoint(path, config, init_weights(config), format="llama2c", version=1)
    with pytest.raises(
        AuditError, match=r"expected the version 0 file llama2\.c publishes as stories15M\.bin, found version 1"
    ):
        Inputs(stories15m=path).load_named()
