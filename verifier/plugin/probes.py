"""What a model under test runs, found by building it: `probe` builds a model on tiny configs of each
kind once (the free shape, then the published ones, or the factory's declared `Constraints`), for
capability tables, skip reasons and the configs the strategies draw; a model refused on every tiny
config of a checkpoint's kind is probed on the checkpoint itself (`build_on_checkpoint`)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, cast

from verifier.model.config import FAMILIES, FAMILY_SWITCHES, TIED_FAMILIES, Family, ModelConfig, RopeScaling
from verifier.model.families import RECORDS
from verifier.model.presets import llama2c_hidden_dim
from verifier.model.weights import init_weights
from verifier.plugin import checkpoint
from verifier.plugin.contract import CheckedModel, ContractViolation, build_checked
from verifier.plugin.interface import CAPABILITIES, GPT2_PUBLISHED, LLAMA2C_PUBLISHED, Constraints, Unsupported
from verifier.plugin.registry import ModelSpec

# The kinds of config probed: each family's (`verifier.model.families.ProbeKind`), Llama plain, with
# grouped-query attention, and with Llama 3's RoPE scaling: kind -> (family, n_heads, n_kv_heads). Heads
# have d_head 4 (d_model = 4 n_heads) unless PROBE_D_HEAD or a kind's switches set head_dim.
PROBE_KINDS: dict[str, tuple[Family, int, int]] = {
    k.name: (cast(Family, f), k.n_heads, k.n_kv_heads) for f in FAMILIES for k in RECORDS[f].probes
}
PROBE_D_HEAD = {k.name: k.d_head for f in FAMILIES for k in RECORDS[f].probes if k.d_head != 4}
# What each kind turns on beyond its family's fixed switches (Qwen2's q/k/v biases, Qwen3's q/k norm,
# Gemma's GeGLU, 1 + w norms and embedding scale come with the family): the switches its published
# checkpoints use, each where ignoring it changes the output, so that a factory that cannot run them
# refuses (or fails the properties) instead of passing as the plain Llama. "window" stands for the
# window W: smaller than the probe's n_ctx. head_dim 6 is not d_model / n_heads = 4. A MoE kind always
# has its experts (4, top-2: a router that chooses), whatever a declaration's switches: they are the
# family's MLP, not a switch of it (`MOE_SIZES`).
PROBE_SWITCHES: dict[str, dict[str, Any]] = {
    k.name: dict(k.switches) for f in FAMILIES for k in RECORDS[f].probes if k.switches
}
# The switches of a MoE kind every probe config has: without them it is not a config of its family.
MOE_SIZES = ("n_experts", "top_k")

FREE_SHAPE = Constraints()
# The shapes probed, in order, for a factory that declares no Constraints: a model runs a kind if it
# accepts any. The free shape first (d_ff unrelated to d_model), then the published ones: GPT-2,
# and llama2.c with each multiple_of its models use, tied (model.py) or not.
PROBE_SHAPES: dict[str, Constraints] = {
    "free shape": FREE_SHAPE,
    "GPT-2's published shape": GPT2_PUBLISHED,
    **{
        f"llama2.c's shape (multiple_of {m}, {'tied' if tied else 'untied'})": dataclasses.replace(
            LLAMA2C_PUBLISHED, d_ff=functools.partial(llama2c_hidden_dim, multiple_of=m), tie_embeddings=tied
        )
        for m in (32, 256, 4)
        for tied in (True, False)
    },
}


def _probe_switches(kind: str, n_ctx: int, shape: Constraints, extra: dict[str, Any]) -> dict[str, Any]:
    """The switches of `kind`'s probe config with `n_ctx` positions that `shape` admits (every one, if
    it names none), and `extra`'s (`verifier.plugin.diagnosis.SWITCH_PROBES`), admitted or not."""
    found: dict[str, Any] = {}
    for name, value in {**PROBE_SWITCHES.get(kind, {}), **extra}.items():
        if shape.switches is not None and name not in (*shape.switches, *MOE_SIZES, *extra):
            continue
        if value == "window":  # a window the probe's positions exceed
            value = max(1, min(4, n_ctx - 1))
        elif name == "rope_scaling":  # Llama 3.1's bands; the probe's positions pass the original context
            value = RopeScaling("llama3", factor=8.0, original_n_ctx=max(1, n_ctx // 2))
        found[name] = value
    if "layer_types" in found and "sliding_window" not in found:
        del found["layer_types"]
    return found


def tiny_config(kind: str, shape: Constraints, extra: dict[str, Any] | None = None) -> ModelConfig:
    """The tiny config of `kind` (one layer, or as many as its switches name: `_layers`; d_head 4
    unless the kind sets it, 32 tokens, 16 positions) with `shape`'s values, the switches it admits and
    `extra`'s; under a `block`, each matrix input width (`ModelConfig.matrix_inputs`) rounded up to a
    multiple of it."""
    family, n_heads, n_kv_heads = PROBE_KINDS[kind]
    if not shape.grouped_query and family != "llama":  # Llama's grouped-query attention is a kind of its own
        n_kv_heads = n_heads
    block = shape.block or 1
    step = math.lcm(2, block // math.gcd(n_heads, block))  # d_head even (RoPE's pairs), n_heads d_head in blocks
    d_head = _round_up(PROBE_D_HEAD.get(kind, 4), step)
    d_model = d_head * n_heads
    n_ctx = min(16, shape.max_n_ctx or 16)
    switches = _probe_switches(kind, n_ctx, shape, extra or {})
    for name in ("d_expert", "d_shared_expert"):
        if name in switches:
            switches[name] = _round_up(switches[name], block)
    if switches.get("layer_types"):  # its alternation repeated over the layers the other switches need
        pattern = switches["layer_types"]
        switches["layer_types"] = tuple(pattern[i % len(pattern)] for i in range(_layers(switches)))
    if "head_dim" in switches:  # a head_dim that is not d_model / n_heads, in blocks
        rounded = itertools.count(_round_up(switches["head_dim"], step), step)
        switches["head_dim"] = next(h for h in rounded if h != d_head)
    return ModelConfig(
        family=family,
        vocab_size=32,
        n_ctx=n_ctx,
        d_model=d_model,
        n_layers=_layers(switches),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=_round_up(24, block) if shape.d_ff is None else shape.d_ff(d_model),
        norm_eps=shape.norm_eps or 1e-5,
        tie_embeddings=family in TIED_FAMILIES if shape.tie_embeddings is None else shape.tie_embeddings,
        rope_theta=shape.rope_theta or 10000.0,
        **FAMILY_SWITCHES[family][0],
        **switches,
    )


def _layers(switches: dict[str, Any]) -> int:
    """The layers a probe needs: one, as many as its layer_types, or past the last one the switches single
    out (a dense layer and a routed one; SmolLM3's fourth layer without RoPE)."""
    singled_out = (*switches.get("dense_layers", ()), *switches.get("nope_layers", ()))
    least = 2 if switches.get("dense_layers") else 1
    return max([least, len(switches.get("layer_types", ())), *(i + 1 for i in singled_out)])


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def probe_config(kind: str, shape: Constraints) -> ModelConfig | None:
    """The tiny config of `kind` in `shape`, or None if the shape excludes the kind (its family, Llama's
    grouped-query attention, or the switch that makes the kind, like llama3's RoPE scaling)."""
    family, n_heads, n_kv_heads = PROBE_KINDS[kind]
    if family not in shape.families or (family == "llama" and n_kv_heads < n_heads and not shape.grouped_query):
        return None
    config = tiny_config(kind, shape)
    return config if probe_kind(config) == kind and shape.refusal(config) is None else None


# The free-shape probe config of each kind (every model that runs a kind at all in a free shape runs it).
PROBE_CONFIGS: dict[str, ModelConfig] = {kind: tiny_config(kind, FREE_SHAPE) for kind in PROBE_KINDS}


@dataclass(frozen=True)
class Probe:
    """What building a model on a kind's probe configs gave: its capabilities and the shape of the
    config it accepted, or why there are none (each shape's reason)."""

    kind: str
    capabilities: frozenset[str]
    shape: Constraints | None = None
    unsupported: str | None = None
    error: str | None = None
    precision: str = ""  # the built model's precision class, and whether it declared it
    declared: bool = False
    quantized: bool = False  # the class compares next-token distributions with the original weights

    @classmethod
    def accepted(cls, kind: str, model: CheckedModel, shape: Constraints | None = None) -> Probe:
        """The probe of `kind` on which `model` was built (in `shape`)."""
        return cls(kind, model.capabilities, shape, precision=model.precision.label, declared=model.precision_declared,
                   quantized=model.precision.distribution is not None)  # fmt: skip

    def summary(self) -> str:
        """`logits, decode, ...` (and the shape, unless free), `unsupported (reason)`, or `broken (message)`."""
        if self.error is not None:
            return f"broken ({self.error})"
        if self.unsupported is not None:
            return f"unsupported ({self.unsupported})"
        found = ", ".join(c for c in CAPABILITIES if c in self.capabilities)
        return found if self.shape in (None, FREE_SHAPE) else f"{found} (on {self.shape.describe()})"


def _refusals(reasons: dict[str, str], shown: int = 3) -> str:
    """Each shape's reason for refusing (the first `shown` distinct ones), shapes with one reason together."""
    by_reason: dict[str, list[str]] = {}
    for label, reason in reasons.items():
        by_reason.setdefault(reason, []).append(label)
    if len(by_reason) == 1:
        return next(iter(by_reason))
    found = [f"{', '.join(labels)}: {reason}" for reason, labels in by_reason.items()]
    return "; ".join(found[:shown]) + (f"; and {len(found) - shown} more shapes refused" if len(found) > shown else "")


def probe_kind(config: ModelConfig) -> str:
    """The probe kind configs like `config` belong to: its family, and for Llama "llama3" with RoPE
    scaling, else "llama-gqa" with grouped-query attention, else "llama"."""
    if config.family != "llama":
        return config.family
    if config.rope_scaling is not None:
        return "llama3"
    return "llama-gqa" if config.n_kv_heads != config.n_heads else "llama"


def probe(spec: ModelSpec) -> list[Probe]:
    """Build `spec`'s model on each kind's probe configs (seeded weights), one per shape (its declared
    Constraints, else PROBE_SHAPES) until one is accepted, and record what it offers, once per run. With a fixed
    checkpoint (`--checkpoint`) whose kind every tiny probe was refused, the model is built on the
    checkpoint too: a model that runs only real sizes (llama.cpp's Q8_0 stores rows of 32) runs it."""
    fixed = checkpoint.current()
    key = (spec.name, id(spec.factory), fixed)
    if key not in _PROBED:
        probes = _tiny_probes(spec)
        if fixed is not None:
            kind = probe_kind(fixed.config)
            retry = spec.unselected(fixed.config.family) is None  # a family not selected stays refused
            probes = [_on_checkpoint(spec, p, fixed) if retry and p.kind == kind and p.unsupported else p
                      for p in probes]  # fmt: skip
        _PROBED[key] = (spec.factory, probes)
    return _PROBED[key][1]


# Each model's probes, once per run: the header, the properties (in the same process, without pytest-xdist)
# and the diagnosis of a failing model read the same (a program's probes start 13 or more processes). The
# factory is kept with them: another, at its address once it is collected, is not told its probes.
_PROBED: dict[tuple[str, int, checkpoint.FixedCheckpoint | None], tuple[object, list[Probe]]] = {}


def _on_checkpoint(spec: ModelSpec, refused: Probe, fixed: checkpoint.FixedCheckpoint) -> Probe:
    """`refused` probed again on the checkpoint's config and weights."""
    try:
        model = build_on_checkpoint(spec, fixed)
    except Unsupported as e:
        return dataclasses.replace(refused, unsupported=f"{refused.unsupported}; the checkpoint: {e}")
    except ContractViolation as e:
        return Probe(refused.kind, frozenset(), error=str(e))
    return Probe.accepted(refused.kind, model)


_ON_CHECKPOINT: dict[tuple[str, int, checkpoint.FixedCheckpoint], CheckedModel] = {}


def forget() -> None:
    """Forget each model's probes, and let go of the model `build_on_checkpoint` keeps (a full-size model's
    memory): the pytest plugin, as each run ends, so that a run in a longer-lived process (`verifier.check`)
    leaves none behind, nor is told what an earlier factory at the same address ran."""
    _PROBED.clear()
    _ON_CHECKPOINT.clear()


def build_on_checkpoint(spec: ModelSpec, fixed: checkpoint.FixedCheckpoint) -> CheckedModel:
    """`build_checked` on the checkpoint's config and weights, once: the last model built is kept (the
    probes and every property of a run use it; one full-size model at a time)."""
    key = (spec.name, id(spec.factory), fixed)
    if key not in _ON_CHECKPOINT:
        model = build_checked(spec, fixed.config, fixed.weights)
        _ON_CHECKPOINT.clear()
        _ON_CHECKPOINT[key] = model
    return _ON_CHECKPOINT[key]


def _tiny_probes(spec: ModelSpec) -> list[Probe]:
    shapes = {c.describe(): c for c in spec.constraints} if spec.constraints else PROBE_SHAPES
    probes = []
    for kind in PROBE_KINDS:
        unselected = spec.unselected(PROBE_KINDS[kind][0])
        if unselected is not None:
            probes.append(Probe(kind, frozenset(), unsupported=unselected))
            continue
        reasons: dict[str, str] = {}
        for label, shape in shapes.items():
            config = probe_config(kind, shape)
            if config is None:
                continue
            try:
                model = build_checked(spec, config, init_weights(config, seed=0))
            except Unsupported as e:
                reasons[label] = str(e) or type(e).__name__
            except ContractViolation as e:
                probes.append(Probe(kind, frozenset(), shape, error=str(e)))
                break
            else:
                probes.append(Probe.accepted(kind, model, shape))
                break
        else:
            if not reasons:
                reasons["declared"] = f"not among its declared constraints ({' | '.join(shapes)})"
            probes.append(Probe(kind, frozenset(), unsupported=_refusals(reasons)))
    return probes
