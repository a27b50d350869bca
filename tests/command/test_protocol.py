"""The command-line protocol: templates, formats, outputs read back, and every way a program can fail
named with its command line and stderr. The program is tests/command/program.py (see its docstring)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verifier.model.config import ModelConfig
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.command import Command, CommandFailed, CommandTemplateError
from verifier.plugin.contract import ContractViolation, build_checked
from verifier.plugin.interface import Unsupported
from verifier.plugin.registry import ModelSpec
from verifier.reference import NumpyModel

PROGRAM = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).with_name('program.py')))}"
LLAMA = preset("llama2c-stories260K").replace(vocab_size=23, n_ctx=16, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1)
LLAMA = LLAMA.replace(d_ff=12)
GPT2 = preset("gpt2").replace(vocab_size=19, n_ctx=16, d_model=8, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=12)
TOKENS = np.array([3, 1, 4, 1, 5])


def checked(template: str, gives: str, config: ModelConfig = LLAMA, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    command = Command.parse(f"{PROGRAM} {template}", "hf", gives, timeout_s)
    return build_checked(ModelSpec("program", command.build, "test"), config, init_weights(config, scale=0.3))


@pytest.mark.parametrize(
    ("template", "gives"),
    [("npy {model} {tokens} {out}", "logits-npy"), ("text {model} {tokens}", "logits-text")],
    ids=["npy", "text"],
)
@pytest.mark.parametrize("config", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_logits_for_every_position_are_read_back(template: str, gives: str, config: ModelConfig) -> None:
    model = checked(template, gives, config)
    expected = NumpyModel(config, init_weights(config, scale=0.3)).logits(TOKENS)
    np.testing.assert_allclose(model.logits(TOKENS), expected, rtol=1e-6, atol=1e-6)


def test_last_position_logits_are_gathered_one_prefix_at_a_time() -> None:
    model = checked("last-npy {model} {tokens} {out}", "last-logits-npy")
    expected = NumpyModel(LLAMA, init_weights(LLAMA, scale=0.3)).logits(TOKENS[:3])
    np.testing.assert_allclose(model.logits(TOKENS[:3]), expected, rtol=1e-6, atol=1e-6)


def test_greedy_ids_are_read_back() -> None:
    model = checked("greedy-ids {model} {tokens} {n_new}", "greedy-ids")
    reference = NumpyModel(LLAMA, init_weights(LLAMA, scale=0.3))
    ids = list(TOKENS)
    for _ in range(2):
        ids.append(int(np.argmax(reference.logits(np.array(ids))[-1])))
    assert model.greedy(TOKENS, 2).tolist() == ids[-2:]


@pytest.mark.parametrize(
    ("template", "gives", "problem"),
    [
        ("fail {model} {tokens}", "logits-text", r"exited with status 3; stderr: cannot open the model"),
        ("crash {model} {tokens}", "logits-text", r"crashed \(SIGSEGV\); stderr: about to crash"),
        ("hang {model} {tokens}", "logits-text", r"did not finish in 2 s"),
        ("words {model} {tokens}", "logits-text", r"malformed output for logits-text .*stdout is not numbers"),
        ("short-npy {model} {tokens} {out}", "logits-npy", r"expected \[5, 23\] values, found \[4, 23\]"),
        ("text {model} {tokens}", "logits-npy", r"it wrote no file .*logits.npy"),
    ],
    ids=["exit-status", "crash", "timeout", "not-numbers", "wrong-shape", "no-file"],
)
def test_a_failing_program_is_a_contract_violation_naming_the_command_and_stderr(
    template: str, gives: str, problem: str
) -> None:
    full = template + (" {out}" if gives.endswith("npy") and "{out}" not in template else "")
    model = checked(full, gives, timeout_s=2.0)
    with pytest.raises(ContractViolation, match=problem) as caught:
        model.logits(TOKENS)
    message = str(caught.value)
    assert "'no-exception'" in message and "logits(tokens int64 [5])" in message
    assert f"`{shlex.quote(sys.executable)} " in message  # the command line as run, placeholders filled in
    assert isinstance(caught.value.__cause__, CommandFailed)


@pytest.mark.parametrize(
    ("template", "format", "gives", "problem"),
    [
        ("./run {model} {tokens} {nope}", "hf", "logits-text", r"unknown placeholder \{nope\}; known: \{model\}"),
        ("./run {model} {tokens}", "onnx", "logits-text", r"unknown format 'onnx'; known: hf, llama2c-v0"),
        ("./run {model} {tokens}", "hf", "probs", r"unknown output kind 'probs'"),
        ("./run {tokens}", "hf", "logits-text", r"uses no \{model\}: the program needs it to find the model file$"),
        (
            "./run {model}",
            "hf",
            "logits-text",
            r"uses neither \{ids\} nor \{tokens\}: the program needs one of them to get the input token ids$",
        ),
        (
            "./run {model} {tokens}",
            "hf",
            "logits-npy",
            r"uses no \{out\}: with logits-npy the program writes its logits to the .npy file it names$",
        ),
        ("./run {model} {prompt} {n_new}", "hf", "greedy-text", r"needs a llama2.c format"),
        (
            "./run {model} {tokens}",
            "llama2c-v0",
            "greedy-ids",
            r"uses neither \{n_new\} nor \{steps\}: the program needs one of them to know how many tokens",
        ),
        ("./run '{model}", "hf", "logits-text", r"cannot be split into arguments"),
        ("./run {model {tokens}", "hf", "logits-text", r"literal brace"),
    ],
    ids=["placeholder", "format", "gives", "no-model", "no-tokens", "no-out", "text", "no-count", "quotes", "brace"],
)
def test_a_template_that_cannot_work_is_refused_before_anything_runs(
    template: str, format: str, gives: str, problem: str
) -> None:
    with pytest.raises(CommandTemplateError, match=problem):
        Command.parse(template, format, gives)


def test_a_config_the_format_cannot_hold_is_unsupported_with_the_reason() -> None:
    command = Command.parse(f"{PROGRAM} text {{model}} {{tokens}}", "llama2c-v1", "logits-text")
    with pytest.raises(Unsupported, match=r"llama2c-v1 format cannot hold this model: .*Llama models only"):
        command.build(GPT2, init_weights(GPT2))


def test_arguments_stay_whole_and_no_shell_runs(tmp_path: Path) -> None:
    text = "'./my run' --in={model} -i {prompt} -n {steps} $HOME;"
    template = Command.parse(text, "llama2c-v0", "greedy-text").template
    argv = template.render({"model": "/a b/model.bin", "prompt": "x; rm -rf /", "steps": "4"})
    assert argv == ["./my run", "--in=/a b/model.bin", "-i", "x; rm -rf /", "-n", "4", "$HOME;"]


@pytest.mark.parametrize("config", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_the_gguf_format_gives_the_program_a_gguf_file_of_the_model(config: ModelConfig) -> None:
    pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'lm-verifier[gguf]')")
    command = Command.parse(f"{PROGRAM} text {{model}} {{tokens}}", "gguf", "logits-text")
    spec = ModelSpec("program", command.build, "test")
    model = build_checked(spec, config, init_weights(config, scale=0.3))
    path = model.model.model_path
    assert path.name == "model.gguf" and path.read_bytes()[:4] == b"GGUF"
    expected = NumpyModel(config, init_weights(config, scale=0.3)).logits(TOKENS)
    np.testing.assert_allclose(model.logits(TOKENS), expected, rtol=1e-6, atol=1e-6)


def test_without_a_gguf_writer_the_gguf_format_is_unsupported_with_the_reason() -> None:
    try:
        import verifier.formats.gguf  # noqa: F401
    except ImportError:
        command = Command.parse(f"{PROGRAM} text {{model}} {{tokens}}", "gguf", "logits-text")
        with pytest.raises(Unsupported, match="no GGUF writer is available"):
            command.build(LLAMA, init_weights(LLAMA))
    else:
        pytest.skip("a GGUF writer is installed")


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (["--command", "./run {model} {tokens}"], "--command needs --command-format and --command-gives"),
        (["--command", "./run {model} {tokens}", "--command-gives", "logits-text"], "--command needs --command-format"),
        (["--command-format", "hf"], "--command-format needs --command"),
        (["--command-format", "hf", "--command-precision", "tf32"], "--command-format, --command-precision need"),
        (
            ["--command", "./run {tokens}", "--command-format", "hf", "--command-gives", "logits-text"],
            "uses no {model}",
        ),
    ],
    ids=["no-format", "no-format-only", "no-command", "no-command-two", "no-model"],
)
def test_pytest_options_that_cannot_work_are_a_usage_error(options: list[str], problem: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pytest", str(tmp_path), "-p", "no:cacheprovider", *options]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert problem in done.stderr


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (["--command", "./run {model} {tokens}"], "--command needs --format and --gives"),
        (["--command", "./run {model} {tokens}", "--format", "hf"], "--command needs --gives"),
        (["--format", "hf", "--timeout", "3"], "--format, --timeout need --command"),
        (["--families", "gpt2"], "--families needs --command"),
        (
            ["--command", "./run {model} {tokens}", "--format", "hf", "--gives", "logits-text", "--timeout", "0"],
            "--timeout must be a positive number of seconds, found 0",
        ),
    ],
    ids=["no-format", "no-gives", "no-command", "declaration-alone", "timeout"],
)
def test_check_options_that_cannot_work_name_the_options_of_check(
    options: list[str], problem: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "verifier", "check", *options], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == f"verifier check: error: {problem}\n"
