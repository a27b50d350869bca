"""`--model NAME@FAMILY`: the same factory, tested on one family only (the engine matrix's cells).
Its other families are refused as not selected, never built; a declaration is narrowed to the
family; the verdict does not list what was left out by choice as refused by the model."""

from __future__ import annotations

from typing import Any

import pytest

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin import registry
from verifier.plugin.adapters import reference
from verifier.plugin.interface import Constraints
from verifier.plugin.probes import PROBE_KINDS, probe
from verifier.plugin.registry import NOT_SELECTED, PluginError
from verifier.report.results import Header, ModelCard, Report, Result


def test_a_spec_ending_in_a_family_is_the_same_factory_on_that_family() -> None:
    spec = registry.load_spec("examples.numpy_gpt2:build@gpt2")
    assert (spec.name, spec.family) == ("examples.numpy_gpt2:build@gpt2", "gpt2")
    assert spec.factory is registry.load_spec("examples.numpy_gpt2:build").factory
    assert registry.load_spec("numpy@gemma2").factory is reference.build


@pytest.mark.parametrize(
    ("text", "message"),
    [("numpy@gpt3", "'gpt3' after '@' is not a family: expected one of ('gpt2', 'llama'"),
     ("numpy@llama@gpt2", "one '@FAMILY' a spec"), ("nonexistent@llama", "'nonexistent': expected module.path")],
)  # fmt: skip
def test_a_bad_family_is_a_usage_error_naming_it(text: str, message: str) -> None:
    with pytest.raises(PluginError, match=r"^--model ") as excinfo:
        registry.load_spec(text)
    assert message in str(excinfo.value)


def test_only_the_selected_family_is_probed_the_others_are_refused_as_not_selected() -> None:
    built: list[str] = []

    def factory(config: ModelConfig, weights: Weights) -> Any:
        built.append(config.family)
        return reference.build(config, weights)

    spec = registry.ModelSpec("m@llama", factory, "--model", family="llama")
    probes = {p.kind: p for p in probe(spec)}
    assert set(built) == {"llama"}  # the other families' probes never reach the factory
    for kind, (family, _, _) in PROBE_KINDS.items():
        if family == "llama":
            assert probes[kind].unsupported is None, probes[kind]
        else:
            assert probes[kind].unsupported == f"{NOT_SELECTED} (m@llama is tested on llama only)"


def test_a_declaration_is_narrowed_to_the_family_and_empty_without_it() -> None:
    def factory(config: ModelConfig, weights: Weights) -> Any:
        return reference.build(config, weights)

    factory.constraints = (Constraints(families=("gpt2", "llama"), norm_eps=1e-5), Constraints(families=("gemma",)))  # type: ignore[attr-defined]
    on_llama = registry.ModelSpec("m@llama", factory, "--model", family="llama").constraints
    assert on_llama == (Constraints(families=("llama",), norm_eps=1e-5),)
    assert registry.ModelSpec("m@qwen3", factory, "--model", family="qwen3").constraints == ()


def _report(probes: dict[str, str], *results: Result) -> Report:
    header = Header([ModelCard("m@llama", "--model", probes)], {}, "ci", {}, "properties", "2026-01-01T00:00:00+00:00")
    return Report(header, list(results))


def test_the_verdict_names_what_the_model_refused_not_what_was_left_out() -> None:
    left_out = f"unsupported ({NOT_SELECTED} (m@llama is tested on llama only))"
    probes = {"gpt2": left_out, "llama": "logits", "llama3": "unsupported (no RoPE scaling)", "gemma": left_out}
    (verdict,) = _report(probes, Result("p", "m@llama", "pass", examples=3)).verdicts()
    assert (verdict.verdict, verdict.reason) == (
        "conforms",
        "not tested on llama3: refused by the model (see the header)",
    )
    refused = {**probes, "llama": "unsupported (no Llama)", "llama3": "unsupported (no Llama)"}
    (verdict,) = _report(refused, Result("p", "m@llama", "skip")).verdicts()
    assert verdict.verdict == "untested"
    assert verdict.reason.endswith("it refused every config family probed (llama, llama3: unsupported (no Llama))")
