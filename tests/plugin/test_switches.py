"""Switches named, not discovered by crashes (issue 47): a model that does not say which switches of its
families it runs is built on each family's probe config with one switch on at a time, and on each kind's,
and its logits compared with the oracle's; what it raises on, refuses or computes otherwise is in the
header, first in the verdict of a model that fails (with the declaration of what it runs), and beside
each failing case that has it. A correct model is never told so; a port that declares what it runs is
tested on that and conforms."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import verifier
from verifier.model.config import FAMILY_SWITCHES
from verifier.plugin import registry
from verifier.plugin.command import Command
from verifier.plugin.interface import Constraints, switches_on
from verifier.plugin.probes import (
    FREE_SHAPE,
    MOE_SIZES,
    PROBE_KINDS,
    declaration,
    not_run,
    probe,
    probe_config,
    switch_configs,
)
from verifier.plugin.registry import ModelSpec

PORT = "tests.plugin.llama2_port"
PROGRAM = Path(__file__).parents[1] / "command" / "program.py"
# Three properties that build the model on drawn configs: agreement, the KV cache, batches.
QUICK = ["-p", "no:cacheprovider", "-k", "logits_agree or decoding_in_chunks_gives or batch_rows_equal"]


def _first_kinds() -> list[str]:
    return [next(k for k, (f, _, _) in PROBE_KINDS.items() if f == family) for family in FAMILY_SWITCHES]


@pytest.mark.parametrize("kind", _first_kinds())
def test_each_free_switch_of_a_family_has_a_probe_config_that_turns_it_on_alone(kind: str) -> None:
    family = PROBE_KINDS[kind][0]
    base = probe_config(kind, FREE_SHAPE)
    assert base is not None
    configs = switch_configs(kind, FREE_SHAPE)
    coupled = {"o_bias"} if {"qkv_bias", "o_bias"} <= set(FAMILY_SWITCHES[family][1]) else set()
    expected = [s for s in FAMILY_SWITCHES[family][1] if s not in (*MOE_SIZES, *switches_on(base), *coupled)]
    assert list(configs) == expected
    for name, config in configs.items():
        added = set(switches_on(config)) - set(switches_on(base))
        # Local and global layers need a window, and where a family sets its biases together, they come together.
        comes_with = {"layer_types": {"sliding_window"}, "qkv_bias": coupled}.get(name, set())
        assert added == {name, *comes_with}, (name, added)
        assert config.family == family
    # A model that names the switches it runs is not probed for others.
    assert switch_configs(kind, Constraints(families=(family,), switches=())) == {}


@pytest.mark.parametrize("name", ["numpy", "numpy-float16", "numpy-bfloat16", "numpy-q8_0"])
def test_a_correct_model_runs_every_switch_of_every_family(name: str) -> None:
    spec = next(s for s in registry.registered() if s.name == name)
    probes = probe(spec)
    assert [p.kind for p in probes if p.unsupported or p.error] == []
    assert not_run(probes) == "" and declaration(probes, program=False) == ""


def test_a_llama_2_port_is_told_which_switches_it_does_not_run_and_what_to_declare() -> None:
    probes = probe(registry.load_spec(f"{PORT}:build"))
    assert [p.kind for p in probes if p.unsupported is None] == ["llama", "llama-gqa", "llama3"]
    switches = dict(next(p for p in probes if p.kind == "llama").switches)
    assert set(switches) == {"head_dim", "rope_scaling", "qkv_bias", "o_bias"}
    assert switches["head_dim"].startswith("raises: raised RuntimeError: size mismatch for model.layers.0")
    assert switches["qkv_bias"] == switches["o_bias"] and switches["qkv_bias"].startswith("raises: raised KeyError")
    assert switches["rope_scaling"].startswith("computes otherwise: ")
    assert declaration(probes, program=False) == "factory.constraints = Constraints(families=('llama',), switches=())"


def test_undeclared_the_port_fails_and_its_verdict_says_first_what_to_declare_declared_it_conforms() -> None:
    report = verifier.check(f"{PORT}:build", pytest_args=QUICK)
    (verdict,) = report.verdicts()
    assert verdict.verdict == "fails", verdict
    assert verdict.reason.startswith("it computes llama3 otherwise; on llama configs, the switches head_dim (raises: ")
    assert (
        "declare what it runs (factory.constraints = Constraints(families=('llama',), switches=()))"
        in (verdict.reason.split("; ", 3)[-1])
    )
    # Each failing case that has such a switch says so beside the failure.
    assert any("the start-up probes found the model does not run: " in r.detail for r in report.failures)
    declared = verifier.check(f"{PORT}:build_declared", pytest_args=QUICK)
    assert [(v.verdict, v.failed) for v in declared.verdicts()] == [("conforms", 0)], declared.failures
    assert declared.header.models[0].not_run == ""


def _program(tmp_path: Path, constraints: Constraints | None = None) -> ModelSpec:
    script = tmp_path / "llama2"
    script.write_text(f"#!{sys.executable}\nimport os, sys\nos.execv(sys.executable, "
                      f"[sys.executable, {str(PROGRAM)!r}, 'llama2', *sys.argv[1:]])\n")  # fmt: skip
    script.chmod(0o755)
    command = Command.parse("./llama2 {model} {tokens}", "hf", "logits-text", constraints=constraints,
                            directory=tmp_path)  # fmt: skip
    return ModelSpec(command.name, command, f"--command {command.template.text}")


def test_a_program_is_told_the_options_to_declare_and_conforms_declaring_them(tmp_path: Path) -> None:
    probes = probe(_program(tmp_path))
    # It declines when run (exit status 77), not when built: the kind stays drawn, its cases rejected.
    declined = {p.kind: p.declined for p in probes if p.declined}
    assert set(declined) == {k for k, (f, _, _) in PROBE_KINDS.items() if f != "llama"}, declined
    assert declined["gpt2"] == "llama2 declined the input (exit status 77): a Llama 2 port: no gpt2"
    switches = dict(next(p for p in probes if p.kind == "llama").switches)
    assert set(switches) == {"head_dim", "rope_scaling", "qkv_bias", "o_bias"}, switches
    assert "unexpected tensor model.layers.0.self_attn" in switches["qkv_bias"]
    assert declaration(probes, program=True) == (
        "--families llama --switches none (or the same keys in its .verifier.toml)"
    )
    declared = _program(tmp_path, Constraints(families=("llama",), switches=()))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        report = verifier.check(declared, pytest_args=["-p", "no:cacheprovider", "-k", "logits_agree"])
    finally:
        os.chdir(old)
    assert [v.verdict for v in report.verdicts()] == ["conforms"], report.failures


def test_a_program_that_declines_families_when_run_is_told_to_declare_the_family_it_runs(tmp_path: Path) -> None:
    # The C program: it declines llama configs (exit status 77) when run, after it was "built".
    script = tmp_path / "gpt2only"
    script.write_text(f"#!{sys.executable}\nimport os, sys\nos.execv(sys.executable, "
                      f"[sys.executable, {str(PROGRAM)!r}, 'declines-llama', *sys.argv[1:]])\n")  # fmt: skip
    script.chmod(0o755)
    command = Command.parse("./gpt2only {model} {tokens}", "hf", "logits-text", directory=tmp_path)
    probes = probe(ModelSpec(command.name, command, f"--command {command.template.text}"))
    assert not_run(probes).startswith("it declines the inputs of llama, llama-gqa, llama3, mistral, ")
    assert "(the first: gpt2only declined the input (exit status 77): this program runs GPT-2 only, not llama)" in (
        not_run(probes)
    )
    assert declaration(probes, program=True).startswith("--families gpt2 --switches none")
