"""What a newcomer meets first on the command line: each input gets a clear message, never a traceback."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verifier import __version__
from verifier.cli import main
from verifier.formats import save_checkpoint
from verifier.model.presets import preset
from verifier.model.weights import init_weights

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


_VALUES = st.one_of(
    st.sampled_from(["-1", "0", "1", "2", "1,2", "nope", "", "first", "all", "gpt2", "/etc/passwd", "-"]),
    st.text(max_size=12),
    st.integers(-(2**70), 2**70).map(str),
)
_OPTIONS = st.sampled_from(["--tokens", "--text", "--pad", "--layers", "--seed", "--tokenizer", "--json", "--list"])


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    command=st.sampled_from(["trace", "params", "inspect"]),
    options=st.lists(st.tuples(_OPTIONS, _VALUES), max_size=3),
)
def test_no_argument_values_give_a_traceback(
    command: str, options: list[tuple[str, str]], tiny_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A tiny config.json keeps each trace fast; the options and their values are arbitrary.
    argv = [command, str(tiny_config)] + [part for option in options for part in option]
    assert _exit_status(argv) in (0, 1, 2)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err


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
    assert "numpy  (built-in)\n  gpt2: logits, " in out and "  llama-gqa: logits, " in out, out
    assert "transformers  (built-in)\nllama2c  (built-in)" in out  # listed, not probed
    assert main(["models", "nope"]) == 2
    assert "verifier models: error: no model named 'nope'; the models are: numpy, " in capsys.readouterr().err
