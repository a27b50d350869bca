"""A --command program as the user names it: a relative path found from where they ran, a bare name on
PATH, one that cannot start a usage error before any property; what it declares (options, and the file
beside it), and the exit status by which it declines an input. The programs are tests/command/program.py
behind a small executable script, as a user's own program would be."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verifier.model.config import FAMILIES
from verifier.model.presets import gpt2_d_ff
from verifier.model.weights import init_weights
from verifier.plugin.command import Command, CommandTemplateError
from verifier.plugin.command.declarations import DeclarationError
from verifier.plugin.command.options import CHECK_OPTIONS, PYTEST_OPTIONS, from_options
from verifier.plugin.contract import build_checked
from verifier.plugin.interface import Constraints, Unsupported
from verifier.plugin.registry import ModelSpec
from verifier.properties import models
from verifier.reference import NumpyModel

from .test_protocol import GPT2, LLAMA, TOKENS

PROGRAM = Path(__file__).with_name("program.py")
# A test file for a pytest run from a fresh directory: the --command program's logits are the oracle's.
TEST_FILE = """
import numpy as np
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.contract import build_checked
from verifier.reference import NumpyModel

def test_the_program_runs(model_spec):
    config = preset("gpt2").replace(vocab_size=19, n_ctx=16, d_model=8, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=12)
    weights = init_weights(config, scale=0.3)
    tokens = np.array([3, 1, 4])
    found = build_checked(model_spec, config, weights).logits(tokens)
    np.testing.assert_allclose(found, NumpyModel(config, weights).logits(tokens), rtol=1e-6, atol=1e-6)
"""


def program(directory: Path, name: str = "prog", mode: int = 0o755) -> Path:
    """An executable script `directory/name` that runs tests/command/program.py with its arguments."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(
        f"#!{sys.executable}\nimport os, sys\n"
        f"os.execv(sys.executable, [sys.executable, {str(PROGRAM)!r}, *sys.argv[1:]])\n"
    )
    path.chmod(mode)
    return path


