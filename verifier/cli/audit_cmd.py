"""`verifier audit`: the source articles' claims, each checked with the suite's own code."""

from __future__ import annotations

import argparse
import json
from typing import Any

from verifier.analysis import audit
from verifier.formats.data import DATA_DIR_ENV


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "audit",
        help="check the source articles' claims: claim / as stated / exact / verdict",
        description="Check each concrete claim of the source articles with the suite's own tokenizer, parameter "
        "formula and reference layers, and print claim / as stated / exact / verdict.",
    )
    p.add_argument(
        "--tokenizer",
        metavar="DIR",
        help=f"GPT-2 tokenizer directory (vocab.json, merges.txt); default: ${DATA_DIR_ENV}, "
        "then the Hugging Face cache",
    )
    p.add_argument("--pad", type=int, default=1024, metavar="N", help="the padded length to check (default 1024)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    claims = audit.audit(tokenizer_path=args.tokenizer, pad_to=args.pad, seed=args.seed)
    print(json.dumps(audit.to_json(claims), indent=2) if args.json else audit.render(claims))
    return 0
