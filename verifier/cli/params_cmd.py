"""`verifier params MODEL`: the exact parameter count, component by component."""

from __future__ import annotations

import argparse
import json
from typing import Any

from verifier.config import ModelConfig
from verifier.params import ParamTable, parameter_table
from verifier.sources import load_config


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "params",
        help="exact parameter count with a breakdown by component",
        description="Print the parameters of a model component by component, with the exact total.",
    )
    p.add_argument(
        "model",
        help="a preset name (e.g. gpt2, llama2c-stories15M), a checkpoint file or directory, a config.json, "
        "or a Hugging Face repo id in the local cache",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--download", action="store_true", help="download a repo id that is not in the local cache")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.model, download=args.download)
    table = parameter_table(config)
    print(json.dumps(to_json(args.model, config, table), indent=2) if args.json else render(args.model, config, table))
    return 0


def describe(config: ModelConfig) -> str:
    """One line of the sizes that matter: `llama, 6 layers, d_model 288, ...`."""
    heads = f"{config.n_heads} heads"
    if config.n_kv_heads != config.n_heads:
        heads += f" ({config.n_kv_heads} kv heads)"
    return (
        f"{config.family} family, {config.n_layers} layers, d_model {config.d_model}, {heads}, "
        f"d_ff {config.d_ff}, vocab {config.vocab_size:,}, n_ctx {config.n_ctx:,}"
    )


def render(name: str, config: ModelConfig, table: ParamTable) -> str:
    rows = [(r.component, r.shape, f"{r.count:,}", f"{table.share(r):.2%}") for r in table.rows]
    rows.append(("total (learned parameters)", "", f"{table.total:,}", "100.00%"))
    if table.stored_rope:
        rows.append(("RoPE cos/sin tables (llama2.c stores them)", f"2 x [{config.n_ctx}, {config.d_head // 2}]",
                     f"{table.stored_rope:,}", ""))  # fmt: skip
        rows.append(("total with llama2.c's stored RoPE tables", "", f"{table.total_with_stored_rope:,}", ""))
    widths = [max(len(row[i]) for row in [*rows, _HEADER]) for i in range(4)]
    lines = [f"{name}: {describe(config)}", ""]
    for i, row in enumerate([_HEADER, *rows]):
        if i == 1 or row[0].startswith("total (learned"):
            lines.append("  ".join("-" * w for w in widths))
        lines.append(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}")
    return "\n".join(lines)


_HEADER = ("component", "shape", "count", "share")


def to_json(name: str, config: ModelConfig, table: ParamTable) -> dict[str, Any]:
    return {
        "model": name,
        "config": config.to_dict(),
        "components": [
            {"component": r.component, "shape": r.shape, "count": r.count, "share": table.share(r)} for r in table.rows
        ],
        "total": table.total,
        "stored_rope": table.stored_rope,
        "total_with_stored_rope": table.total_with_stored_rope,
    }
