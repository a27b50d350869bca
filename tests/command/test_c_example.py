"""examples/c_llama/llama.c, a Llama written in C for this project, plugged in through one command:
it conforms; built with -DBUG_ATTEND_AHEAD (each position sees the next) it fails, naming the property."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verifier.analysis import tolerance
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.command import Command
from verifier.plugin.llama2c.build import Llama2cUnavailable, compiler
from verifier.reference import NumpyModel

pytestmark = pytest.mark.needs_cc

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "examples" / "c_llama" / "llama.c"
GQA = preset("llama2c-stories260K").replace(n_layers=2, n_ctx=32)


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example compiled as its header says, and with the deliberate bug."""
    try:
        cc = compiler()
    except Llama2cUnavailable as e:
        pytest.skip(str(e))
    out = tmp_path_factory.mktemp("c_llama")
    built = {}
    for name, flags in {"llama": [], "llama_bug": ["-DBUG_ATTEND_AHEAD"]}.items():
        subprocess.run([cc, "-O2", *flags, "-o", str(out / name), str(SOURCE), "-lm"], check=True)
        built[name] = out / name
    return built


def check(program: Path, reports: Path, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "verifier", "check", "--command", f"{program} {{model}} {{tokens}}"]
    command += ["--format", "llama2c-v1", "--gives", "logits-text", "--reports", str(reports)]
    command += ["--suite", str(ROOT / "properties"), "--", "-p", "no:cacheprovider", *pytest_args]
    return subprocess.run(command, capture_output=True, text=True, cwd=reports.parent)


@pytest.mark.parametrize("config", [GQA, GQA.replace(tie_embeddings=True, n_kv_heads=8)], ids=["gqa", "tied-mha"])
def test_its_logits_equal_the_oracle(programs: dict[str, Path], config) -> None:  # type: ignore[no-untyped-def]
    weights = init_weights(config, seed=3, scale=0.2)
    command = Command.parse(f"{programs['llama']} {{model}} {{tokens}}", "llama2c-v1", "logits-text")
    model = command.build(config, weights)
    tokens = np.array([1, 200, 7, 7, 45, 300, 2, 9])
    ratio = tolerance.error_ratio(model.logits(tokens), NumpyModel(config, weights, np.float64).logits(tokens))
    assert ratio <= 1, f"error / tolerance {ratio:.3g}"


def test_the_bug_fails_the_causal_masking_property_by_name(programs: dict[str, Path], tmp_path: Path) -> None:
    done = check(programs["llama_bug"], tmp_path / "reports", "-k", "causal_masking")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    log = (tmp_path / "reports" / "pytest.log").read_text()  # pytest's whole output; the terminal has the paragraph
    assert "FAILED" in log and "[1] FAIL test_causal_masking.py::test_logits_before_an_edited_token" in done.stdout
    assert "model 'llama_bug' (float32), logits at positions 0.." in log and "logits at positions 0.." in done.stdout


@pytest.mark.slow
def test_it_conforms_through_one_command(programs: dict[str, Path], tmp_path: Path) -> None:
    done = check(programs["llama"], tmp_path / "reports")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "conforms" in done.stdout
