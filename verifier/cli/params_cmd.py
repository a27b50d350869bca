"""`verifier params MODEL`: the exact parameter count, component by component; `--list` the table."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier.formats.config_json import config_from_fields
from verifier.formats.sources import SourceError, SourceNotFound, hf_config_fields, load_config
from verifier.model.config import describe
from verifier.model.known_models import KnownModel, known_models
from verifier.model.params import Architecture, ParamTable, from_config, parameter_table
from verifier.model.params import from_hf_dict as params_from_hf_dict
from verifier.model.presets import PRESETS


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "params",
        help="exact parameter count with a breakdown by component",
        description="Print the parameters of a model component by component, with the exact total.",
    )
    p.add_argument(
        "model",
        nargs="?",
        help="a preset (gpt2, llama2c-stories15M, ...), a known model (llama-2-7b, mixtral-8x7b, ...; see --list), "
        "a checkpoint file or directory, a config.json, or a Hugging Face repo id in the local cache",
    )
    p.add_argument("--list", action="store_true", help="list the presets and known models with their totals")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--download", action="store_true", help="download a repo id that is not in the local cache")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class _Counted:
    """A model resolved for counting: its counting view and table, a one-line description, its config as JSON."""

    name: str
    architecture: Architecture
    table: ParamTable
    description: str
    config: dict[str, Any]
    source: str | None


def _counted(spec: str, *, download: bool) -> _Counted:
    if spec not in PRESETS and spec in known_models() and not Path(spec).exists():
        return _counted_known(known_models()[spec])
    found = hf_config_fields(spec, download=download)
    if found is not None:  # counted from config.json itself: Mistral, Qwen2, Mixtral, ... too
        path, fields = found
        a = config_from_fields(path, fields, params_from_hf_dict)
        return _Counted(spec, a, parameter_table(a), _describe_known(a, fields), fields, None)
    config = load_config(spec, download=download)
    a = from_config(config)
    return _Counted(spec, a, parameter_table(a), describe(config), config.to_dict(), None)


def _counted_known(model: KnownModel) -> _Counted:
    a = model.architecture
    return _Counted(model.name, a, parameter_table(a), _describe_known(a, model.fields), model.fields, model.source)


def _describe_known(a: Architecture, fields: dict[str, Any]) -> str:
    heads = f"{a.n_heads} heads" + (f" ({a.n_kv_heads} kv heads)" if a.n_kv_heads != a.n_heads else "")
    extras = [f"{a.n_experts} experts ({a.experts_per_token} per token)"] if a.n_experts else []
    extras += [f"{a.n_layers - a.moe_layers} dense layers"] if a.n_experts and a.moe_layers < a.n_layers else []
    extras += [f"d_expert {a.d_expert}"] if a.n_experts and a.d_expert != a.d_ff else []
    extras += [f"shared expert {a.d_shared_expert}"] if a.d_shared_expert else []
    extras += ["fused q/k/v"] if a.fused_qkv else []
    extras += ["fused gate/up"] if a.fused_gate_up else []
    extras += [f"d_head {a.d_head}"] if a.d_head * a.n_heads != a.d_model else []
    extras += ["q/k/v biases"] if a.qkv_bias else []
    extras += ["output bias"] if a.o_bias else []
    extras += [f"q/k norms{' over the projection' if a.qk_norm_whole else ''}"] if a.qk_norm else []
    extras += [f"norms after attention and MLP{'' if a.pre_norm else ' only'}"] if a.sandwich_norm else []
    return ", ".join([
        fields["model_type"] + (f" ({a.family} layout)" if fields["model_type"] != a.family else ""),
        f"{a.n_layers} layers", f"d_model {a.d_model}", heads,
        f"d_ff {a.d_ff}", *extras, f"vocab {a.vocab_size:,}", f"n_ctx {a.n_ctx:,}",
    ])  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.list:
        entries = _listing()
        print(json.dumps(entries, indent=2) if args.json else render_listing(entries))
        return 0
    if args.model is None:
        raise SourceError("give a MODEL (a preset, a known model, a checkpoint, a config.json or a repo id), or --list")
    try:
        counted = _counted(args.model, download=args.download)
    except SourceNotFound as e:  # params also counts the known models: name them too
        raise SourceNotFound(f"{e}, nor a known model ({', '.join(known_models())})") from None
    print(json.dumps(to_json(counted), indent=2) if args.json else render(counted))
    return 0


def render(counted: _Counted) -> str:
    table = counted.table
    rows = [(r.component, r.shape, f"{r.count:,}", f"{table.share(r):.2%}") for r in table.rows]
    rows.append(("total (learned parameters)", "", f"{table.total:,}", "100.00%"))
    if table.active != table.total:
        share = f"{table.active / table.total:.2%}"
        rows.append(("active per token (routed experts only)", "", f"{table.active:,}", share))
    if table.stored_rope:
        rope_shape = f"2 x [{counted.architecture.n_ctx}, {counted.architecture.d_head // 2}]"
        rows.append(("RoPE cos/sin tables (llama2.c stores them)", rope_shape, f"{table.stored_rope:,}", ""))
        rows.append(("total with llama2.c's stored RoPE tables", "", f"{table.total_with_stored_rope:,}", ""))
    widths = [max(len(row[i]) for row in [*rows, _HEADER]) for i in range(4)]
    lines = [f"{counted.name}: {counted.description}"]
    if counted.source:
        lines.append(f"source: {counted.source}")
    lines.append("")
    for i, row in enumerate([_HEADER, *rows]):
        if i == 1 or row[0].startswith("total (learned"):
            lines.append("  ".join("-" * w for w in widths))
        lines.append(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}")
    return "\n".join(lines)


_HEADER = ("component", "shape", "count", "share")


def to_json(counted: _Counted) -> dict[str, Any]:
    table = counted.table
    return {
        "model": counted.name,
        "source": counted.source,
        "config": counted.config,
        "components": [
            {"component": r.component, "shape": r.shape, "count": r.count, "share": table.share(r)} for r in table.rows
        ],
        "total": table.total,
        "active": table.active,
        "stored_rope": table.stored_rope,
        "total_with_stored_rope": table.total_with_stored_rope,
    }


def _listing() -> list[dict[str, Any]]:
    """Every preset and known model, by total; a name that is both is listed once."""
    entries = {}
    for name, config in PRESETS.items():
        a = from_config(config)
        entries[name] = {"name": name, "kind": "preset", "family": a.family, "n_layers": a.n_layers,
                         "d_model": a.d_model, "total": parameter_table(a).total, "source": None}  # fmt: skip
    for name, model in known_models().items():
        a = model.architecture
        if name in entries:
            entries[name].update(kind="preset, published config", source=model.source)
            continue
        table = parameter_table(a)
        entries[name] = {"name": name, "kind": "published config", "family": model.fields["model_type"],
                         "n_layers": a.n_layers, "d_model": a.d_model, "total": table.total,
                         "source": model.source}  # fmt: skip
        if table.active != table.total:
            entries[name]["active"] = table.active
    return sorted(entries.values(), key=lambda e: (e["total"], e["name"]))


def render_listing(entries: list[dict[str, Any]]) -> str:
    header = ("name", "kind", "type", "layers", "d_model", "total", "source")
    rows = [header] + [
        (e["name"], e["kind"], e["family"], str(e["n_layers"]), str(e["d_model"]),
         f"{e['total']:,}" + (f" ({e['active']:,} active)" if "active" in e else ""), e["source"] or "built in")
        for e in entries
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    right = {3, 4, 5}  # the numbers

    def line(row: tuple[str, ...]) -> str:
        cells = (
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        return "  ".join(cells).rstrip()

    return "\n".join(line(row) for row in rows)


def markdown_listing() -> str:
    """`--list` as the Markdown table docs/how-to/inspect.md shows (a test checks the two are the same)."""
    lines = ["| model | type | layers | d_model | total (learned parameters) | source |", "|---|---|--:|--:|--:|---|"]
    for e in _listing():
        total = f"{e['total']:,}" + (f" ({e['active']:,} active)" if "active" in e else "")
        source = f"[config.json]({e['source']})" if e["source"] else "built in"
        lines.append(f"| `{e['name']}` | {e['family']} | {e['n_layers']} | {e['d_model']} | {total} | {source} |")
    return "\n".join(lines)
