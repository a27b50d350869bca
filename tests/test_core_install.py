"""The product as a user without torch gets it: a fresh venv, a plain (non-editable) install of a copy
of this tree with no `../shared` beside it and without the `transformers` extra, and a NumPy model
package in the user's own directory. Everything the README shows first works there; what needs the
extra says so. Slow: it builds the wheel and installs the core's dependencies (from pip's cache or
package index)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

_NOT_COPIED = (".venv", ".git", "build", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache", ".tox",
               ".mypy_cache", ".ruff_cache", "reports")  # fmt: skip


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with `venv/` (lm-verifier installed from a copy of this tree, no extra) and
    `userproj/` (the user's repository: `mymodel/gpt.py`, examples/numpy_gpt2.py)."""
    place = tmp_path_factory.mktemp("core-install")
    copy = place / "lm-verifier"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*_NOT_COPIED))
    subprocess.run([sys.executable, "-m", "venv", str(place / "venv")], check=True)
    pip = [str(place / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(copy / "constraints.txt")]
    subprocess.run([*pip, str(copy)], check=True, timeout=1200)
    model = place / "userproj" / "mymodel"
    model.mkdir(parents=True)
    (model / "__init__.py").write_text("")
    shutil.copy(ROOT / "examples" / "numpy_gpt2.py", model / "gpt.py")
    (place / "hf-cache").mkdir()
    return place


def _run(place: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` from the venv's bin/, in the user's directory, with nothing of this checkout around."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERIFIER_", "PYTHON", "HYPOTHESIS_"))}
    env |= {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(place / "hf-cache")}
    program = str(place / "venv" / "bin" / command[0])
    done = subprocess.run([program, *command[1:]], cwd=place / "userproj", env=env, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert "Traceback" not in done.stdout + done.stderr, done
    return done


def test_the_venv_has_no_torch_and_the_package_has_no_shared_data_beside_it(place: Path) -> None:
    code = "import importlib.util as u, verifier; print(u.find_spec('torch'), u.find_spec('transformers'))"
    done = _run(place, "python", "-c", code + "; print(verifier.__file__)")
    found, where = done.stdout.splitlines()
    assert found == "None None" and "site-packages" in where, done
    assert not (Path(where).parents[2] / "shared").exists()


def test_verifier_check_and_plain_pytest_test_the_users_numpy_model(place: Path) -> None:
    check = _run(place, "verifier", "check", "--model", "mymodel.gpt:build")
    assert check.returncode == 0, check
    assert "mymodel.gpt:build: conforms (" in check.stdout
    pytest_run = _run(place, "pytest", "--pyargs", "verifier.properties", "--model", "mymodel.gpt:build")
    assert pytest_run.returncode == 0, pytest_run
    assert "mymodel.gpt:build: conforms (" in pytest_run.stdout
    assert not list((place / "venv").rglob(".pytest_cache")), "a cache was written inside the installed package"


def test_a_parallel_run_works_from_the_core_install(place: Path) -> None:
    """The documented `verifier check ... -- -n auto`: pytest-xdist comes with the core."""
    done = _run(place, "verifier", "check", "--model", "mymodel.gpt:build", "--", "-n", "2", "-k", "test_logits_agree")
    assert done.returncode == 0, done
    assert "mymodel.gpt:build: conforms (1 property run: 1 pass, 0 fail" in done.stdout, done.stdout[-2000:]
    assert "created: 2/2 workers" in (place / "userproj" / "reports" / "pytest.log").read_text()


USER_TESTS = """
import numpy as np
from mymodel.gpt import build
from verifier.testing import parametrize_with_checks


def shifted(config, weights):  # a bug: each position's logits are the previous position's
    model = build(config, weights)

    class Shifted:
        def logits(self, tokens):
            return np.roll(model.logits(tokens), 1, axis=-2)

    return Shifted()


@parametrize_with_checks(build)
def test_gpt(check):
    check()


@parametrize_with_checks(shifted)
def test_shifted(check):
    check()
"""
IN_PROCESS = """
from mymodel.gpt import build
from verifier.report.inprocess import check
report = check(build, pytest_args=["-q", "-p", "no:cacheprovider", "-k", "test_logits_agree"])
print(report.verdict, [(r.property, r.outcome) for r in report.results])
"""


def test_the_in_process_entry_points_run_the_installed_suite_on_the_users_model(place: Path) -> None:
    """`parametrize_with_checks` in the user's own test file (no file of the suite's clone around, and the
    user's strict markers), and `check` in the user's own script."""
    (place / "userproj" / "test_gpt.py").write_text(USER_TESTS)
    k = "test_the_same_input_gives_the_same_output or test_logits_agree or test_rope_is_the_identity_at_position_0"
    options = ("-p", "no:cacheprovider", "--strict-markers", "--tb=no", "-rfs", "-k", k)
    tests = _run(place, "pytest", "test_gpt.py", *options)
    assert tests.returncode == 1, tests
    assert "1 failed, 3 passed, 2 skipped" in tests.stdout, tests.stdout[-2000:]
    assert "FAILED test_gpt.py::test_shifted[test_logits_agree_with_the_oracle]" in tests.stdout
    assert ": model 'mymodel.gpt:build' runs no llama/mistral/qwen2/" in tests.stdout  # the RoPE property, on a GPT-2
    verdict = _run(place, "python", "-c", IN_PROCESS)
    assert verdict.returncode == 0, verdict
    ran = "[('test_agreement.py::test_logits_agree_with_the_oracle', 'pass')]"
    assert verdict.stdout.splitlines()[-1] == f"conforms {ran}", verdict


def test_a_run_of_the_built_in_models_leaves_transformers_out_and_conforms(place: Path) -> None:
    k = "test_presets_have_their_published_totals or (numpy and test_logits_agree) or (llama2c and test_greedy)"
    done = _run(place, "verifier", "check", "--", "-k", k)  # every model under test runs a property
    assert done.returncode == 0, done
    assert "numpy: conforms (" in done.stdout and "llama2c: conforms (" in done.stdout, done.stdout[-2000:]
    assert "transformers: not tested here (no verdict): this model needs torch and transformers" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("3 pass: conforms; reports written: ")


def test_the_transformers_model_is_not_available_and_says_how_to_install_it(place: Path) -> None:
    models = _run(place, "verifier", "models", "--no-probe")
    assert models.returncode == 0 and "transformers  (built-in)\n  not available here (left out of runs): " in (
        models.stdout
    ), models
    named = _run(place, "verifier", "check", "--model", "transformers")
    assert named.returncode == 2, named
    assert "pip install 'lm-verifier[transformers]'" in named.stdout + named.stderr


def test_the_readmes_first_commands_work_without_the_extra(place: Path) -> None:
    gpt2 = _run(place, "verifier", "trace", "gpt2")
    assert gpt2.returncode == 0 and "tokens: [464, 3139, 286, 4881, 318]" in gpt2.stdout, gpt2
    stories = _run(place, "verifier", "trace", "llama2c-stories15M", "--text", "Once upon a time")
    assert stories.returncode == 0 and "tokens: [1, 9038, 2501, 263, 931]" in stories.stdout, stories
    audit = _run(place, "verifier", "audit", "--pad", "64")
    assert audit.returncode == 0, audit
    assert audit.stdout.rstrip().endswith(", 1 skipped"), audit.stdout[-300:]
    assert "the comparison with transformers needs torch and transformers" in audit.stdout
