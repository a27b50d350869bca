"""`verifier audit`: the source articles' claims, each checked with the suite's own code."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from verifier.analysis import audit
from verifier.analysis.audit.articles import BY_LABEL
from verifier.analysis.audit.inputs import STORIES15M_ENV, STORIES15M_HF
from verifier.analysis.audit.verdict import VERDICTS
from verifier.cli import arguments
from verifier.formats.data import DATA_DIR_ENV


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "audit",
        help="check the source articles' claims: claim / as stated / exact / verdict",
        description="Check every concrete claim of the five source articles (named at the top of the output) with "
        "the suite's own tokenizer, parameter formula, published configs, llama2.c's definition of stories15M and "
        "reference layers, and print claim / as stated / exact / verdict, with why and how each was checked. "
        "Claims about trained weights are checked when the weights are here (GPT-2 in the Hugging Face cache or "
        "--gpt2; stories15M.bin with --stories15m or in the cache), and are 'not checkable' otherwise.",
    )
    p.add_argument(
        "--tokenizer",
        metavar="DIR",
        help=f"GPT-2 tokenizer directory (vocab.json, merges.txt); default: ${DATA_DIR_ENV}, "
        "then the Hugging Face cache",
    )
    p.add_argument("--pad", type=int, default=1024, metavar="N", help="the padded length to check (default 1024)")
    p.add_argument("--seed", type=arguments.seed, default=0, help="seed of the random weights (default 0)")
    p.add_argument(
        "--gpt2",
        metavar="PATH",
        help="GPT-2 small's trained checkpoint (a directory, file or cached repo id); default: openai-community/gpt2 "
        "from the Hugging Face cache if it is there (never downloaded)",
    )
    p.add_argument(
        "--stories15m",
        metavar="PATH",
        help=f"llama2.c's trained stories15M.bin; default: ${STORIES15M_ENV}, then {STORIES15M_HF[1]} of "
        f"{STORIES15M_HF[0]} from the Hugging Face cache if it is there (never downloaded)",
    )
    p.add_argument(
        "--article",
        action="append",
        choices=list(BY_LABEL),
        default=[],
        help="only the claims made in this article (its label; repeat for several). Rows keep their numbers",
    )
    p.add_argument(
        "--verdict",
        action="append",
        choices=VERDICTS,
        default=[],
        help="only the claims with this verdict (repeat for several; quote 'not checkable')",
    )
    output = p.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON (every field) instead of a table")
    output.add_argument("--markdown", action="store_true", help="print Markdown tables instead of a terminal table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inputs = audit.Inputs(
        tokenizer_path=args.tokenizer,
        pad_to=args.pad,
        seed=args.seed,
        gpt2=args.gpt2,
        stories15m=args.stories15m,
        progress=lambda message: print(f"audit: {message} ...", file=sys.stderr, flush=True),
    )
    inputs.load_named()
    rows = audit.select(audit.audit(inputs), args.article, args.verdict)
    # The claims not checked have no verdict: a --verdict filter leaves them out.
    not_checked = [
        c
        for c in audit.NOT_CHECKED
        if not args.verdict and (not args.article or {p.article for p in c.places} & set(args.article))
    ]
    if args.json:
        print(json.dumps(audit.to_json(rows, not_checked), indent=2, ensure_ascii=False))
    else:
        print(audit.markdown(rows, not_checked) if args.markdown else audit.render(rows, not_checked))
    return 0
