"""The source articles' claims, each checked with the suite's own code (`verifier audit`).

Every concrete, checkable claim of the five article files (`articles.ARTICLES`) is a `Claim`: GPT-2's
in `gpt2_claims`, stories15M's in `stories15m_claims`, each with its places (article, line, quote),
the value as stated and a check that reads the inputs (`inputs.Inputs`: seeded runs of the NumPy
reference, the real tokenizers, published configs, llama2.c's definition, transformers, trained
weights where present). A translation or a repeat of one claim is one claim with several places.
`audit` checks them all; `verdict.verdict` gives every row its verdict by one rule (`verdict.RULE`);
`report` prints the table, Markdown or JSON, of every row or of those `select` picks (by article, by verdict).
"""

from __future__ import annotations

from pathlib import Path

from verifier.analysis.audit import gpt2_claims, stories15m_claims
from verifier.analysis.audit.claim import Claim, Row, check
from verifier.analysis.audit.inputs import AuditError, Inputs
from verifier.analysis.audit.report import markdown, render, select, summary, to_json

__all__ = [
    "CLAIMS",
    "AuditError",
    "Claim",
    "Inputs",
    "Row",
    "audit",
    "check",
    "markdown",
    "render",
    "select",
    "summary",
    "to_json",
]

# (group, claim): every claim, in the order the rows are printed.
CLAIMS: tuple[tuple[str, Claim], ...] = (
    *((gpt2_claims.GROUP, c) for c in gpt2_claims.CLAIMS),
    *((stories15m_claims.GROUP, c) for c in stories15m_claims.CLAIMS),
)


def audit(
    inputs: Inputs | None = None, *, tokenizer_path: str | Path | None = None, pad_to: int = 1024, seed: int = 0
) -> list[Row]:
    """Every claim, checked (with `inputs`, or inputs built from the options)."""
    inputs = inputs or Inputs(tokenizer_path=tokenizer_path, pad_to=pad_to, seed=seed)
    return [check(claim, inputs, group) for group, claim in CLAIMS]
