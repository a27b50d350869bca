"""The llama2c adapter: what it declares, what it refuses and why, and its build under parallel workers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.command.text import RUN_C_2023
from verifier.plugin.contract import build_checked
from verifier.plugin.interface import Unsupported, capabilities
from verifier.plugin.llama2c import build as build_module
from verifier.plugin.registry import load_spec

MHA = preset("llama2c-stories260K").replace(n_kv_heads=8, n_layers=2)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (preset("gpt2").replace(n_layers=1, vocab_size=10, n_ctx=8), "Llama only, not the gpt2 family"),
        (preset("llama2c-stories260K"), r"no grouped-query attention \(n_kv_heads=4 < n_heads=8\)"),
        (MHA.replace(norm_eps=1e-6), "hard-codes RMSNorm eps 1e-05"),
    ],
    ids=["gpt2", "grouped-query", "norm eps"],
)
def test_configs_the_pinned_run_c_cannot_run_are_unsupported_with_the_reason(config, reason: str) -> None:
    with pytest.raises(Unsupported, match=reason):
        build_checked(load_spec("verifier.plugin.adapters.llama2c:build_pinned"), config, init_weights(config))


@pytest.mark.needs_cc
def test_the_model_declares_greedy_only_and_answers_through_the_contract(run_c: Path) -> None:
    spec = load_spec("verifier.plugin.adapters.llama2c:build_pinned")
    model = build_checked(spec, MHA, init_weights(MHA, scale=0.2))
    assert model.capabilities == frozenset({"greedy"}) == capabilities(model.model)
    out = model.greedy(np.array([5, 9, 9, 300]), 4)
    assert out.dtype == np.int64 and out.shape == (4,)


@pytest.mark.needs_cc
def test_prompts_beyond_its_limits_are_unsupported_or_refused(run_c: Path) -> None:
    model = build_checked(load_spec("verifier.plugin.adapters.llama2c:build_pinned"), MHA, init_weights(MHA))
    with pytest.raises(Unsupported, match="distinct token ids"):
        model.model.greedy(np.arange(len(RUN_C_2023.alphabet) + 2), 1)
    with pytest.raises(ValueError, match="more than n_ctx=512"):
        model.model.greedy(np.ones(510, dtype=np.int64), 4)


def test_without_a_compiler_it_is_unsupported_and_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(build_module.CACHE_ENV, str(tmp_path))  # nothing built yet
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(Unsupported, match="no C compiler found"):
        build_checked(load_spec("llama2c"), MHA, init_weights(MHA))


@pytest.mark.needs_cc
def test_without_the_sdist_it_is_unsupported_and_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(build_module.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip cannot reach any index: as offline
    with pytest.raises(build_module.Llama2cUnavailable, match="pip could not fetch it"):
        build_module.binary()


@pytest.mark.needs_cc
def test_parallel_workers_build_once(run_c: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(build_module.cache_dir() / build_module.SDIST_FILE, cache)  # no network
    log = tmp_path / "compiles.log"
    cc = tmp_path / "logging-cc"
    cc.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {build_module.compiler()} "$@"\n')
    cc.chmod(0o755)
    env = {**os.environ, build_module.CACHE_ENV: str(cache), "CC": str(cc)}
    code = "from verifier.plugin.llama2c import binary; print(binary())"
    root = Path(__file__).resolve().parents[2]
    workers = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=root, stdout=subprocess.PIPE, text=True)
               for _ in range(3)]  # fmt: skip
    paths = {w.communicate()[0].strip() for w in workers}
    assert all(w.returncode == 0 for w in workers)
    assert paths == {str(cache / "run-O3")}
    assert len(log.read_text().splitlines()) == 1, log.read_text()
