"""The suite's side of the model contract: what a model supports, building it for a case, skipping.

What a model supports is probed once per session and process: its factory is asked for a tiny
config of each family, with and without grouped-query attention. Properties then skip (saying
why) where a model lacks a capability or a family, and reject drawn cases it cannot run, so
Hypothesis draws others.

A property declares what it needs with `@requires("trace", family="llama")`; the hook in
`properties/conftest.py` turns that into a skip with the reason before any example runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import note, reject

from verifier.model.config import Family, ModelConfig
from verifier.plugin.contract import CheckedModel, build_checked, probe
from verifier.plugin.interface import Unsupported
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks
from verifier.properties.strategies import Case

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Support:
    """What one model runs: per probe of `verifier.plugin.contract.PROBE_CONFIGS` ("gpt2", "llama",
    "llama-gqa") its capabilities, or the reason its factory gave for refusing it."""

    model: str
    capabilities: dict[str, frozenset[str]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # probe kind -> how building the model broke the contract

    def runs(self, config: ModelConfig) -> bool:
        """Whether the probes say the model runs configs like this one."""
        if config.family not in self.capabilities:
            return False
        return config.n_kv_heads == config.n_heads or "llama-gqa" in self.capabilities

    def why_not_config(self, config: ModelConfig) -> str:
        """Why the probes say the model does not run `config` (when `runs(config)` is False)."""
        if config.family not in self.capabilities:
            return f"the probes: {config.family}: {self.refused.get(config.family, 'not probed')}"
        return f"the probes: llama-gqa: {self.refused.get('llama-gqa', 'not probed')}"

    def why_not(self, family: Family | None, capability: str | None) -> str | None:
        """The reason to skip a property needing `capability` on `family` (any if None), or None."""
        families = [family] if family else ["gpt2", "llama"]
        runnable = [f for f in families if f in self.capabilities]
        if not runnable:
            reasons = "; ".join(f"{f}: {self.refused.get(f, 'not probed')}" for f in families)
            return f"model {self.model!r} runs no {' or '.join(families)} config ({reasons})"
        if capability and not any(capability in self.capabilities[f] for f in runnable):
            broken = [f for f in runnable if f in self.broken]
            if broken:  # its capabilities are unknown: it could not be built
                return (
                    f"model {self.model!r} could not be built on the {broken[0]} probe, so whether it has "
                    f"{capability!r} is unknown ({self.broken[broken[0]]}); the properties that build it fail"
                )
            found = sorted(set().union(*(self.capabilities[f] for f in runnable)))
            return f"model {self.model!r} has no {capability!r} capability (it has {', '.join(found)})"
        return None


_SUPPORT: dict[tuple[str, int], Support] = {}


def support(spec: ModelSpec) -> Support:
    """What `spec`'s model runs, from `verifier.plugin.contract.probe`, once per process. A factory that
    breaks the contract on a probe counts as running that config: the property then reports it."""
    key = (spec.name, id(spec.factory))
    if key not in _SUPPORT:
        found = Support(spec.name)
        for p in probe(spec):
            if p.unsupported is not None:
                found.refused[p.kind] = p.unsupported
            else:
                found.capabilities[p.kind] = p.capabilities if p.error is None else frozenset({"logits"})
                if p.error is not None:
                    found.broken[p.kind] = p.error
        _SUPPORT[key] = found
    return _SUPPORT[key]


def requires(capability: str | None = None, *, family: Family | None = None) -> Callable[[F], F]:
    """Mark a property as needing `capability` (and configs of `family`); others skip with the reason."""
    return pytest.mark.requires(capability=capability, family=family)  # type: ignore[no-any-return]


def skip_reason(spec: ModelSpec, capability: str | None, family: Family | None) -> str | None:
    """Why a property marked `requires(capability, family=family)` cannot run on `spec`, or None."""
    return support(spec).why_not(family, capability)


def build(spec: ModelSpec, case: Case, capability: str | None = None) -> CheckedModel:
    """`spec`'s model for `case`, checked; rejects the case (Hypothesis draws another) when the
    model does not run its config, and skips when the built model lacks `capability`."""
    note(f"model {spec.name!r}; case:\n{case.describe()}")
    if not support(spec).runs(case.config):
        checks.record_refusal(support(spec).why_not_config(case.config))
        reject()
    try:
        model = build_checked(spec, case.config, case.weights())
    except Unsupported as e:
        note(f"the factory refused this config: {e}")
        checks.record_refusal(f"the factory: {e}")
        reject()
    if capability and capability not in model.capabilities:
        pytest.skip(f"model {spec.name!r} has no {capability!r} capability for {case.config.family} configs")
    checks.record_example()
    return model
