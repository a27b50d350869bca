"""The family reference, written from the code at build time so that it cannot drift: per family, the
`ModelConfig` fields it has (each field's meaning from its comment in `verifier/model/config.py`, the
`config.json` keys it is read from, `HF_KEYS`, and whether the family fixes it or leaves it free,
`FAMILY_SWITCHES`), the canonical weights and their shapes (`weight_shapes`), and each traced stage
with its shape, what it holds (`stages.HOLDS`) and the weights it is computed with (`stage_weights`).

Shapes are given in the sizes' names: they are computed on an example config whose sizes are all
different numbers (`SIZES`), each number then named."""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

from verifier.model import stages
from verifier.model.config import FAMILIES, FAMILY_SWITCHES, HF_KEYS, ModelConfig, RopeScaling
from verifier.model.weights import weight_shapes
from verifier.plugin.diagnosis import SWITCH_PROBES
from verifier.plugin.probes import FREE_SHAPE, MOE_SIZES, PROBE_KINDS, tiny_config

# The example config's sizes, each a number no other size takes (T: the tokens of the traced sequence).
SIZES = {"vocab_size": 101, "n_ctx": 64, "d_model": 40, "n_heads": 4, "n_kv_heads": 2, "d_ff": 56, "n_layers": 2}
SWITCHED_SIZES = {"head_dim": 6, "n_experts": 8, "top_k": 3, "d_expert": 28, "d_shared_expert": 36}
T = 7
# The keys a field is read from that `HF_KEYS` does not list (read apart: `verifier.model.config._rope`).
OTHER_KEYS = {"rope_theta": ("rope_parameters.rope_theta", "rope_theta")}
# Fields every family has (its sizes); the rest are switches, fixed by a family or free in it.
SIZE_FIELDS = ("vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "norm_eps",
               "tie_embeddings", "rope_theta")  # fmt: skip


def field_meanings() -> dict[str, str]:
    """Each `ModelConfig` field's comment, as its source states it."""
    source = inspect.getsource(ModelConfig)
    return dict(re.findall(r"^    (\w+): [^=#\n]+(?:= [^#\n]+)?  # (.+)$", source, re.M))


def example_config(family: str) -> ModelConfig:
    """The family's probe config with every free switch on (`SWITCH_PROBES`), at `SIZES`."""
    kind = next(k for k, (f, _, _) in PROBE_KINDS.items() if f == family)
    free = FAMILY_SWITCHES[family][1]  # type: ignore[index]
    extra: dict[str, Any] = {}
    for name in free:
        if name not in MOE_SIZES:
            extra |= SWITCH_PROBES[name]
    config = tiny_config(kind, FREE_SHAPE, extra)
    sizes = {**SIZES, **{k: v for k, v in SWITCHED_SIZES.items() if getattr(config, k)}}
    if family == "gpt2":
        sizes["n_kv_heads"] = sizes["n_heads"]
    if "rotary_dim" in free or config.rotary_dim:
        sizes["rotary_dim"] = 4
    if config.sliding_window is not None:
        sizes["sliding_window"] = 5
    return dataclasses.replace(config, **sizes)


def symbols(config: ModelConfig) -> dict[int, str]:
    """Each size of `config` (and the products weights take) -> its name; the first name of a number wins."""
    named = {
        "d_model": config.d_model,
        "V": config.vocab_size,
        "n_ctx": config.n_ctx,
        "d_ff": config.d_ff,
        "n_heads·d_head": config.n_heads * config.d_head,
        "n_kv_heads·d_head": config.n_kv_heads * config.d_head,
        "(n_heads + 2·n_kv_heads)·d_head": (config.n_heads + 2 * config.n_kv_heads) * config.d_head,
        "3·d_model": 3 * config.d_model,
        "2·d_ff": 2 * config.d_ff,
        "d_head": config.d_head,
        "n_heads": config.n_heads,
        "n_kv_heads": config.n_kv_heads,
        "n_experts": config.n_experts,
        "top_k": config.top_k,
        "d_expert": config.d_expert or 0,
        "2·d_expert": 2 * (config.d_expert or 0),
        "d_shared_expert": config.d_shared_expert or 0,
        "T": T,
    }
    found: dict[int, str] = {}
    for name, value in named.items():
        found.setdefault(value, name)
    found.pop(0, None)
    return found


