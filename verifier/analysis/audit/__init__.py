"""The source articles' claims, each checked with the suite's own code (`verifier audit`).

Every concrete, checkable claim of the five article files (`articles.ARTICLES`) is a row of the
claims file, `verifier/data/audit/claims.toml` (`claims.load` reads and validates it): its places
(article, line, quote), the value as stated, and the checker (`checkers.CHECKERS`) that reads the
inputs (`inputs.Inputs`: seeded runs of the NumPy reference, the real tokenizers, published configs,
llama2.c's definition, transformers, trained weights where present). A translation or a repeat of one
claim is one claim with several places; the claims deliberately not checked are rows too, with why.
`audit` checks them all; `verdict.verdict` gives every row its verdict by one rule (`verdict.RULE`);
`report` prints the table, Markdown or JSON, of every row or of those `select` picks (by article, by verdict).
"""

from __future__ import annotations

from pathlib import Path

from verifier.analysis.audit.claim import Claim, Row, check
from verifier.analysis.audit.claims import load
from verifier.analysis.audit.inputs import AuditError, Inputs
from verifier.analysis.audit.report import markdown, render, select, summary, to_json

__all__ = [
    "CLAIMS",
    "GROUPS",
    "NOT_CHECKED",
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

_LOADED = load()
GROUPS: dict[str, str] = _LOADED.groups
# (group, claim): every checked claim, in the order the rows are printed.
CLAIMS: tuple[tuple[str, Claim], ...] = _LOADED.checked
NOT_CHECKED = _LOADED.not_checked


def audit(
    inputs: Inputs | None = None, *, tokenizer_path: str | Path | None = None, pad_to: int = 1024, seed: int = 0
) -> list[Row]:
    """Every claim, checked (with `inputs`, or inputs built from the options)."""
    inputs = inputs or Inputs(tokenizer_path=tokenizer_path, pad_to=pad_to, seed=seed)
    return [check(claim, inputs, group) for group, claim in CLAIMS]
