"""TransformerLens (a TransformerBridge booted over the transformers model, float32, CPU) as a model under
test, against the float64 oracle within float32's bound. Every test that builds a model is slow:
importing TransformerLens takes 4 to 9 s here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from verifier.plugin.adapters import transformer_lens

if transformer_lens.missing() is not None:
    pytest.skip(transformer_lens.missing() or "", allow_module_level=True)

from tests.engines import assert_sequence_and_batch_agree
from tests.meta.suite_runs import run_suite
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.properties.oracle import Oracle

GPT2 = preset("gpt2").replace(vocab_size=100, n_ctx=24, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=128)
LLAMA = preset("llama2c-stories260K").replace(n_layers=2, n_ctx=24)  # 8 heads, 4 kv heads
TOKENS = np.random.default_rng(0).integers(0, 100, size=20)


def built(config):  # type: ignore[no-untyped-def]
    weights = init_weights(config, seed=3, scale=0.2)
    return transformer_lens.build(config, weights), Oracle(config, weights)


@pytest.mark.slow  # TransformerLens's import: 4 to 9 s
@pytest.mark.parametrize("config", [GPT2, LLAMA], ids=["gpt2", "llama-gqa"])
def test_logits_of_one_sequence_and_a_batch_agree_with_the_oracle(config) -> None:  # type: ignore[no-untyped-def]
    assert_sequence_and_batch_agree(*built(config), TOKENS)


@pytest.mark.slow  # TransformerLens's import: 4 to 9 s
def test_the_first_chunk_decodes_as_one_pass() -> None:
    model, oracle = built(LLAMA)
    logits, _ = model.decode(TOKENS)
    comparison = oracle.logits(TOKENS).compare(logits)
    assert comparison.ok, f"decode: error / tolerance {comparison.ratio:.3g}"


@pytest.mark.slow  # TransformerLens's import: 4 to 9 s
@pytest.mark.xfail(strict=True, reason=(
    "TransformerLens 4.3's attention reads the KV cache from `past_key_values` (or `layer_past`); "
    "transformers 5.24 passes it as `cache`, so the bridge never extends it: a chunk after it attends to "
    "itself only (error / tolerance 2.7e4 here)"))  # fmt: skip
def test_decode_continues_its_own_kv_cache() -> None:
    model, oracle = built(LLAMA)
    first, cache = model.decode(TOKENS[:9])
    rest, _ = model.decode(TOKENS[9:], cache)
    comparison = oracle.logits(TOKENS).compare(np.concatenate([first, rest]))
    print(f"decode in chunks of 9 and 11: error / tolerance {comparison.ratio:.3g}")
    assert comparison.ok, f"decode: error / tolerance {comparison.ratio:.3g}"


@pytest.mark.slow  # TransformerLens's import: 4 to 9 s
@pytest.mark.xfail(strict=True, reason="the cause of the above: after 9 tokens the cache holds none")
def test_the_cache_handed_back_holds_the_chunk() -> None:
    model, _ = built(LLAMA)
    _, cache = model.decode(TOKENS[:9])
    assert cache.get_seq_length() == 9, f"the cache holds {cache.get_seq_length()} positions"


def test_a_missing_package_is_a_reason_to_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transformer_lens.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(transformer_lens.Unsupported, match=r"transformer_lens not installed.*\[transformer-lens\]"):
        transformer_lens.build(LLAMA, init_weights(LLAMA))


@pytest.mark.slow  # a suite run in a subprocess
def test_the_suite_s_logits_property_conforms(tmp_path: Path) -> None:
    report = run_suite("transformer-lens", tmp_path, "-k", "logits_agree")
    (verdict,) = report.verdicts()
    assert verdict.verdict == "conforms", "\n".join(r.detail for r in report.failures)


@pytest.mark.slow  # the whole suite, pinned examples and three drawn ones each: 27 s here (129 s in the ci profile)
def test_the_whole_suite_fails_only_in_decode_s_cached_path(tmp_path: Path) -> None:
    """What the suite finds in TransformerLens: every property that decodes after a cache fails (the cache
    stays empty, tests/transformer_lens/test_families.py); everything else passes or skips for a capability.
    The empty cache fails every decode, so three drawn examples find it as twenty do."""
    report = run_suite("transformer-lens", tmp_path, profile="checkpoint")
    (verdict,) = report.verdicts()
    assert verdict.verdict == "fails"
    failing = {r.property.split("::")[-1]: r for r in report.failures}
    assert set(failing) == {
        "test_decoding_in_chunks_gives_the_logits_of_one_full_pass",
        "test_decoding_a_batch_in_chunks_gives_the_logits_of_one_full_pass",
        "test_a_cache_stays_usable_after_decoding_from_it",
        "test_two_sequences_decoded_alternately_each_give_their_own_full_pass",
        "test_logits_past_the_original_context_agree_with_the_oracle",
        "test_decoding_past_the_window_with_the_cache_gives_the_logits_of_one_full_pass",
    }, "\n".join(r.detail for r in report.failures)
    for result in failing.values():
        assert "the bug is in decode's cached path" in result.detail, result.detail
