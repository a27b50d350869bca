"""`verifier inspect CHECKPOINT`: what a model file holds, and everything its validation found."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from verifier.formats import Checkpoint, Tokenizer, detect_format, load_checkpoint, read_tokenizer
from verifier.formats.load import TOKENIZER
from verifier.formats.sources import locate
from verifier.model.config import describe


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="format, config, tensors and validation findings of a checkpoint",
        description="Read a checkpoint (HF directory or file, llama2.c .bin v0/v1/v2, llama2.c tokenizer.bin, or a "
        "repo id in the local Hugging Face cache), validate it, and describe it.",
    )
    p.add_argument("checkpoint", help="a file, a model directory, or a Hugging Face repo id (local cache only)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--download", action="store_true", help="download a repo id that is not in the local cache")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = locate(args.checkpoint, download=args.download)
    if detect_format(path) == TOKENIZER:
        report = tokenizer_report(path, read_tokenizer(path))
    else:
        report = checkpoint_report(load_checkpoint(path))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def checkpoint_report(ck: Checkpoint) -> dict[str, Any]:
    return {
        "path": str(ck.path),
        "format": ck.format,
        "version": ck.version,
        "config": ck.config.to_dict(),
        "summary": describe(ck.config),
        "shared_classifier": ck.shared_classifier,
        "parameters": ck.parameter_total,
        "tensors": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in ck.tensors],
        "findings": list(ck.findings),
    }


def tokenizer_report(path: Path, tok: Tokenizer) -> dict[str, Any]:
    longest = max((len(p) for p in tok.pieces), default=0)
    return {
        "path": str(path),
        "format": TOKENIZER,
        "version": None,
        "pieces": tok.vocab_size,
        "max_token_length": tok.max_token_length,
        "longest_piece": longest,
        "score_range": [min(tok.scores, default=0.0), max(tok.scores, default=0.0)],
        "first_pieces": [p.decode("utf-8", "backslashreplace") for p in tok.pieces[:8]],
        "findings": [],
    }


def render(report: dict[str, Any]) -> str:
    version = "" if report["version"] is None else f", version {report['version']}"
    lines = [f"{report['path']}", f"format: {report['format']}{version}"]
    if report["format"] == TOKENIZER:
        lines += [
            f"pieces: {report['pieces']:,} (max_token_length {report['max_token_length']}, "
            f"longest {report['longest_piece']})",
            f"scores: {report['score_range'][0]:g} .. {report['score_range'][1]:g}",
            f"first pieces: {report['first_pieces']}",
        ]
        return "\n".join(lines)
    lines += [
        f"config: {report['summary']}",
        f"classifier: {'shared with the token embedding' if report['shared_classifier'] else 'separate'}",
        f"parameters: {report['parameters']:,} (learned; a shared classifier counted once)",
        f"tensors ({len(report['tensors'])}):",
    ]
    rows = [(t["name"], t["dtype"], f"[{', '.join(map(str, t['shape']))}]") for t in report["tensors"]]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(2)]
    lines += [f"  {name:<{widths[0]}}  {dtype:<{widths[1]}}  {shape}" for name, dtype, shape in rows]
    lines.append(f"findings ({len(report['findings'])}):")
    lines += [f"  - {finding}" for finding in report["findings"]] or ["  none"]
    return "\n".join(lines)
