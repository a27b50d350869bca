"""The suite's side of the model contract: what a model supports, building it for a case, skipping.

What a model supports is probed once per session and process (`verifier.plugin.probes.probe`):
its factory is asked for a tiny config of each kind (each family with what it adds turned on: a MoE
family its routed experts, Phi-3 and GLM partial rotary; Llama also with grouped-query attention and
with RoPE scaling), in the shapes it declares
(`factory.constraints`) or, if it declares none, the free shape and then the published ones. The
strategies then draw only configs of the shapes it runs: its declared Constraints, or those the
probes found (a model that refused the free shape and accepted GPT-2's published one is drawn
published GPT-2 shapes only; one that refused the llama3 probe is drawn Llama without RoPE scaling;
a family whose probe it refused is not drawn, and its verdict names it as not tested). Properties
skip (saying why) where a model lacks a capability or a family, and reject drawn cases it still
cannot run, so Hypothesis draws others.

A property declares what it needs with `@requires("trace", family="llama")`; the hook in
`properties/conftest.py` (and `verifier.testing`, in a user's own test file) turns that into a skip
with the reason before any example runs (`verifier.properties.harness.requirement_unmet`).

With a fixed checkpoint (`--checkpoint`), every model is built from its config and weights, once per
model (`build_on_checkpoint`: a full-size model is read and built in seconds, an example runs in less); properties about
the other family, or needing configs or weights of their own (`requires(drawn=...)`), skip saying so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import note, reject

from verifier.model.config import FAMILIES, FAMILY_SWITCHES, Family, ModelConfig
from verifier.plugin import checkpoint
from verifier.plugin.contract import CheckedModel, build_checked
from verifier.plugin.interface import Constraints, Unsupported, lacking
from verifier.plugin.probes import (
    FREE_SHAPE,
    MOE_SIZES,
    PROBE_KINDS,
    Probe,
    build_on_checkpoint,
    probe,
    probe_config,
    probe_kind,
)
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks
from verifier.properties.cases import Case

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Support:
    """What one model runs: per probe kind (`verifier.plugin.probes.PROBE_KINDS`: each family, and
    Llama also as "llama-gqa" and "llama3") its capabilities, or the reason its factory gave for
    refusing it; and the Constraints its configs are drawn from."""

    model: str
    capabilities: dict[str, frozenset[str]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    constraints: tuple[Constraints, ...] = (FREE_SHAPE,)
    broken: dict[str, str] = field(default_factory=dict)  # probe kind -> how building the model broke the contract
    precision: str = "float32"  # the class of the model built on the probes
    quantized: bool = False  # ... and whether it is a quantized one

    def refusal(self, config: ModelConfig) -> str | None:
        """None if the model runs configs like this one, else why not (the probes, or the constraints)."""
        kind = probe_kind(config)
        if kind not in self.capabilities:
            return f"the probes: {kind}: {self.refused.get(kind, 'not probed')}"
        reasons = [c.refusal(config) for c in self.constraints]
        return None if None in reasons else " | ".join(r for r in reasons if r)

    def why_not(
        self, family: Family | tuple[Family, ...] | None, needs: tuple[str, ...], switch: str | None = None
    ) -> str | None:
        """The reason to skip a property needing each of `needs` on `family` (one, any of several, any if
        None) and, with `switch`, configs that turn that switch on; or None."""
        families = [family] if isinstance(family, str) else list(family or FAMILIES)
        kinds = [kind for kind, (f, _, _) in PROBE_KINDS.items() if f in families]
        runnable = [kind for kind in kinds if kind in self.capabilities]
        if not runnable:
            reasons = "; ".join(f"{kind}: {self.refused.get(kind, 'not probed')}" for kind in kinds)
            what = f"no {'/'.join(families)} config" if family else "none of the probe configs"
            return f"model {self.model!r} runs {what} ({reasons})"
        if switch is not None and not any(
            switch in FAMILY_SWITCHES[f][1] and (c.switches is None or switch in c.switches or switch in MOE_SIZES)
            for c in self.constraints
            for f in c.families
            if f in families
        ):
            shapes = " | ".join(c.describe() for c in self.constraints)
            return f"model {self.model!r} runs no {'/'.join(families)} config with {switch} ({shapes})"
        for need in needs:
            if all(lacking(self.model, self.capabilities[f], need) for f in runnable):
                broken = [f for f in runnable if f in self.broken]
                if broken:  # its capabilities are unknown: it could not be built
                    return (
                        f"model {self.model!r} could not be built on the {broken[0]} probe, so whether it has "
                        f"{need!r} is unknown ({self.broken[broken[0]]}); the properties that build it fail"
                    )
                found = ", ".join(sorted(set().union(*(self.capabilities[f] for f in runnable))))
                return f"{lacking(self.model, self.capabilities[runnable[0]], need)} (it has {found})"
        return None


def _inferred(probes: list[Probe]) -> tuple[Constraints, ...]:
    """The shapes to draw for a model that declares none: per family it runs, the shape of the probe
    config it accepted (free, or published if it refused the free one), with grouped-query attention
    if it ran a probe that has it (GPT-2's and Llama's: llama-gqa), and for Llama without RoPE scaling unless it ran
    the llama3 probe."""
    ran = {p.kind: p for p in probes if p.unsupported is None}
    found = []
    for family in FAMILIES:
        accepted = [p for kind, p in ran.items() if PROBE_KINDS[kind][0] == family]
        if not accepted:
            continue
        shape = accepted[0].shape or FREE_SHAPE
        probed = [probe_config(p.kind, p.shape or FREE_SHAPE) for p in accepted]
        # GPT-2 has none to draw; for it, as for Llama, the llama-gqa probe says.
        grouped = (
            "llama-gqa" in ran
            if family in ("gpt2", "llama")
            else any(c is not None and c.n_kv_heads < c.n_heads for c in probed)
        )
        switches = shape.switches
        if family == "llama" and "llama3" not in ran:
            free = FAMILY_SWITCHES["llama"][1]
            switches = tuple(s for s in free if s != "rope_scaling" and (switches is None or s in switches))
        found.append(
            dataclasses.replace(
                shape,
                families=(family,),
                grouped_query=grouped,
                switches=switches,
            )
        )
    return tuple(found)


_SUPPORT: dict[tuple[str, int], Support] = {}


def forget() -> None:
    """Forget what models were found to support: each run of the suite probes its own (the suite's
    conftest, as a session starts), as one in a process of its own does. A second run in one process
    (`verifier.check`) would otherwise be told what an earlier model of the same name supported, or
    another factory's that lived at the same address."""
    _SUPPORT.clear()