def run(cwd: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`verifier check ...` or `pytest ...` (by the first argument) run from `cwd`."""
    tool = ["-m", "verifier", "check"] if arguments[0] == "check" else ["-m", "pytest", "-p", "no:cacheprovider"]
    return subprocess.run([sys.executable, *tool, *arguments[1:]], capture_output=True, text=True, cwd=cwd)


def options(names: dict[str, str], template: str, *more: str) -> list[str]:
    found = [names["command"], template, names["format"], "hf", names["gives"], "logits-text"]
    return [*found, *(f"{names[key]}={value}" for key, value in (m.split("=", 1) for m in more))]


# -- where the program is found ---------------------------------------------------------------------------


def test_a_relative_program_runs_from_where_pytest_was_started(tmp_path: Path) -> None:
    program(tmp_path / "bin")
    (tmp_path / "test_program.py").write_text(TEST_FILE)
    done = run(tmp_path, "pytest", "test_program.py", *options(PYTEST_OPTIONS, "bin/prog text {model} {tokens}"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


def test_a_relative_program_is_found_from_the_directory_given_not_the_run_s(tmp_path: Path) -> None:
    program(tmp_path)
    command = Command.parse("./prog text {model} {tokens}", "hf", "logits-text", directory=tmp_path)
    assert command.locate() == tmp_path / "prog"
    model = build_checked(ModelSpec("prog", command, "test"), GPT2, init_weights(GPT2, scale=0.3))
    assert model.model.dir != tmp_path  # the program runs in the model's own directory
    expected = NumpyModel(GPT2, init_weights(GPT2, scale=0.3)).logits(TOKENS)
    np.testing.assert_allclose(model.logits(TOKENS), expected, rtol=1e-6, atol=1e-6)


def test_a_bare_name_is_looked_up_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program(tmp_path / "bin", "my-model")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    command = Command.parse("my-model text {model} {tokens}", "hf", "logits-text", directory=tmp_path / "elsewhere")
    assert command.locate() == tmp_path / "bin" / "my-model"
    np.testing.assert_allclose(
        command.build(GPT2, init_weights(GPT2, scale=0.3)).logits(TOKENS),
        NumpyModel(GPT2, init_weights(GPT2, scale=0.3)).logits(TOKENS),
        rtol=1e-6,
        atol=1e-6,
    )


@pytest.mark.parametrize(
    ("template", "make", "problem"),
    [
        ("./nope {model} {tokens}", None, "program './nope' not found: there is no {dir}/nope (a relative path is "),
        ("./prog {model} {tokens}", 0o644, "program './prog' cannot be run: {dir}/prog is not executable"),
        ("./bin {model} {tokens}", "dir", "program './bin' is a directory: {dir}/bin"),
        ("no-such-program-here {model} {tokens}", None, "program 'no-such-program-here' not found on PATH"),
    ],
    ids=["missing", "not-executable", "directory", "not-on-path"],
)
@pytest.mark.parametrize("front", ["pytest", "check"])
def test_a_program_that_cannot_start_is_a_usage_error_naming_the_path(
    tmp_path: Path, template: str, make: int | str | None, problem: str, front: str
) -> None:
    if make == "dir":
        (tmp_path / "bin").mkdir()
    elif make is not None:
        program(tmp_path, "prog", mode=int(make))
    names = PYTEST_OPTIONS if front == "pytest" else CHECK_OPTIONS
    done = run(tmp_path, front, *options(names, template))
    assert done.returncode == (4 if front == "pytest" else 2), done.stdout[-2000:] + done.stderr[-2000:]
    assert problem.format(dir=tmp_path) in done.stderr
    assert "passed" not in done.stdout and "failed" not in done.stdout  # before any property


def test_a_placeholder_cannot_be_the_program(tmp_path: Path) -> None:
    with pytest.raises(CommandTemplateError, match=r"the program '\{dir\}/run' holds a placeholder"):
        Command.parse("{dir}/run {model} {tokens}", "hf", "logits-text")


# -- what the program declares ----------------------------------------------------------------------------


def _declared(tmp_path: Path, *more: str, file: str | None = None) -> Command:
    prog = program(tmp_path)
    if file is not None:
        (tmp_path / "prog.verifier.toml").write_text(file)
    values: dict[str, object] = {"command": "./prog text {model} {tokens}", "format": "hf", "gives": "logits-text"}
    values.update(m.split("=", 1) for m in more)
    command = from_options(values, PYTEST_OPTIONS, tmp_path)
    assert command is not None and command.locate() == prog
    return command


def test_a_program_declares_by_options_as_a_factory_does(tmp_path: Path) -> None:
    command = _declared(
        tmp_path, "families=gpt2", "d_ff=gpt2", "tie_embeddings=true", "norm_eps=1e-5", "max_n_ctx=64", "precision=tf32"
    )
    expected = Constraints(families=("gpt2",), d_ff=gpt2_d_ff, tie_embeddings=True, norm_eps=1e-5, max_n_ctx=64)
    assert command.constraints == expected and command.precision == "tf32"
    assert ModelSpec("prog", command, "test").constraints == (expected,)


def test_a_program_declares_in_the_file_beside_it_and_options_win(tmp_path: Path) -> None:
    file = 'families = ["llama"]\nd_ff = "llama2c:256"\ngrouped_query = false\nrope_theta = 500000.0\n'
    command = _declared(tmp_path, "families=gpt2,llama", file=file + 'precision = "bfloat16"\n')
    assert command.constraints is not None and command.precision == "bfloat16"
    assert command.constraints.families == ("gpt2", "llama")  # the option
    assert command.constraints.describe() == (
        "gpt2/llama; d_ff = llama2c_hidden_dim(d_model, multiple_of=256); rope_theta=500000.0; "
        "no grouped-query attention"
    )


def test_a_program_declares_the_switches_it_runs(tmp_path: Path) -> None:
    plain = _declared(tmp_path, "families=llama,mistral", "switches=none").constraints
    assert plain == Constraints(families=("llama", "mistral"), switches=())
    assert plain.describe() == "llama/mistral; no switches"
    windowed = _declared(tmp_path, file='families = ["mistral"]\nswitches = ["sliding_window"]\n').constraints
    assert windowed == Constraints(families=("mistral",), switches=("sliding_window",))
    found = models.support(ModelSpec("plain", _declared(tmp_path, "families=llama", "switches=none"), "test"))
    assert found.refused["llama3"] == "not among its declared constraints (llama; no switches)"


def test_a_declaration_file_named_by_the_option_is_read(tmp_path: Path) -> None:
    (tmp_path / "decl.toml").write_text("max_n_ctx = 8\n")
    assert _declared(tmp_path, "declarations=decl.toml").constraints == Constraints(max_n_ctx=8)


@pytest.mark.parametrize(
    ("more", "file", "problem"),
    [
        (
            ["families=gpt3"],
            None,
            f"--command-families: expected one or more of {', '.join(FAMILIES)}, found 'gpt3'",
        ),
        (["switches=window"], None, "--command-switches: expected none, or some of head_dim, rope_scaling, "),
        (["d_ff=4x"], None, "--command-d-ff: expected gpt2, llama2c or llama2c:M (M a positive whole number)"),
        (["tie_embeddings=yes"], None, "--command-tie-embeddings: expected true or false, found 'yes'"),
        (["norm_eps=-1"], None, "--command-norm-eps: expected a positive number, found '-1'"),
        (["max_n_ctx=0"], None, "--command-max-n-ctx: expected a positive whole number of positions, found '0'"),
        (["precision=int4"], None, "--command-precision: expected one of float32, tf32"),
        ([], "familes = ['gpt2']\n", "prog.verifier.toml: unknown key 'familes'; known: families, d_ff,"),
        ([], "rope_theta = 'big'\n", "rope_theta in {dir}/prog.verifier.toml: expected a positive number, found 'big'"),
        ([], "grouped_query = 1\n", "grouped_query in {dir}/prog.verifier.toml: expected true or false, found 1"),
        ([], "families = gpt2\n", "prog.verifier.toml: not a TOML file: "),
        (["declarations=none.toml"], None, "--command-declarations none.toml: there is no file {dir}/none.toml"),
    ],
    ids=[
        "family",
        "switch",
        "d_ff",
        "bool",
        "eps",
        "n_ctx",
        "precision",
        "unknown-key",
        "file-value",
        "file-bool",
        "toml",
        "no-file",
    ],
)
def test_a_declaration_that_cannot_be_read_is_one_line_naming_where(
    tmp_path: Path, more: list[str], file: str | None, problem: str
) -> None:
    with pytest.raises(DeclarationError) as caught:
        _declared(tmp_path, *more, file=file)
    assert problem.format(dir=tmp_path) in str(caught.value) and "\n" not in str(caught.value)


def test_bad_declarations_are_usage_errors_in_the_options_typed(tmp_path: Path) -> None:
    program(tmp_path)
    for front, names, status in [("pytest", PYTEST_OPTIONS, 4), ("check", CHECK_OPTIONS, 2)]:
        done = run(tmp_path, front, *options(names, "./prog text {model} {tokens}", "families=llama,gpt3"))
        assert done.returncode == status, done.stdout[-2000:] + done.stderr[-2000:]
        assert f"{names['families']}: expected one or more of gpt2, llama, mistral," in done.stderr
        assert "found 'llama,gpt3'" in done.stderr


def test_the_probes_of_a_program_declared_gpt2_only_build_no_llama(tmp_path: Path) -> None:
    command = _declared(tmp_path, "families=gpt2")
    found = models.support(ModelSpec("gpt2-only", command, "test"))
    assert set(found.capabilities) == {"gpt2"}
    assert found.refused["llama"] == "not among its declared constraints (gpt2)"


# -- declining an input -----------------------------------------------------------------------------------


def test_exit_status_77_declines_the_input_with_the_last_line_of_stderr(tmp_path: Path) -> None:
    command = _declared(tmp_path)
    weights = init_weights(LLAMA, scale=0.3)
    model = build_checked(ModelSpec("prog", command, "test"), LLAMA, weights)
    declining = Command.parse(f"{tmp_path / 'prog'} declines-long {{model}} {{tokens}}", "hf", "logits-text")
    short = declining.build(LLAMA, weights)
    np.testing.assert_allclose(short.logits(TOKENS[:3]), model.logits(TOKENS[:3]), rtol=1e-6, atol=1e-6)
    with pytest.raises(Unsupported) as caught:
        short.logits(TOKENS)
    assert str(caught.value) == "prog declined the input (exit status 77): this program takes at most 3 tokens"


def _suite(tmp_path: Path, mode: str, *more: str) -> subprocess.CompletedProcess[str]:
    """`verifier check` of `prog MODE` on the causal-masking properties, with the dev profile (8 examples)."""
    program(tmp_path)
    arguments = ["check", *options(CHECK_OPTIONS, f"./prog {mode} {{model}} {{tokens}}", *more)]
    arguments += ["--hypothesis-profile", "dev", "--reports", "reports", "--", "-k", "causal_masking"]
    return run(tmp_path, *arguments)


@pytest.mark.slow
@pytest.mark.parametrize("by", ["option", "file"])
def test_a_program_declared_gpt2_only_is_given_gpt2_configs_only(tmp_path: Path, by: str) -> None:
    if by == "file":
        (tmp_path / "prog.verifier.toml").write_text('families = ["gpt2"]\n')
    done = _suite(tmp_path, "gpt2-text", *(["families=gpt2"] if by == "option" else []))  # a Llama fails it
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "conforms" in done.stdout


@pytest.mark.slow
def test_a_program_declining_llama_inputs_is_skipped_there_and_passes_on_gpt2(tmp_path: Path) -> None:
    done = _suite(tmp_path, "declines-llama")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "conforms" in done.stdout


# Two properties on a model that declines odd inputs (a Python stand-in for a program's exit status 77),
# run under the suite's own conftest.py, whose hook turns a declined input into a rejected example.
PROPERTIES = """
from hypothesis import given, settings, strategies as st
from verifier import Unsupported
from verifier.properties import checks

def _run(x):
    checks.record_example()
    if x % 2:
        raise Unsupported("odd inputs are not mine")
    checks.compared()

@settings(max_examples=10, database=None)
@given(st.integers(0, 9))
def test_some_declined(model_spec, x):
    _run(x)

@settings(max_examples=10, database=None)
@given(st.integers(0, 4).map(lambda x: 2 * x + 1))
def test_all_declined(model_spec, x):
    _run(x)

def test_declined_without_hypothesis(model_spec):
    _run(1)
"""


def test_declined_inputs_are_rejected_and_a_property_declined_throughout_is_a_skip_saying_why(tmp_path: Path) -> None:
    properties = tmp_path / "properties"
    properties.mkdir()
    (properties / "conftest.py").write_text((Path(__file__).parents[2] / "properties" / "conftest.py").read_text())
    (properties / "test_declining.py").write_text(PROPERTIES)
    done = run(tmp_path, "pytest", "properties", "--model", "numpy", "-rs", "-q")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed, 2 skipped" in done.stdout
    assert done.stdout.count("refused: odd inputs are not mine") == 2 and "found nothing to check" not in done.stdout


DECLINING = """
from verifier import Unsupported

class Declining:
    def logits(self, tokens):
        raise Unsupported("not this one, thanks")

def build(config, weights):
    return Declining()
"""


@pytest.mark.slow  # about 10 s, most of it starting the suite
def test_a_model_declining_every_input_is_untested_never_conforming(tmp_path: Path) -> None:
    """The path a program's exit status 77 takes, from a Python model (no program runs)."""
    (tmp_path / "declining.py").write_text(DECLINING)
    arguments = ["check", "--model", "declining:build", "--hypothesis-profile", "dev", "--reports", "reports"]
    done = run(tmp_path, *arguments, "--", "-k", "test_logits_before_an_edited_token_do_not_change")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "untested" in done.stdout and "conforms" not in done.stdout.replace("not conforming", "")
    assert "compared nothing in " in done.stdout and "refused: not this one, thanks" in done.stdout


@pytest.mark.slow
def test_a_program_declining_every_input_is_untested_never_conforming(tmp_path: Path) -> None:
    # Python without site-packages, importing nothing: each of the many declined runs costs little.
    declines = tmp_path / "declines"
    body = "import sys\nsys.stderr.write('reading the model\\nnot this one, thanks\\n')\nsys.exit(77)\n"
    declines.write_text(f"#!{sys.executable} -S\n{body}")
    declines.chmod(0o755)
    arguments = ["check", *options(CHECK_OPTIONS, "./declines {model} {tokens}"), "--hypothesis-profile", "dev"]
    done = run(tmp_path, *arguments, "--", "-k", "test_logits_before_an_edited_token_do_not_change")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "untested" in done.stdout and "conforms" not in done.stdout.replace("not conforming", "")
    assert "refused: declines declined the input (exit status 77): not this one, thanks" in done.stdout
