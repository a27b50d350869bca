"""The distribution statistics of `verifier kl` (`verifier.analysis.agreement.distribution_agreement`),
from their definitions: KL(P || Q) of the oracle's P against the model's Q per position, the top-token
agreement, and Delta p of the text's next token; and the command on the bundled text."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.meta.suite_runs import mutant_spec
from tests.plugin.project import ROOT, run
from verifier.analysis.agreement import distribution_agreement, log_softmax
from verifier.formats import save_checkpoint
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights


def test_two_positions_by_hand() -> None:
    # P = (1/2, 1/2) and (0.9, 0.1); Q = (0.9, 0.1) and (0.9, 0.1); the text is tokens 0, 1.
    reference = np.log(np.array([[0.5, 0.5], [0.9, 0.1]]))
    logits = np.log(np.array([[0.9, 0.1], [0.9, 0.1]])) + 7.0  # a constant changes no distribution
    stats = distribution_agreement(reference, logits, np.array([0, 1]))
    first = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert stats.max_kl == pytest.approx(first) and stats.mean_kl == pytest.approx(first / 2)
    assert stats.median_kl == pytest.approx(first / 2) and stats.positions == 2
    assert stats.same_top == 1.0  # argmax 0 in both rows (ties broken alike: the first)
    assert stats.mean_dp == pytest.approx(0.1 - 0.5) and stats.rms_dp == pytest.approx(0.4)  # the next token is 1


def test_identical_logits_are_zero_and_shapes_are_checked() -> None:
    logits = np.random.default_rng(0).normal(size=(6, 11))
    stats = distribution_agreement(logits, logits.copy(), np.arange(6))
    assert stats.max_kl == 0.0 and stats.same_top == 1.0 and stats.rms_dp == 0.0
    assert np.allclose(np.exp(log_softmax(logits)).sum(axis=-1), 1.0)
    with pytest.raises(ValueError, match="expected logits of the same shape"):
        distribution_agreement(logits, logits[:, :5], np.arange(6))


def test_kl_on_the_bundled_text_is_near_zero_for_the_reference_and_large_for_a_bug(tmp_path: Path) -> None:
    out = tmp_path / "kl.json"
    refusing = "tests.adapters.picogpt:build_124m_only"
    done = run(ROOT, "-m", "verifier", "kl", "--model", "numpy", "--model", mutant_spec("ScaleByDHead"),
               "--model", refusing, "--families", "gpt2", "--json", str(out))  # fmt: skip
    assert done.returncode == 0, done
    rows = {r["model"]: r for r in json.loads(out.read_text())}
    assert rows["numpy"]["max_kl"] < 1e-8 and rows["numpy"]["same_top"] == 1.0 and rows["numpy"]["tokens"] > 200
    assert "class_mean_kl" not in rows["numpy"]  # float32: no narrower class to compare with
    assert rows[mutant_spec("ScaleByDHead")]["mean_kl"] > 1e-3
    assert "GPT-2 small" in rows[refusing]["unsupported"]
    assert "numpy on gpt2: mean KL divergence " in done.stdout


def test_kl_runs_a_block_quantized_model_on_a_probe_config_that_fills_its_blocks(tmp_path: Path) -> None:
    # The probe config's widths (d_model 8) fill no block of 32: llama.cpp's Q8_0 and Q4_0 had no row.
    out = tmp_path / "kl.json"
    blocks = "tests.adapters.picogpt:build_in_blocks_of_32"
    done = run(ROOT, "-m", "verifier", "kl", "--model", blocks, "--model", "numpy", "--families", "gpt2",
               "--json", str(out))  # fmt: skip
    assert done.returncode == 0, done
    rows = {r["model"]: r for r in json.loads(out.read_text())}
    assert "unsupported" not in rows[blocks] and rows[blocks]["max_kl"] < 1e-8, rows[blocks]
    assert rows["numpy"]["max_kl"] < 1e-8  # the free-shape model on its own config, beside it


def test_a_model_that_raises_on_the_text_is_a_row_and_the_others_still_run(tmp_path: Path) -> None:
    # CTranslate2's Mistral raised past its window, and the command ended in a traceback with no row.
    out = tmp_path / "kl.json"
    raising = "tests.adapters.picogpt:build_short_buffers"
    done = run(ROOT, "-m", "verifier", "kl", "--model", raising, "--model", "numpy", "--families", "gpt2",
               "--json", str(out))  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done
    rows = {r["model"]: r for r in json.loads(out.read_text())}
    assert "broke the contract rule 'no-exception'" in rows[raising]["error"], rows[raising]
    assert "buffer to copy is of size 255" in rows[raising]["error"]
    assert rows["numpy"]["max_kl"] < 1e-8


def test_kl_on_a_checkpoint_uses_its_config_and_weights(tmp_path: Path) -> None:
    config = ModelConfig("llama", 32000, 64, 16, 1, 2, 2, 32, norm_eps=1e-5, tie_embeddings=True)
    save_checkpoint(tmp_path / "m", config, init_weights(config, seed=2, scale=0.3))
    done = run(ROOT, "-m", "verifier", "kl", "--model", "numpy-bfloat16", "--checkpoint", str(tmp_path / "m"),
               "--json", str(tmp_path / "kl.json"))  # fmt: skip
    (row,) = json.loads((tmp_path / "kl.json").read_text())
    assert (row["family"], row["tokens"]) == ("llama", 64), row  # the text, cut at the checkpoint's context
    assert 0 < row["mean_kl"] < 1e-2, row
    # Beside it, its class alone: numpy-bfloat16 is the reference rounded to bfloat16, the same run.
    assert row["class"] == "bfloat16" and row["class_mean_kl"] == row["mean_kl"], row
    assert done.returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--seed", "-1"], "argument --seed: must be an integer in [0, 4294967295], not '-1'"),
     (["--families", "gpt3"], "argument --families: 'gpt3': expected families of gpt2, llama")],
)  # fmt: skip
def test_a_bad_seed_or_family_is_a_one_line_usage_error(args: list[str], message: str) -> None:
    # A negative seed reached NumPy's generator and ended in its traceback.
    done = run(ROOT, "-m", "verifier", "kl", "--model", "numpy", *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done