def _shape(shape: tuple[int, ...], named: dict[int, str]) -> str:
    return "[" + ", ".join(named.get(n, str(n)) for n in shape) + "]"


def _weights(config: ModelConfig, named: dict[int, str]) -> list[str]:
    """The weight table, each layer's (`{i}`) and each expert's (`{j}`) once."""
    rows = ["| weight | shape |", "|---|---|"]
    seen = set()
    for name, shape in weight_shapes(config).items():
        name = re.sub(r"\.(h|layers)\.\d+\.", r".\1.{i}.", name)
        name = re.sub(r"\.experts\.\d+\.", ".experts.{j}.", name)
        if name not in seen:
            seen.add(name)
            rows.append(f"| `{name}` | {_shape(shape, named)} |")
    return rows


def _stages(config: ModelConfig, named: dict[int, str]) -> list[str]:
    """The stage table: the stages outside the layers, and each op of the layers' first of each kind."""
    rows = ["| stage | shape | holds | computed with |", "|---|---|---|---|"]
    shown: set[str] = set()
    for stage, shape in stages.stage_shapes(config, T).items():
        _, op = stages.split_stage(stage)
        if op in shown:
            continue
        shown.add(op)
        weights = ", ".join(f"`{w}`" for w in stages.stage_weights(config, stage)) or "-"
        rows.append(f"| `{stage}` | {_shape(shape, named)} | {stages.HOLDS[op]} | {weights} |")
    return rows


def _fields(family: str, meanings: dict[str, str]) -> list[str]:
    fixed, free = FAMILY_SWITCHES[family]  # type: ignore[index]
    keys = HF_KEYS.get(family, HF_KEYS["llama"] if family != "gpt2" else HF_KEYS["gpt2"])
    types = {f.name: str(f.type) for f in dataclasses.fields(ModelConfig)}
    rows = ["| field | type | in this family | config.json | what it is |", "|---|---|---|---|---|"]
    for name in (*SIZE_FIELDS, *fixed, *free):
        if family == "gpt2" and name == "rope_theta":
            continue
        sized = name in SIZE_FIELDS or name in MOE_SIZES  # a MoE family's experts are its MLP's sizes
        state = "size" if sized else f"always `{fixed[name]!r}`" if name in fixed else "free switch"
        read = ", ".join(f"`{k}`" for k in keys.get(name, OTHER_KEYS.get(name, ()))) or "-"
        kind = types[name].replace("|", "or")
        rows.append(f"| `{name}` | `{kind}` | {state} | {read} | {meanings.get(name, '')} |")
    return rows


def render() -> str:
    meanings = field_meanings()
    out = [
        "# Family reference",
        "",
        "Generated from the code when the site is built (`docs/gen/family_reference.py`): for each family, the",
        "`ModelConfig` fields it has, the `config.json` keys each is read from, the canonical weights (the",
        "names `transformers` stores, which the suite hands a factory) and each stage a `trace()` names, with",
        "what it holds. Shapes are in the sizes' names, for a config with every free switch of the family on;",
        "a switch that is off removes its weights and stages (no biases, no shared expert, ...). `T` is the",
        "traced sequence's length.",
        "",
        "A factory reads `config.d_head` for the head size (`head_dim` if set, else `d_model // n_heads`) and",
        "`config.rotated_dims` for the dims RoPE rotates. A family's fixed fields are part of every config of it:",
        'to build one by hand, give them to `ModelConfig(...)`, or let `verifier.from_hf_dict({"model_type":',
        "\"qwen3\", ...})` read a `config.json`'s keys with `transformers`' defaults. `rope_scaling` is a",
        f"`verifier.RopeScaling` ({' '.join((RopeScaling.__doc__ or '').split())})",
        "",
    ]
    for family in FAMILIES:
        config = example_config(family)
        named = symbols(config)
        out += [f"## {family}", "", "### Config fields", "", *_fields(family, meanings), ""]
        out += ["### Weights", "", *_weights(config, named), ""]
        out += ["### Traced stages", "", *_stages(config, named), ""]
    return "\n".join(out)
