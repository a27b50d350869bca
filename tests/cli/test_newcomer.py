"""What a newcomer meets first on the command line: each input gets a clear message, never a traceback."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.plugin import broken
from verifier import __version__
from verifier.analysis import audit
from verifier.cli import main
from verifier.formats import save_checkpoint
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin import registry
from verifier.plugin.command import GIVES, Command, CommandTemplateError
from verifier.plugin.command.files import FORMATS
from verifier.plugin.probes import PROBE_KINDS
from verifier.plugin.registry import PluginError
from verifier.properties import models as properties_models
from verifier.report import suite

TINY = preset("gpt2").replace(n_layers=1, d_model=8, n_heads=2, n_kv_heads=2, d_ff=16, vocab_size=50257, n_ctx=16)


def _exit_status(argv: list[str]) -> int:
    """main's status, or the status argparse exits with."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


@pytest.mark.parametrize("command", [["trace", "gpt2", "--tokens", "1,2"], ["audit"]])
def test_a_negative_seed_is_a_usage_error(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_status([*command, "--seed", "-1"]) == 2
    assert "--seed: must be an integer in [0, 4294967295], not '-1'" in capsys.readouterr().err


def test_an_unknown_hypothesis_profile_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_status(["check", "--hypothesis-profile", "nope"]) == 2
    err = capsys.readouterr().err
    assert "argument --hypothesis-profile: invalid choice: 'nope'" in err and "thorough" in err, err


def test_a_text_file_is_not_a_checkpoint_in_any_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    assert main(["inspect", str(passwd)]) == 2
    err = capsys.readouterr().err
    assert "not a checkpoint in any format I read" in err and "n_heads" not in err, err


def test_a_five_byte_safetensors_file_is_reported_as_safetensors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"12345")
    assert main(["inspect", str(tmp_path / "model.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "model.safetensors: safetensors header: missing or malformed" in err and "llama2.c" not in err, err


def test_trace_help_shows_its_defaults_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_status(["trace", "--help"]) == 0
    out = capsys.readouterr().out
    assert "{'gpt2'" not in out and "The capital of France is" in out, out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_status(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"verifier {__version__}"


def test_saved_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        save_checkpoint(tmp_path / "model", TINY, init_weights(TINY))
    finally:
        os.umask(old)
    for name in ("config.json", "model.safetensors"):
        assert stat.S_IMODE((tmp_path / "model" / name).stat().st_mode) == 0o644, name


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny")
    save_checkpoint(directory, TINY, init_weights(TINY))
    return directory / "config.json"


@pytest.fixture(scope="module")
def odd_paths(tmp_path_factory: pytest.TempPathFactory, tiny_config: Path) -> list[str]:
    """Paths a newcomer may give by mistake: empty, text and JSON files, a directory, a device."""
    odd = tmp_path_factory.mktemp("odd")
    (odd / "empty.bin").write_bytes(b"")
    (odd / "empty.safetensors").write_bytes(b"")
    (odd / "notes.txt").write_text("not a model\n")
    (odd / "other.json").write_text('{"model_type": "gpt2"')
    (odd / "folder.safetensors").mkdir()
    return [str(tiny_config), str(tiny_config.parent), *(str(p) for p in sorted(odd.iterdir())), "/dev/null"]


class _Reached(Exception):
    """The command got past its argument checks to its long part, which this test does not run."""


def _reached(*args: object, **kwargs: object) -> int:
    raise _Reached


# What each subcommand takes; values are arbitrary. `check` stops before pytest runs, `audit` before
# it audits: their early checks are what is fuzzed here (the model and command checks: below).
_SUBCOMMAND_OPTIONS = {
    "trace": ["--tokens", "--text", "--pad", "--layers", "--seed", "--tokenizer", "--json"],
    "params": ["--list", "--json"],
    "inspect": ["--json"],
    "audit": ["--tokenizer", "--pad", "--seed", "--gpt2", "--stories15m", "--json"],
    "check": ["--model", "--command", "--format", "--gives", "--timeout", "--suite", "--reports", "--plot",
              "--hypothesis-profile", "--"],
    "models": ["--no-probe"],
}  # fmt: skip
_WORDS = ["-1", "0", "1", "2", "1,2", "nan", "inf", "nope", "", "first", "all", "-", ".", "..", "/etc/passwd",
          "/dev/null", "numpy", "transformers", "hf", "llama2c-v0", "logits-npy", "greedy-text", "ci", "x {model}",
          "{nope}", "llama2c-stories260K"]  # fmt: skip
# No absolute paths beyond those above: `--reports /x` would make /x.
_TEXT = st.text(max_size=12).filter(lambda t: not t.startswith(("/", "~")))


@st.composite
def _argv(draw: st.DrawFn, paths: list[str]) -> list[str]:
    command = draw(st.sampled_from(list(_SUBCOMMAND_OPTIONS)), label="command")
    value = st.one_of(st.sampled_from(_WORDS + paths), _TEXT, st.integers(-(2**70), 2**70).map(str))
    options = draw(st.lists(st.tuples(st.sampled_from(_SUBCOMMAND_OPTIONS[command]), value), max_size=3))
    argv = [command] + [part for option in options for part in option]
    if command in ("trace", "params", "inspect"):
        argv.insert(1, draw(st.one_of(st.sampled_from(paths), value), label="model"))
    if command == "models":  # probing builds models (llama2c's run.c is compiled): probe only some, by name
        names = draw(st.lists(st.sampled_from(["numpy", "transformers", "nope", ""]) | _TEXT, max_size=2))
        argv += names or ["--no-probe"]
    return argv


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_no_argument_values_of_any_subcommand_give_a_traceback(
    data: st.DataObject,
    odd_paths: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # `check --reports DIR` makes DIR
    monkeypatch.setattr(suite, "run", _reached)
    monkeypatch.setattr(audit, "audit", _reached)
    argv = data.draw(_argv(odd_paths), label="argv")
    with contextlib.suppress(_Reached):
        assert _exit_status(argv) in (0, 1, 2)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err


_SPECS = st.one_of(
    st.sampled_from(["numpy", "transformers", "llama2c", "nope", ":", "a:", ":b", "os:getcwd", "os:sep", "os.path:",
                     "examples.numpy_gpt2:build", "examples.numpy_gpt2:np", "no_such_module_xyz:build", ""]),
    _TEXT,
)  # fmt: skip


@settings(max_examples=100)
@given(
    models=st.lists(_SPECS, max_size=2),
    template=st.sampled_from(["", "x", "x {model}", "{nope}", "x {model} {out}", "'unclosed", "x {", "x }"]) | _TEXT,
    file_format=st.sampled_from([*FORMATS, "nope", ""]),
    gives=st.sampled_from([*GIVES, "nope", ""]),
    timeout=st.floats(allow_nan=True, allow_infinity=True),
)
def test_any_model_or_command_option_is_a_model_or_a_usage_error(
    models: list[str], template: str, file_format: str, gives: str, timeout: float
) -> None:
    """What the fixtures plugin checks before a run (`check --model`, `--command`): a model spec or
    command template that names nothing is a PluginError or CommandTemplateError, pytest's usage error."""
    with contextlib.suppress(PluginError):
        registry.select(models, {})
    with contextlib.suppress(CommandTemplateError):
        Command.parse(template, file_format, gives, timeout)


def test_params_of_nothing_names_the_known_models_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["params", "nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "'nonexistent' is not a preset (gpt2," in err and "nor a known model (" in err and "llama-2-7b" in err, err


def test_models_lists_the_registered_models_with_their_origin_and_probes_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["models", "--no-probe"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert {"numpy  (built-in)", "transformers  (built-in)", "llama2c  (built-in)"} <= set(lines), lines
    assert main(["models", "numpy"]) == 0
    out = capsys.readouterr().out
    every_family = ", ".join(PROBE_KINDS)
    assert f"numpy  (built-in)\n  {every_family}: logits, decode, trace, attention_mask; precision float32" in out, out
    assert "llama2c" not in out  # named: the others are neither listed nor probed
    assert main(["models", "nope"]) == 2
    assert "verifier models: error: no model named 'nope'; the models are: numpy, " in capsys.readouterr().err


def test_models_says_which_model_cannot_run_here_and_why_without_probing_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    registry.register("needs-x", broken.factory_raises, origin="built-in", unavailable="it needs x (pip install x)")
    assert main(["models", "needs-x"]) == 0
    out = capsys.readouterr().out
    assert "needs-x  (built-in)\n  not available here (left out of runs): it needs x (pip install x)\n" in out, out
    assert "broke the contract" not in out  # its factory was not called


def test_a_model_that_cannot_be_built_is_not_said_to_have_logits() -> None:
    # The case: `--model os:getcwd` (a callable that is no factory) had skip notes saying "it has logits".
    reason = properties_models.skip_reason(registry.load_spec("os:getcwd"), ("trace",), None)
    assert reason is not None and "it has logits" not in reason, reason
    assert reason.startswith("model 'os:getcwd' could not be built on the gpt2 probe, so whether it has 'trace' is")
    assert "posix.getcwd() takes no arguments" in reason
    logits_only = registry.load_spec("examples.numpy_gpt2:build")
    reason = properties_models.skip_reason(logits_only, ("trace",), "gpt2")
    assert reason is not None and reason.startswith("model 'examples.numpy_gpt2:build' has no 'trace' capability (")
    assert reason.endswith("(it has logits)"), reason


def test_params_of_a_checkpoint_with_truncated_weights_is_an_error_as_for_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoint(tmp_path / "model", TINY, init_weights(TINY))
    weights = tmp_path / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    for spec in (tmp_path / "model", weights):
        assert main(["params", str(spec)]) == 2
        assert "model.safetensors: safetensors data: tensors do not tile the data: the file is truncated" in (
            capsys.readouterr().err
        )
    assert main(["params", str(tmp_path / "model" / "config.json")]) == 0  # a config named alone is counted


def test_the_command_and_the_package_describe_every_family_not_two(capsys: pytest.CaptureFixture[str]) -> None:
    # `verifier --help`, the package's description and `verifier`'s docstring said "GPT-2 and Llama".
    import tomllib

    import verifier
    from verifier.cli import build_parser
    from verifier.model.config import FAMILIES

    build_parser().print_help()
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(family in help_text for family in FAMILIES), help_text
    described = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["description"]
    for text in (help_text, described, verifier.__doc__ or ""):
        assert "GPT-2 and Llama" not in text and "transformer language models" in text, text


def test_kl_help_names_the_tokenizer_each_family_uses(capsys: pytest.CaptureFixture[str]) -> None:
    # It said "the family's real tokenizer", though every family but GPT-2 uses Llama 2's.
    from verifier.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["kl", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "GPT-2's BPE for gpt2, llama2.c's Llama 2 vocabulary for the other families" in help_text


def test_check_help_says_a_model_can_be_named_on_one_family(capsys: pytest.CaptureFixture[str]) -> None:
    # `MODEL@FAMILY` was documented on the engines page alone (issue 47).
    from verifier.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", "--help"])
    assert "NAME@FAMILY to test it on that family only" in " ".join(capsys.readouterr().out.split())
