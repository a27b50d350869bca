"""docs/how-to/command.md's `verifier check --command "./run {model} -t 0 -n {steps} -i {prompt} -z {tokenizer}"`,
as written, from a fresh folder holding llama2.c's current run.c built as `./run`, with the RoPE theta
run.c hard-codes declared (`--rope-theta 10000`): it conforms. (Undeclared, it fails only where the
profile happens to draw another theta among its 20 examples: not asserted, that would be a flaky test.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.plugin.llama2c import Llama2cUnavailable, checkout

pytestmark = [pytest.mark.needs_cc, pytest.mark.slow]  # about 10 s a run

COMMAND = "./run {model} -t 0 -n {steps} -i {prompt} -z {tokenizer}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        built = checkout.program("run")
    except Llama2cUnavailable as e:
        pytest.skip(f"llama2.c's current run.c is unavailable: {e}")
    out = tmp_path_factory.mktemp("llama2c")
    shutil.copy2(built, out / "run")
    return out


def check(folder: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "verifier", "check", "--command", COMMAND, "--format", "llama2c-v0"]
    command += ["--gives", "greedy-text", *options, "--", "-p", "no:cacheprovider", "-k", "greedy"]
    return subprocess.run(command, capture_output=True, text=True, cwd=folder)


def test_run_c_declared_with_its_rope_theta_conforms(folder: Path) -> None:
    done = check(folder, "--rope-theta", "10000")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "\nrun: conforms (1 property run: 1 pass, 0 fail;" in done.stdout, done.stdout[-3000:]
