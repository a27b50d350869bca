"""litgpt (`litgpt.model.GPT`, the weights converted by litgpt's own converter, float32, CPU) as a model
under test, against the float64 oracle within float32's bound. Every test that builds a model is slow:
importing litgpt (lightning with it) takes 4 to 5 s here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from verifier.plugin.adapters import litgpt

if litgpt.missing() is not None:
    pytest.skip(litgpt.missing() or "", allow_module_level=True)

from tests.engines import assert_sequence_and_batch_agree
from tests.meta.suite_runs import run_suite
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.properties.oracle import Oracle

LLAMA = preset("llama2c-stories260K").replace(n_layers=2, n_ctx=24)  # 8 heads, 4 kv heads
QWEN2 = LLAMA.replace(family="qwen2", qkv_bias=True, norm_eps=1e-6)
MISTRAL_WINDOW = LLAMA.replace(family="mistral", sliding_window=3, norm_eps=1e-6)
TOKENS = np.random.default_rng(0).integers(0, LLAMA.vocab_size, size=20)


def built(config):  # type: ignore[no-untyped-def]
    weights = init_weights(config, seed=3, scale=0.2)
    return litgpt.build(config, weights), Oracle(config, weights)


@pytest.mark.slow  # litgpt's import: 4 to 5 s
@pytest.mark.parametrize("config", [LLAMA, QWEN2], ids=["llama-gqa", "qwen2-bias"])
def test_logits_of_one_sequence_and_a_batch_agree_with_the_oracle(config) -> None:  # type: ignore[no-untyped-def]
    assert_sequence_and_batch_agree(*built(config), TOKENS)


@pytest.mark.slow  # litgpt's import: 4 to 5 s
def test_decode_continues_its_own_kv_cache() -> None:
    model, oracle = built(LLAMA)
    expected = oracle.logits(TOKENS)
    first, cache = model.decode(TOKENS[:9])
    rest, _ = model.decode(TOKENS[9:], cache)
    again, _ = model.decode(TOKENS[9:], cache)  # the cache is not consumed
    comparison = expected.compare(np.concatenate([first, rest]))
    assert comparison.ok, f"decode: error / tolerance {comparison.ratio:.3g}"
    np.testing.assert_array_equal(again, rest)


@pytest.mark.slow  # litgpt's import: 4 to 5 s
def test_a_batch_decodes_in_one_cache_and_one_row_after_another_is_refused() -> None:
    model, oracle = built(LLAMA)
    rows = np.stack([TOKENS, TOKENS[::-1]])
    first, cache = model.decode(rows[:, :5])
    rest, _ = model.decode(rows[:, 5:], cache)
    for row, logits in zip(rows, np.concatenate([first, rest], axis=1), strict=True):
        assert oracle.logits(row).compare(logits).ok
    with pytest.raises(ValueError, match="a cache of 2 rows continued with 1 rows"):
        model.decode(TOKENS[5:], cache)


@pytest.mark.slow  # litgpt's import: 4 to 5 s
def test_a_sliding_window_decodes_one_token_at_a_time_past_the_window() -> None:
    model, oracle = built(MISTRAL_WINDOW)
    logits, cache = model.decode(TOKENS[:3])  # W = 3 positions: litgpt's ring buffer is full
    chunks = [logits]
    for token in TOKENS[3:]:
        logits, cache = model.decode(token[None], cache)
        chunks.append(logits)
    comparison = oracle.logits(TOKENS).compare(np.concatenate(chunks))
    assert comparison.ok, f"decode: error / tolerance {comparison.ratio:.3g}"


@pytest.mark.slow  # litgpt's import: 4 to 5 s
def test_a_chunk_longer_than_the_window_is_refused_with_litgpt_s_reason() -> None:
    model, _ = built(MISTRAL_WINDOW)
    with pytest.raises(litgpt.Unsupported, match="at most W = 3 new tokens"):
        model.decode(TOKENS[:4])


def test_a_missing_package_is_a_reason_to_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litgpt.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(litgpt.Unsupported, match=r"litgpt.* not installed here.*\[litgpt\].*--no-deps litgpt"):
        litgpt.build(LLAMA, init_weights(LLAMA))


@pytest.mark.slow  # a suite run in a subprocess
def test_the_suite_s_logits_property_conforms(tmp_path: Path) -> None:
    report = run_suite("litgpt", tmp_path, "-k", "logits_agree")
    (verdict,) = report.verdicts()
    assert verdict.verdict == "conforms", "\n".join(r.detail for r in report.failures)


@pytest.mark.slow  # the whole suite: 2 minutes here
def test_the_whole_suite_fails_only_where_litgpt_s_decode_differs(tmp_path: Path) -> None:
    """What the suite finds in litgpt (tests/litgpt/test_families.py measures both): a chunk decoded across
    the wrap of a sliding layer's ring buffer, and Gemma 2 decoded under the attention soft-cap (the
    cache's boolean mask added to the capped scores: a one-token batch prefill at n_ctx 2 is 284x the
    bound with the cap, 5e-10 without); everything else it runs passes or skips for a capability."""
    report = run_suite("litgpt", tmp_path)
    (verdict,) = report.verdicts()
    assert verdict.verdict == "fails"
    failing = {r.property.split("::")[-1]: r for r in report.failures}
    # Which decode property draws one of the two depends on the draws (CI on fad5f37 drew the wrap for the
    # one-sequence chunked property too; 6ac739d, whose workers' BLAS pools are one thread, the capped Gemma 2
    # prefill for the past-the-window property): each failure, whichever property found it, must be one of them.
    for result in failing.values():
        ring_buffer = "decoded after a cache" in result.detail and "sliding_window=None" not in result.case
        capped_gemma2 = "family='gemma2'" in result.case and "attn_softcap=None" not in result.case
        assert "the bug is in decode's" in result.detail and (ring_buffer or capped_gemma2), result.detail
