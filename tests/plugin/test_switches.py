"""Switches named, not discovered by crashes (issue 47): after a model that does not say which switches of
its families it runs fails, it is built on each kind's probe config it accepted and on each family's with one
switch on at a time, and its logits compared with the oracle's (`verifier.plugin.diagnosis`); what it raises
on, refuses, declines or computes otherwise leads its verdict, with the declaration of what it runs. A
correct model is never told so; a port that declares what it runs is tested on that and conforms; a model
that is wrong everywhere, or hostile, is not diagnosed."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verifier
from verifier import ModelConfig, NumpyModel, Unsupported, Weights
from verifier.model.config import FAMILY_SWITCHES
from verifier.plugin import diagnosis, registry
from verifier.plugin.command import Command
from verifier.plugin.diagnosis import diagnose, switch_configs
from verifier.plugin.interface import Constraints, switches_on
from verifier.plugin.probes import FREE_SHAPE, MOE_SIZES, PROBE_CONFIGS, PROBE_KINDS, probe_config
from verifier.plugin.registry import ModelSpec
from verifier.report import collect

PORT = "tests.plugin.llama2_port"
PROGRAM = Path(__file__).parents[1] / "command" / "program.py"
QUICK = ["-p", "no:cacheprovider", "-k", "logits_agree"]


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
def test_a_correct_model_runs_every_kind_and_every_switch_of_every_family(name: str) -> None:
    found = diagnose(next(s for s in registry.registered() if s.name == name))
    assert [p.kind for p in found.accepted] == list(PROBE_KINDS)
    assert found.not_run() == "" and found.declaration(program=False) == ""


def test_a_llama_2_port_is_told_which_switches_it_does_not_run_and_what_to_declare() -> None:
    found = diagnose(registry.load_spec(f"{PORT}:build"))
    assert [p.kind for p in found.accepted] == ["llama", "llama-gqa", "llama3"]
    assert list(found.kinds) == ["llama3"] and found.kinds["llama3"].how == "computes otherwise"
    switches = found.switches["llama"]
    assert set(switches) == {"head_dim", "rope_scaling", "qkv_bias", "o_bias"}
    assert str(switches["head_dim"]).startswith("raises: raised RuntimeError: size mismatch for model.layers.0")
    assert switches["qkv_bias"] == switches["o_bias"]
    assert str(switches["qkv_bias"]).startswith("raises: raised KeyError")
    assert switches["rope_scaling"].how == "computes otherwise"
    assert found.declaration(program=False) == "factory.constraints = Constraints(families=('llama',), switches=())"


def test_undeclared_the_port_fails_and_its_verdict_says_first_what_to_declare_declared_it_conforms() -> None:
    report = verifier.check(f"{PORT}:build", pytest_args=QUICK)
    (verdict,) = report.verdicts()
    assert verdict.verdict == "fails", verdict
    lead = "it accepts but does not run as the oracle does: llama3 configs (computes otherwise: "
    assert verdict.reason.startswith(lead), verdict
    assert "; on llama configs, the switches head_dim (raises: raised RuntimeError: size mismatch " in verdict.reason
    assert "); rope_scaling (computes otherwise: " in verdict.reason
    assert "); qkv_bias, o_bias (raises: raised KeyError: 'Unexpected key(s) in state_dict: " in verdict.reason
    assert (
        "declare what it runs (factory.constraints = Constraints(families=('llama',), switches=())) and it is "
        "tested on that; if it is, its failures are there" in verdict.reason
    )
    declared = verifier.check(f"{PORT}:build_declared", pytest_args=QUICK)
    assert [(v.verdict, v.failed) for v in declared.verdicts()] == [("conforms", 0)], declared.failures
    assert declared.header.models[0].not_run == ""


def _refuses_head_dim_ignores_scaling(config: ModelConfig, weights: Weights) -> NumpyModel:
    if "head_dim" in switches_on(config):
        raise Unsupported("no head_dim of its own")
    return NumpyModel(config.replace(rope_scaling=None), dict(weights))


def test_a_switch_the_model_refuses_is_not_named_and_left_out_of_the_declaration() -> None:
    found = diagnose(ModelSpec("refuses", _refuses_head_dim_ignores_scaling, "test"))
    assert "head_dim" in found.refused and "head_dim" not in found.not_run()
    # Each family with RoPE scaling among its switches has it named, and nothing else.
    assert found.switches and all(list(s) == ["rope_scaling"] for s in found.switches.values()), found.switches
    declared = found.declaration(program=False)
    assert "'head_dim'" not in declared and "'rope_scaling'" not in declared and "'qkv_bias'" in declared


def test_the_diagnosis_reads_the_probes_the_run_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each probe config is built once for the run's header and the properties, and once more by the diagnosis
    # to run it, not probed again (a program's probes start a process for each kind).
    built: list[ModelConfig] = []

    def counted(config: ModelConfig, weights: Weights) -> Any:
        built.append(config)
        return _Negated("gemma")(config, weights)

    report = verifier.check(counted, pytest_args=QUICK)
    assert [v.verdict for v in report.verdicts()] == ["fails"] and report.header.models[0].not_run.startswith("gemma")
    for kind, config in PROBE_CONFIGS.items():
        assert built.count(config) == 2, (kind, built.count(config))


def _program(tmp_path: Path, mode: str, constraints: Constraints | None = None) -> ModelSpec:
    script = tmp_path / mode
    script.write_text(f"#!{sys.executable}\nimport os, sys\nos.execv(sys.executable, "
                      f"[sys.executable, {str(PROGRAM)!r}, {mode!r}, *sys.argv[1:]])\n")  # fmt: skip
    script.chmod(0o755)
    command = Command.parse(f"./{mode} {{model}} {{tokens}}", "hf", "logits-text", constraints=constraints,
                            directory=tmp_path)  # fmt: skip
    return ModelSpec(command.name, command, f"--command {command.template.text}")


@pytest.mark.slow  # 5 s: the program started for each probe; the default run keeps the program that declines
def test_a_program_is_told_the_options_to_declare(tmp_path: Path) -> None:
    found = diagnose(_program(tmp_path, "llama2"))
    # It declines other families when run (exit status 77), not when built: the kinds stay drawn, their cases rejected.
    assert set(found.declined) == {k for k, (f, _, _) in PROBE_KINDS.items() if f != "llama"}, found.declined
    assert found.declined["gpt2"] == "llama2 declined the input (exit status 77): a Llama 2 port: no gpt2"
    assert set(found.switches["llama"]) == {"head_dim", "rope_scaling", "qkv_bias", "o_bias"}, found.switches
    assert (
        "its stderr's last line: KeyError: 'unexpected tensor model.layers.0.self_attn"
        in found.switches["llama"]["qkv_bias"].detail
    )
    assert found.declaration(program=True) == (
        "--families llama --switches none (or the same keys in its .verifier.toml)"
    )


@pytest.mark.slow  # 10 s: the program started for each drawn case
def test_a_program_declaring_those_options_conforms(tmp_path: Path) -> None:
    declared = _program(tmp_path, "llama2", Constraints(families=("llama",), switches=()))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        report = verifier.check(declared, pytest_args=["-p", "no:cacheprovider", "-k", "logits_agree"])
    finally:
        os.chdir(old)
    assert [v.verdict for v in report.verdicts()] == ["conforms"], report.failures


def test_a_program_that_declines_families_when_run_is_told_to_declare_the_family_it_runs(tmp_path: Path) -> None:
    # The C program: it declines llama configs (exit status 77) when run, after it was "built".
    found = diagnose(_program(tmp_path, "declines-llama"))
    assert found.not_run().startswith("it declines the inputs of llama, llama-gqa, llama3, mistral, "), found.not_run()
    assert "(the first: declines-llama declined the input (exit status 77): this program runs GPT-2 only" in (
        found.not_run()
    )
    assert found.declaration(program=True) == "--families gpt2 (or the same keys in its .verifier.toml)"


class _Negated:
    """A factory whose models negate their logits on configs of `families`."""

    def __init__(self, *families: str) -> None:
        self.families = families

    def __call__(self, config: ModelConfig, weights: Weights) -> Any:
        model = NumpyModel(config, dict(weights))
        sign = -1 if config.family in self.families else 1

        class Negated:
            def logits(self, tokens: np.ndarray) -> np.ndarray:
                return sign * model.logits(tokens)

        return Negated()


def test_a_model_wrong_on_one_family_is_told_that_family_and_one_wrong_on_every_kind_nothing() -> None:
    found = diagnose(ModelSpec("negated on gemma", _Negated("gemma"), "test"))
    assert list(found.kinds) == ["gemma"] and found.kinds["gemma"].how == "computes otherwise"
    # No switch to leave out: the declaration names the families, and every switch stays drawn.
    others = tuple(f for f in FAMILY_SWITCHES if f != "gemma")
    assert found.declaration(program=False) == f"factory.constraints = Constraints(families={others!r})"
    # Wrong on every kind, it has a bug of its own: the diagnosis says nothing (its failures say more).
    everywhere = diagnose(ModelSpec("negated", _Negated(*FAMILY_SWITCHES), "test"))
    assert everywhere.not_run() == "" and everywhere.declaration(program=False) == ""


def _writes_tokens_on_a_head_dim(config: ModelConfig, weights: Weights, *, always: bool = False) -> Any:
    model = NumpyModel(config, dict(weights))
    hostile = always or switches_on(config) == ("head_dim",)

    class Model:
        def logits(self, tokens: np.ndarray) -> np.ndarray:
            if hostile:
                tokens[...] = 0
            return model.logits(tokens)

    return Model()


def test_a_model_that_breaks_another_rule_of_the_contract_on_a_switch_is_told_nothing() -> None:
    spec = ModelSpec("hostile", _writes_tokens_on_a_head_dim, "test")
    assert diagnose(spec).not_run() == ""


def test_a_model_whose_failures_broke_another_rule_is_not_called_again(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(spec: ModelSpec) -> None:
        raise AssertionError(f"{spec.name} was diagnosed after writing to its inputs")

    monkeypatch.setattr(collect, "diagnose", never)

    def writes_tokens(config: ModelConfig, weights: Weights) -> Any:
        return _writes_tokens_on_a_head_dim(config, weights, always=True)

    report = verifier.check(writes_tokens, pytest_args=["-p", "no:cacheprovider", "-k", "logits_agree"])
    assert [r.contract_rule for r in report.failures] == ["inputs-unchanged"], report.failures


def test_the_diagnosis_stops_at_its_budget_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # An engine that converts each config for seconds: the verdict does not wait for every kind and switch.
    monkeypatch.setattr(diagnosis, "BUDGET_S", 0.0)
    found = diagnose(ModelSpec("refuses", _refuses_head_dim_ignores_scaling, "test"))
    assert found.cut and found.not_run() == ""  # nothing tried: nothing to say
    monkeypatch.setattr(diagnosis, "BUDGET_S", 60.0)
    assert not diagnose(ModelSpec("refuses", _refuses_head_dim_ignores_scaling, "test")).cut
    # Cut after finding something: what it found, and that the rest was not tried.
    partial = diagnosis.Diagnosis(kinds={"llama3": diagnosis.Outcome("computes otherwise", "5.8x")}, cut=True)
    assert (
        partial.not_run()
        == "llama3 configs (computes otherwise: 5.8x); (the rest not tried: the diagnosis stops after 60 s)"
    )
