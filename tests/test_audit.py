"""The audit: each claim's verdict, and that each check can tell a right statement from a wrong one.

Expected values are written from the arithmetic of the architecture (e.g. 12 * (768 * 2304 + 2304)),
not read from the suite's formula.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.analysis import audit
from verifier.analysis.audit import CORRECT, NO_TOKENIZER, ROUNDED, WRONG, Claim
from verifier.formats.tokenizer import TokenizerError
from verifier.reference import layers as L


def _by_claim(claims: list[Claim]) -> dict[str, Claim]:
    return {c.claim: c for c in claims}


def test_the_capital_of_france_is_not_the_stated_ids(gpt2_tokenizer) -> None:
    (claim,) = audit.tokenizer_claims()
    assert claim.exact == "[464, 3139, 286, 4881, 318]"
    assert claim.verdict == WRONG
    assert "3 of 5 ids differ" in claim.detail


def test_the_tokenizer_claim_is_skipped_without_a_tokenizer(no_tokenizers) -> None:
    (claim,) = audit.tokenizer_claims()
    assert claim.verdict == NO_TOKENIZER == "skipped: no tokenizer (set VERIFIER_DATA_DIR or --tokenizer)"
    with pytest.raises(TokenizerError, match="not a GPT-2 tokenizer directory"):
        audit.tokenizer_claims(no_tokenizers)  # a --tokenizer given but unusable is an error, not a skip


@pytest.mark.parametrize(
    ("stated", "exact", "verdict"),
    [(50_257, 50_257, CORRECT), (50_000, 50_257, ROUNDED), (38.4e6, 38_597_376, ROUNDED), (63.5e6, 21_261_312, WRONG)],
)
def test_number_verdicts(stated: float, exact: int, verdict: str) -> None:
    assert audit.number_verdict(stated, exact)[0] == verdict


def test_gpt2_sizes_and_both_breakdowns() -> None:
    claims = _by_claim(audit.gpt2_size_claims() + audit.gpt2_breakdown_claims())
    assert claims["GPT-2's vocabulary (tokens)"].exact == "50,257"
    assert claims["GPT-2's token embedding (parameters)"].exact == f"{50257 * 768:,}" == "38,597,376"
    assert "786,432" in claims["GPT-2's token embedding (parameters)"].detail
    exact = {
        "embedding": 50257 * 768,
        "q, k, v": 12 * (768 * 2304 + 2304),
        "output projection": 12 * (768 * 768 + 768),
        "MLP": 12 * (768 * 3072 + 3072 + 3072 * 768 + 768),
    }
    verdicts = {
        "version 1": {"embedding": ROUNDED, "q, k, v": WRONG, "output projection": WRONG, "MLP": WRONG},
        "version 2": {"embedding": ROUNDED, "q, k, v": ROUNDED, "output projection": ROUNDED, "MLP": ROUNDED},
    }
    for version, parts in verdicts.items():
        for part, verdict in parts.items():
            claim = claims[f"GPT-2 breakdown, {version}: {part}"]
            assert (claim.exact, claim.verdict) == (f"{exact[part]:,}", verdict), claim


def test_the_formula_is_evaluated_and_what_it_leaves_out_closes_the_gap() -> None:
    assert audit.evaluate(audit.GPT2_FORMULA) == 50000 * 768 + 7_077_888 * 12 == 123_334_656
    claims = _by_claim(audit.gpt2_breakdown_claims())
    value, count = claims["GPT-2 formula: its value"], claims["GPT-2 formula: the parameter count"]
    assert (value.exact, value.verdict) == ("123,334,656", WRONG)
    assert (count.exact, count.verdict) == ("124,439,808", WRONG)
    left_out = {"biases": 12 * (2304 + 768 + 3072 + 768), "LayerNorms": 25 * 2 * 768, "position embedding": 1024 * 768,
                "the last 257 vocabulary rows": 257 * 768}  # fmt: skip
    for name, n in left_out.items():
        assert f"{name} {n:,}" in count.detail
    assert 123_334_656 + sum(left_out.values()) == 124_439_808


def test_evaluate_takes_only_integer_arithmetic() -> None:
    assert audit.evaluate("(2 + 3) * 4") == 20
    for expression in ("2 - 1", "__import__('os')", "2.5 * 2"):
        with pytest.raises(ValueError, match="only integers"):
            audit.evaluate(expression)


def test_the_stories15m_table_is_right_and_a_wrong_row_is_caught(monkeypatch) -> None:
    claims = audit.stories15m_claims()
    assert all(c.verdict == CORRECT for c in claims), [c for c in claims if c.verdict != CORRECT]
    assert claims[-1].exact == "15,204,000" and "15,191,712 learned" in claims[-1].detail
    assert _by_claim(claims)["stories15M table: w1"].exact == f"{6 * 768 * 288:,}"
    wrong = [(f, h, n + 288 if f == "wq" else n) for f, h, n in audit.STORIES15M_TABLE]
    monkeypatch.setattr(audit, "STORIES15M_TABLE", wrong)
    assert _by_claim(audit.stories15m_claims())["stories15M table: wq"].verdict == ROUNDED


def test_the_articles_layer_formulas_differ_from_the_reference() -> None:
    claims = _by_claim(audit.layer_claims())
    for name in ("RMSNorm's RMS", "attention output", "feed-forward (FFN)"):
        assert claims[name].verdict == WRONG, claims[name]
    scale = float(claims["RMSNorm's RMS"].detail.split("the stated form is ")[1].split(" x")[0])
    assert 15 < scale < np.sqrt(288)  # sqrt(d_model), a little less where eps matters


def test_the_harness_finds_no_difference_for_the_right_formulas() -> None:
    """Given the right formulas, the same inputs reproduce the reference: so a difference is the formula's."""
    li = audit.layer_inputs()
    eps = li.config.norm_eps
    x = li.trace["embed"]
    rms = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * li.weight("input_layernorm.weight")
    np.testing.assert_allclose(rms, li.stage("attn_norm"), rtol=1e-12)
    q, k, v = li.stage("q_rope"), li.stage("k_rope"), li.stage("v")
    T, d_head = q.shape[1], q.shape[2]
    scores = np.where(np.tril(np.ones((T, T), bool)), q @ k.swapaxes(-1, -2) / np.sqrt(d_head), -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    attn = (probs / probs.sum(-1, keepdims=True)) @ v
    np.testing.assert_allclose(attn.transpose(1, 0, 2).reshape(T, -1), li.stage("attn"), rtol=1e-10, atol=1e-14)
    h = li.stage("mlp_norm")
    gate, up, down = (li.weight(f"mlp.{n}_proj.weight") for n in ("gate", "up", "down"))
    swiglu = (h @ gate.T / (1 + np.exp(-(h @ gate.T))) * (h @ up.T)) @ down.T
    np.testing.assert_allclose(swiglu, li.stage("mlp_out"), rtol=1e-10, atol=1e-14)


def test_padding_is_harmless_and_caught_when_the_mask_leaks(monkeypatch) -> None:
    # GPT-2 itself is checked by tests/cli/test_audit_cmd.py; the same check on a small preset here.
    (claim,) = audit.padding_claims(pad_to=64, model_name="llama2c-stories15M")
    assert claim.verdict == CORRECT and "causal mask" in claim.detail
    monkeypatch.setattr(L, "causal_mask", lambda T, S: np.ones((T, S), dtype=bool))
    (leaky,) = audit.padding_claims(pad_to=64, model_name="llama2c-stories15M")
    assert leaky.verdict == WRONG


def test_render_has_the_four_columns_and_a_summary() -> None:
    claims = [Claim("a claim", "1", "2", WRONG, "2.00 x"), Claim("another", "3", "3", CORRECT)]
    text = audit.render(claims)
    assert text.splitlines()[0].split() == ["claim", "as", "stated", "exact", "verdict"]
    assert "wrong: 2.00 x" in text and text.endswith("1 correct, 0 rounded, 1 wrong, 0 skipped")
    assert audit.to_json(claims)["claims"][1] == {
        "claim": "another", "stated": "3", "exact": "3", "verdict": CORRECT, "detail": "",
    }  # fmt: skip
