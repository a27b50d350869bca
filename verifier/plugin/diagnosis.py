"""What a failing model does not run of what it accepts: after a run in which a model that did not declare
the switches it runs failed, it is built on each kind's probe config it accepted, and on each family's with
one free switch on at a time (`SWITCH_PROBES`), and its last position's logits are compared with the
oracle's at its precision class. The kinds and switches it raises on or computes otherwise, and the kinds
it declines when run, lead its verdict, with the declaration of what it does run (`Constraints(...)`, or
a program's options; a switch it refuses, it has said it does not run): a port written for Llama 2 is
told that it does not run `head_dim` or attention biases instead of finding size mismatches among its
failures.

It runs after the properties, not among the start-up probes: a model that conforms pays nothing, a model's
first failure is on screen as early as without it, and a hang or a crash stays where the properties met it.
A model whose failures broke other rules of the contract than raising or malformed logits (a hang, an
exit, inputs written to) is not called again; nor is one whose every kind computes otherwise (its failures
say more than this would)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from verifier.analysis import tolerance
from verifier.messages import bounded
from verifier.model.config import FAMILY_SWITCHES, Family, ModelConfig
from verifier.model.weights import init_weights
from verifier.plugin.contract import CheckedModel, ContractViolation, build_checked
from verifier.plugin.interface import Constraints, Unsupported, switches_on
from verifier.plugin.probes import MOE_SIZES, PROBE_KINDS, Probe, probe, probe_config, tiny_config
from verifier.plugin.registry import ModelSpec
from verifier.reference import NumpyModel

# What turns each free switch on in a tiny config, where ignoring it changes the output (values as in
# `verifier.plugin.probes.PROBE_SWITCHES`). Attention biases are one switch where a family sets q/k/v and
# o biases together (`qkv_bias`), as the strategies draw them.
SWITCH_PROBES: dict[str, dict[str, Any]] = {
    "head_dim": {"head_dim": 6},
    "rope_scaling": {"rope_scaling": "scaled"},
    "qkv_bias": {"qkv_bias": True},
    "o_bias": {"o_bias": True},
    "sliding_window": {"sliding_window": "window"},
    "layer_types": {"sliding_window": "window", "layer_types": ("sliding_attention", "full_attention")},
    "attn_softcap": {"attn_softcap": 2.0},
    "final_softcap": {"final_softcap": 3.0},
    "query_scale": {"query_scale": 8},
    "d_expert": {"d_expert": 12},
    "norm_topk": {"norm_topk": True},
    "d_shared_expert": {"d_shared_expert": 8},
    "dense_layers": {"dense_layers": (0,)},
    "rotary_dim": {"rotary_dim": 2},
    "nope_layers": {"nope_layers": (1,)},
}
# How long the diagnosis may build and run a model, in all: an engine that exports or converts each config
# (seconds each) would otherwise keep a failing run's verdict waiting for minutes; what is left is not tried.
BUDGET_S = 60.0
# The contract rules a model may break on a config it does not run (it raises, or its logits are
# malformed): the diagnosis calls a model again only if its failures broke none but these.
NOT_RUN_RULES = frozenset({"factory", "no-exception", "shape", "dtype", "finite"})


@dataclass(frozen=True)
class Outcome:
    """How a model ran one config: as the oracle does (`agrees`), or not, and the detail (a message, or
    the error against its bound). `refuses` it when built, `declines` it when run (both with its reason)."""

    how: Literal["agrees", "refuses", "declines", "raises", "computes otherwise"]
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.how}: {self.detail}"


AGREES = Outcome("agrees")


class _Hostile(Exception):
    """A call broke another rule of the contract: the diagnosis stops and says nothing."""


@dataclass
class Diagnosis:
    """What the model does not run as the oracle does: per kind (`computes otherwise: ...`, `raises: ...`),
    the kinds it declined when run (a program's exit status 77), and per family the switches, each with how;
    and the switches it refuses, as a model may (they are not drawn: no failure comes of them)."""

    kinds: dict[str, Outcome] = field(default_factory=dict)
    declined: dict[str, str] = field(default_factory=dict)
    switches: dict[Family, dict[str, Outcome]] = field(default_factory=dict)
    refused: set[str] = field(default_factory=set)  # the switches it refuses (Unsupported, exit status 77)
    accepted: list[Probe] = field(default_factory=list)  # the probes it was built on
    cut: bool = False  # the budget ran out before every kind and switch was tried

    def not_run(self) -> str:
        """`llama3 configs (computes otherwise: ...); on llama configs, the switches head_dim (raises: ...)`;
        "" if nothing was found."""
        parts = [f"{', '.join(kinds)} configs ({how})" for how, kinds in _by_outcome(self.kinds).items()]
        if self.declined:
            first = next(iter(self.declined.values()))
            parts.append(f"it declines the inputs of {', '.join(self.declined)} when run (the first: {first})")
        for family, broken in self.switches.items():
            listed = "; ".join(f"{', '.join(names)} ({how})" for how, names in _by_outcome(broken).items())
            parts.append(f"on {family} configs, the switches {listed}")
        if parts and self.cut:
            parts.append(f"(the rest not tried: the diagnosis stops after {BUDGET_S:g} s)")
        return "; ".join(parts)

    def declaration(self, *, program: bool) -> str:
        """The declaration of what it runs as the oracle does: the families whose first accepted kind
        agrees, grouped-query attention unless llama-gqa does not, and those families' switches none of
        the switch probes found broken; for a factory (`Constraints(...)`) or a `--command` program (its
        options). "" if nothing was found."""
        if not self.not_run():
            return ""
        first: dict[Family, str] = {}
        for p in self.accepted:
            first.setdefault(PROBE_KINDS[p.kind][0], p.kind)
        families = [f for f, kind in first.items() if kind not in self.kinds and kind not in self.declined]
        broken = {switch for switches in self.switches.values() for switch in switches} | self.refused
        free = dict.fromkeys(s for f in families for s in FAMILY_SWITCHES[f][1] if s not in MOE_SIZES)
        switches = [s for s in free if s not in broken]
        every = len(switches) == len(free)  # no switch to leave out: the declaration names none (every one runs)
        grouped = "llama-gqa" not in self.kinds
        if program:
            options = f"--families {','.join(families)}"
            options += "" if every else f" --switches {','.join(switches) or 'none'}"
            return options + ("" if grouped else " --grouped-query false") + " (or the same keys in its .verifier.toml)"
        args = [f"families={_tuple(families)}", *([] if every else [f"switches={_tuple(switches)}"])]
        return f"factory.constraints = Constraints({', '.join(args + ([] if grouped else ['grouped_query=False']))})"


def _by_outcome(found: dict[str, Outcome]) -> dict[str, list[str]]:
    """The names of `found` (a kind or switch -> how it is not run) by how, in order."""
    by_outcome: dict[str, list[str]] = {}
    for name, outcome in found.items():
        by_outcome.setdefault(str(outcome), []).append(name)
    return by_outcome


def _tuple(names: Sequence[str]) -> str:
    return f"({', '.join(map(repr, names))}{',' if len(names) == 1 else ''})"


def undeclared(spec: ModelSpec) -> bool:
    """Whether `spec`'s factory leaves the switches it runs unsaid (no `Constraints` naming `switches`)."""
    return not spec.constraints or all(c.switches is None for c in spec.constraints)


def diagnose(spec: ModelSpec) -> Diagnosis:
    """What `spec`'s model does not run of the kinds and switches it accepts (an empty `Diagnosis` when it
    names its switches, computes every kind otherwise, or breaks the contract otherwise than by raising)."""
    if not undeclared(spec):
        return Diagnosis()
    deadline = time.monotonic() + BUDGET_S
    found = Diagnosis(accepted=[p for p in probe(spec) if p.unsupported is None and p.error is None])
    try:
        agreeing: dict[Family, Probe] = {}
        for p in found.accepted:
            config = probe_config(p.kind, p.shape or Constraints())
            if config is None:
                continue
            if time.monotonic() > deadline:
                found.cut = True
                break
            outcome = _run(spec, config)
            if outcome.how == "declines":
                found.declined[p.kind] = outcome.detail
            elif outcome != AGREES:
                found.kinds[p.kind] = outcome
            else:
                agreeing.setdefault(PROBE_KINDS[p.kind][0], p)
        if not agreeing:  # wrong on every kind tried (or none tried in the budget): nothing to add
            return Diagnosis(cut=found.cut)
        for family, p in agreeing.items():
            broken: dict[str, Outcome] = {}
            for name, config in switch_configs(p.kind, p.shape or Constraints()).items():
                if time.monotonic() > deadline:
                    found.cut = True
                    break
                outcome = _run(spec, config)
                named = (name, "o_bias") if name == "qkv_bias" and config.o_bias else (name,)
                if outcome.how in ("refuses", "declines"):  # as a model says it does not run a switch: not drawn
                    found.refused.update(named)
                elif outcome != AGREES:
                    broken |= dict.fromkeys(named, outcome)
            if broken:
                found.switches[family] = broken
    except _Hostile:
        return Diagnosis()
    return found


def switch_configs(kind: str, shape: Constraints) -> dict[str, ModelConfig]:
    """Per free switch of `kind`'s family that `kind`'s probe config leaves off: that config with the switch
    on (`SWITCH_PROBES`), where `shape` admits it otherwise; none if `shape` names the switches it runs. A
    family's q/k/v and o biases are one switch, `qkv_bias`, where the family sets them together."""
    if shape.switches is not None:
        return {}
    free = FAMILY_SWITCHES[PROBE_KINDS[kind][0]][1]
    already = switches_on(tiny_config(kind, shape))
    found = {}
    for name in free:
        if name in MOE_SIZES or name in already or (name == "o_bias" and "qkv_bias" in free):
            continue
        extra = {**SWITCH_PROBES[name], **({"o_bias": True} if name == "qkv_bias" and "o_bias" in free else {})}
        config = tiny_config(kind, shape, extra)
        if name in switches_on(config) and shape.refusal(config) is None:
            found[name] = config
    return found


def _run(spec: ModelSpec, config: ModelConfig) -> Outcome:
    """How `spec`'s model, built on `config` (seeded weights), computes its last position's logits against
    the oracle's. _Hostile if it broke a rule of the contract other than raising or malformed logits."""
    weights = init_weights(config, seed=0)
    try:
        model = build_checked(spec, config, weights)
    except Unsupported as e:
        return Outcome("refuses", _one_line(str(e) or type(e).__name__))
    except ContractViolation as e:
        return _broken(e)
    try:
        return computes_otherwise(model, config, weights)
    except Unsupported as e:
        return Outcome("declines", _one_line(str(e) or type(e).__name__))
    except ContractViolation as e:
        return _broken(e)


def _broken(e: ContractViolation) -> Outcome:
    if e.rule not in NOT_RUN_RULES:
        raise _Hostile from e
    return Outcome("raises", _one_line(e.detail))


def computes_otherwise(model: CheckedModel, config: ModelConfig, weights: dict[str, np.ndarray]) -> Outcome:
    """Whether `model`'s last-position logits on seeded tokens lie within its precision class's bound from
    the oracle's (`AGREES`, also for a model without logits) or beyond it (`computes otherwise`)."""
    if model.lacks("logits"):
        return AGREES
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, config.n_ctx)
    actual = model.last_logits(tokens)
    precision = model.precision
    expected = NumpyModel(config, precision.oracle_weights(weights), np.float64).logits(tokens)[-1]
    neighbours = [m.logits(tokens)[-1] for m in precision.neighbours(config, weights)]
    rope_positions = config.n_ctx - 1 if config.uses_rope else 0
    limit = precision.bound(expected, neighbours, rope_positions=rope_positions, n_layers=config.n_layers)
    error, _ = tolerance.worst(actual, expected)
    if error <= limit:
        return AGREES
    detail = f"{error / limit:.3g}x its {precision.label} bound from the oracle (max |diff| {error:.3g})"
    return Outcome("computes otherwise", detail)


def _one_line(message: str, width: int = 160) -> str:
    """The first line of `message`, cut at `width` characters; of a program's failure (`CommandFailed`),
    how it ended and its stderr's last line, not its command line."""
    head, program, stderr = message.partition("; stderr: ")
    if program:
        ended = re.search(r"exited with status -?\d+|crashed \(\w+\)|did not finish in \S+ s", head)
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        message = f"the program {ended.group(0) if ended else 'failed'}; its stderr's last line: {last}"
    line = bounded(message).partition("\n")[0]
    return line if len(line) <= width else line[: width - 1] + "…"
