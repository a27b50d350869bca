"""Logits declared up to a constant per position (`logits_up_to_a_constant = True`) are compared with
the oracle's as log-probabilities, every other property unchanged: a centred correct model conforms
only when it declares it, and the declaration hides no bug (a declaration that is not a bool breaks
the contract: tests/plugin/test_contract.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.plugin.project import ROOT, run
from verifier.analysis.agreement import log_softmax
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights
from verifier.properties.oracle import Oracle

MODELS = "tests.plugin.centred"
GPT2 = ModelConfig("gpt2", 64, 16, 16, 2, 2, 2, 64, norm_eps=1e-5, tie_embeddings=True)


def test_log_softmax_removes_a_constant_per_position_and_keeps_the_oracle_s_bound() -> None:
    weights = init_weights(GPT2, seed=1, scale=0.3)
    tokens = np.arange(10) % 64
    expected = Oracle(GPT2, weights).logits(tokens)
    found = expected.value.astype(np.float32)
    shifted = found - np.linspace(-3, 3, 10, dtype=np.float32)[:, None]  # a constant per position
    assert not expected.compare(shifted).ok
    as_probs = expected.log_softmax()
    assert as_probs.compare(log_softmax(shifted)).ok and as_probs.logits
    np.testing.assert_allclose(np.exp(as_probs.value).sum(axis=-1), 1.0, rtol=1e-12)
    assert as_probs.bound(with_neighbours=False) == expected.bound(with_neighbours=False)  # the same scale


@pytest.mark.slow  # three models, three properties in the checkpoint profile: 9 s here
def test_a_centred_model_conforms_only_when_it_declares_it_and_a_bug_still_fails(tmp_path: Path) -> None:
    names = ("centred", "centred_undeclared", "centred_with_a_bug")
    models = [a for name in names for a in ("--model", f"{MODELS}:{name}")]
    done = run(ROOT, "-m", "verifier", "check", *models, "--reports", str(tmp_path), "--hypothesis-profile",
               "checkpoint", "--", "-p", "no:cacheprovider", "-k", "logits_agree or decoding_in_chunks or batch_rows",
               env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    report = json.loads((tmp_path / "conformance.json").read_text())
    verdicts = {v["model"].split(":")[1]: v["verdict"] for v in report["models"]}
    assert verdicts == {"centred": "conforms", "centred_undeclared": "fails", "centred_with_a_bug": "fails"}, done
    outcomes = {(r["model"].split(":")[1], r["property"].split("::")[1]): r["outcome"] for r in report["results"]}
    assert outcomes["centred_undeclared", "test_logits_agree_with_the_oracle"] == "fail"
    assert outcomes["centred_undeclared", "test_batch_rows_equal_the_rows_run_alone"] == "pass"  # model vs model
    failure = next(r for r in report["results"] if r["model"].endswith("centred_with_a_bug") and r["outcome"] == "fail")
    assert "(as log-probabilities: its logits are declared up to a constant per position)" in failure["detail"]
