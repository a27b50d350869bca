"""examples/c_llama/llama.c, a Llama written in C for this project, plugged in through one command:
it conforms; built with -DBUG_ATTEND_AHEAD (each position sees the next) it fails, naming the property.
The command is docs/how-to/command.md's, as written (`./llama`), run from the fresh directory the program is
built in."""

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
    """The example compiled as its header says, each in a fresh directory: as written, and with the
    deliberate bug (named `llama` too, so that the documented command runs it as written)."""
    try:
        cc = compiler()
    except Llama2cUnavailable as e:
        pytest.skip(str(e))
    built = {}
    for name, flags in {"llama": [], "llama_bug": ["-DBUG_ATTEND_AHEAD"]}.items():
        out = tmp_path_factory.mktemp(name)
        subprocess.run([cc, "-O2", *flags, "-o", "llama", str(SOURCE), "-lm"], check=True, cwd=out)
        built[name] = out / "llama"
    return built


def check(program: Path, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    """The documented `verifier check --command "./llama {model} {tokens}" ...`, run from the program's directory."""
    command = [sys.executable, "-m", "verifier", "check", "--command", "./llama {model} {tokens}"]
    command += ["--format", "llama2c-v1", "--gives", "logits-text", "--", "-p", "no:cacheprovider", *pytest_args]
    return subprocess.run(command, capture_output=True, text=True, cwd=program.parent)


@pytest.mark.parametrize("config", [GQA, GQA.replace(tie_embeddings=True, n_kv_heads=8)], ids=["gqa", "tied-mha"])
def test_its_logits_equal_the_oracle(programs: dict[str, Path], config) -> None:  # type: ignore[no-untyped-def]
    weights = init_weights(config, seed=3, scale=0.2)
    command = Command.parse(f"{programs['llama']} {{model}} {{tokens}}", "llama2c-v1", "logits-text")
    model = command.build(config, weights)
    tokens = np.array([1, 200, 7, 7, 45, 300, 2, 9])
    ratio = tolerance.error_ratio(model.logits(tokens), NumpyModel(config, weights, np.float64).logits(tokens))
    assert ratio <= 1, f"error / tolerance {ratio:.3g}"


@pytest.mark.slow  # a `verifier check` of the compiled program: 3 to 4 s here
def test_the_bug_fails_the_causal_masking_property_by_name(programs: dict[str, Path]) -> None:
    done = check(programs["llama_bug"], "-k", "causal_masking")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    log = (programs["llama_bug"].parent / "reports" / "pytest.log").read_text()  # pytest's whole output
    assert "FAILED" in log and "[1] FAIL test_causal_masking.py::test_logits_before_an_edited_token" in done.stdout
    assert "model 'llama' (float32), logits at positions 0.." in log and "logits at positions 0.." in done.stdout


@pytest.mark.slow
def test_it_conforms_through_one_command(programs: dict[str, Path]) -> None:
    done = check(programs["llama"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "conforms" in done.stdout