def support(spec: ModelSpec) -> Support:
    """What `spec`'s model runs, from `verifier.plugin.probes.probe`, once per process. A factory that
    breaks the contract on a probe counts as running that config: the property then reports it."""
    key = (spec.name, id(spec.factory))
    if key not in _SUPPORT:
        probes = probe(spec)
        built = next((p for p in probes if p.precision), None)
        found = Support(
            spec.name,
            constraints=spec.constraints or _inferred(probes),
            precision=built.precision if built else "float32",
            quantized=built.quantized if built else False,
        )
        for p in probes:
            if p.unsupported is not None:
                found.refused[p.kind] = p.unsupported
            else:
                found.capabilities[p.kind] = p.capabilities if p.error is None else frozenset({"logits"})
                if p.error is not None:
                    found.broken[p.kind] = p.error
        _SUPPORT[key] = found
    return _SUPPORT[key]


def requires(
    *capabilities: str,
    family: Family | tuple[Family, ...] | None = None,
    switch: str | None = None,
    quantized: bool = False,
    drawn: str | None = None,
) -> Callable[[F], F]:
    """Mark a property as needing each of `capabilities` ("logits" in either form, "batch", or any
    capability of `verifier.plugin.interface.CAPABILITIES`), configs of `family` (or of any of several),
    configs with `switch` on (a free switch of `verifier.model.config.FAMILY_SWITCHES`), (if `quantized`)
    a model of a quantized precision class, and (`drawn`, saying what) configs or weights of its own, not
    a fixed checkpoint's; others skip with the reason."""
    return pytest.mark.requires(  # type: ignore[no-any-return]
        *capabilities, family=family, switch=switch, quantized=quantized, drawn=drawn
    )


def skip_reason(
    spec: ModelSpec,
    capabilities: tuple[str, ...],
    family: Family | tuple[Family, ...] | None,
    *,
    switch: str | None = None,
    quantized: bool = False,
    drawn: str | None = None,
) -> str | None:
    """Why a property marked `requires(*capabilities, family=family, quantized=quantized, drawn=drawn)`
    cannot run on `spec`, or None."""
    fixed = checkpoint.current()
    if fixed is not None and drawn is not None:
        return f"needs {drawn}; with --checkpoint every model runs on {fixed.spec}'s config and weights"
    families = (family,) if isinstance(family, str) else family
    if fixed is not None and families is not None and fixed.config.family not in families:
        about = "/".join(families)
        return f"about {about} models; the checkpoint {fixed.spec} is a {fixed.config.family} model"
    found = support(spec)
    reason = found.why_not(family, capabilities, switch)
    if reason is None and quantized and not found.quantized and found.capabilities:
        reason = f"model {spec.name!r} is {found.precision}, not a quantized precision class"
    return reason


def build(spec: ModelSpec, case: Case, *capabilities: str) -> CheckedModel:
    """`spec`'s model for `case`, checked; rejects the case (Hypothesis draws another) when the
    model does not run its config, or when a fixed checkpoint is in use and `case` is not on it (a
    pinned case); skips when the built model lacks one of `capabilities`."""
    described = case.describe()
    note(f"model {spec.name!r}; case:\n{described}")
    if case.checkpoint is not checkpoint.current():
        reject()
    refusal = support(spec).refusal(case.config)
    if refusal is not None:
        checks.record_refusal(refusal, by_model=False)
        reject()
    try:
        model = (
            build_on_checkpoint(spec, case.checkpoint)
            if case.checkpoint
            else build_checked(spec, case.config, case.weights())
        )
    except Unsupported as e:
        note(f"the factory refused this config: {e}")
        checks.record_refusal(f"the factory: {e}")
        reject()
    for capability in capabilities:
        reason = model.lacks(capability)
        if reason is not None:
            pytest.skip(f"{reason}, for {case.config.family} configs")
    checks.judge_at(model, case)  # the model's precision class; rejects a case beyond its format's range
    checks.record_example(f"model {spec.name!r}; case:\n{described}")
    return model
