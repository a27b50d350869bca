"""`--checkpoint` names a checkpoint but the properties do not run on fixed weights yet: a run that
names one stops with a usage error saying so, rather than reporting its own drawn configs under the
checkpoint's name. A checkpoint that names nothing readable is a usage error naming the fault."""

from __future__ import annotations

from pathlib import Path

from tests.plugin.project import ROOT, run
from verifier.formats import save_checkpoint
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights

TINY = ModelConfig("gpt2", 11, 8, 8, 1, 2, 2, 32, norm_eps=1e-5, tie_embeddings=True)


def test_a_readable_checkpoint_stops_the_run_saying_the_properties_cannot_use_it_yet(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "model", TINY, init_weights(TINY))
    done = run(ROOT, "-m", "pytest", "properties", "-p", "no:cacheprovider", "--model", "numpy",
               "--checkpoint", str(tmp_path / "model"), env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 4, done  # pytest's usage error: nothing ran, nothing was reported as tested
    assert "gpt2, 1 layers), but running the properties on a fixed checkpoint is not available yet" in done.stderr
    assert "passed" not in done.stdout, done


def test_a_checkpoint_that_names_nothing_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    done = run(ROOT, "-m", "pytest", "properties", "-p", "no:cacheprovider", "--model", "numpy",
               "--checkpoint", str(missing), env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 4, done
    assert f"--checkpoint {missing}:" in done.stderr, done
