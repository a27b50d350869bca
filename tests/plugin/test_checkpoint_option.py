"""`--checkpoint` end to end, as a user runs it: every model is built from the checkpoint's weights and
judged against the oracle on them; the report names the checkpoint and its sha256; properties that
need drawn weights, or are about the other family, skip saying so; a broken model fails on a
checkpoint as it fails on drawn weights; a model that cannot run the checkpoint is untested, never
conforming; a checkpoint that names nothing readable is a usage error naming the fault."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.meta.suite_runs import mutant_spec, run_suite
from tests.plugin.project import ROOT, run
from verifier.formats import save_checkpoint
from verifier.formats.digest import checkpoint_sha256
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights
from verifier.report.results import Report

# GPT-2's vocabulary (its shipped tokenizer fits: real text is drawn), everything else small.
GPT2 = ModelConfig("gpt2", 50257, 32, 16, 2, 2, 2, 64, norm_eps=1e-5, tie_embeddings=True)
LLAMA = ModelConfig("llama", 32000, 32, 16, 2, 4, 2, 48, norm_eps=1e-5, tie_embeddings=True)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("checkpoints") / "gpt2"
    save_checkpoint(path, GPT2, init_weights(GPT2, seed=7, scale=0.3))
    return path


@pytest.fixture(scope="module")
def llama_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("checkpoints") / "llama.bin"
    save_checkpoint(path, LLAMA, init_weights(LLAMA, seed=7, scale=0.3), format="llama2c")
    return path


def _verdict(report: Report, model: str) -> str:
    return next(v.verdict for v in report.verdicts() if v.model == model)


def test_a_correct_model_conforms_on_a_checkpoint_named_with_its_sha256(gpt2_dir: Path, tmp_path: Path) -> None:
    report = run_suite(mutant_spec("correct"), tmp_path, "--checkpoint", str(gpt2_dir), profile="checkpoint")
    assert report.exit_status == 0, [(r.property, r.detail) for r in report.results if r.outcome == "failed"]
    assert _verdict(report, mutant_spec("correct")) == "conforms"
    assert report.header.checkpoint == f"{gpt2_dir}, sha256 {checkpoint_sha256(gpt2_dir)}"
    skipped = {r.property.split("::")[-1]: r.detail for r in report.results if r.outcome == "skip"}
    assert (
        "needs weights drawn at large scales" in skipped["test_large_logit_weights_give_finite_logits_within_tolerance"]
    )
    assert "is a gpt2 model" in skipped["test_rope_preserves_the_norm_of_every_pair_and_head_vector"]
    ran = [r.property for r in report.results if r.outcome == "pass" and r.examples]
    assert len(ran) == 16, ran  # of 25 properties on a model: all but the 6 RoPE, large scales, quantized, 124M table


SLOW = pytest.mark.slow  # 8 s a run of the whole suite
# The default tier: one bug of each family, on the oracle's two properties (RoPE from position 1 leaves the
# logits as they are: RoPE is relative; the traced stages show it).
AGREEMENT = ("-k", "logits_agree or every_traced_stage_agrees")


@pytest.mark.parametrize(
    ("mutant", "family", "selection"),
    [("ScaleByDHead", "gpt2", AGREEMENT), pytest.param("ScaleByDHead", "gpt2", (), marks=SLOW),
     pytest.param("MaskOneFutureToken", "gpt2", (), marks=SLOW),
     pytest.param("CacheStaleReuse", "gpt2", (), marks=SLOW),
     ("RopePositionsFromOne", "llama", AGREEMENT), pytest.param("RopePositionsFromOne", "llama", (), marks=SLOW),
     pytest.param("GQAModuloMapping", "llama", (), marks=SLOW)],
)  # fmt: skip
def test_a_broken_model_fails_on_a_checkpoint(
    mutant: str, family: str, selection: tuple[str, ...], gpt2_dir: Path, llama_bin: Path, tmp_path: Path
) -> None:
    path = gpt2_dir if family == "gpt2" else llama_bin
    report = run_suite(mutant_spec(mutant), tmp_path, "--checkpoint", str(path), *selection, profile="checkpoint")
    assert _verdict(report, mutant_spec(mutant)) == "fails", [(r.property, r.outcome) for r in report.results]
    assert report.exit_status == 1


@pytest.mark.slow  # `verifier check` on two models that probe every family: 5 s here
def test_a_model_that_refuses_the_checkpoints_config_is_untested_not_conforming(
    llama_bin: Path, tmp_path: Path
) -> None:
    # The picoGPT-style adapter runs GPT-2 only: on a Llama checkpoint nothing can run. Three properties of
    # three kinds (the oracle's, a cache's, a model's own law) show it; each property refuses alike.
    report = run_suite("tests.adapters.picogpt:build", tmp_path, "--checkpoint", str(llama_bin), "-k",
                       "logits_agree or decoding_in_chunks or same_input", profile="checkpoint")  # fmt: skip
    assert {r.outcome for r in report.results} == {"skip"} and len(report.results) == 3, report.results
    assert _verdict(report, "tests.adapters.picogpt:build") == "untested"


def test_verifier_checks_own_option_names_the_checkpoint_in_pytests_header_and_the_report(
    gpt2_dir: Path, tmp_path: Path
) -> None:
    done = run(ROOT, "-m", "verifier", "check", "--model", "numpy", "--checkpoint", str(gpt2_dir), "--reports",
               str(tmp_path), "--hypothesis-profile", "checkpoint", "--", "-k", "logits_agree",
               env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 0, done
    named = f"{gpt2_dir}, sha256 {checkpoint_sha256(gpt2_dir)}"
    assert f"checkpoint: {named}; gpt2, d_model 16, 2 layers" in (tmp_path / "pytest.log").read_text()  # pytest's
    assert re.search(rf"^checkpoint +{re.escape(named)}$", done.stdout, re.MULTILINE), done
    assert "numpy: conforms (1 property run: 1 pass, 0 fail; 0 skip; 3 examples)" in done.stdout, done


def test_a_checkpoint_that_names_nothing_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    done = run(ROOT, "-m", "pytest", "properties", "-p", "no:cacheprovider", "--model", "numpy",
               "--checkpoint", str(missing), env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 4, done
    assert f"--checkpoint {missing}:" in done.stderr, done
