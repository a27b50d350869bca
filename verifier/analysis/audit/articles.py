"""The articles the audit checks, and where in them a claim is made.

The articles are not shipped: each claim is encoded in the audit with short quotes and the line
they are on (`Place`), so the audit runs anywhere. On a developer's machine the files are in
`../shared/seeds/`, or in the directory $VERIFIER_SEEDS_DIR names; a test checks every quote against
the line it names there, and so does loading the claims when $VERIFIER_SEEDS_DIR is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SEEDS_ENV = "VERIFIER_SEEDS_DIR"  # the directory of the article files, where a developer has them


@dataclass(frozen=True)
class Article:
    """One article file: the label rows use, its title, the file name, and what it is."""

    label: str
    title: str
    file: str
    about: str


ARTICLES = (
    Article(
        "en",
        "Life of a Tensor: How LLM's Matrix Dimensions Evolve",
        "000_b68c359b20f27c71.txt",
        "English, 2025-02-12; GPT-2 small's shapes and parameters",
    ),
    Article(
        "zh", "向量的一生：LLM矩阵维度的演变", "003_f2078ccfde1ebd0a.txt", "Chinese version of 'Life of a Tensor' (en)"
    ),
    Article(
        "vg",
        "Visualize Generation in LLM",
        "001_57e35c9895354afc.txt",
        "plain text, 2025-02-18; GPT-2 small's shapes, padded to 1,024",
    ),
    Article(
        "vg.md",
        "Visualize Generation in LLM",
        "002_f525564c5aa852c0.txt",
        "the Markdown source of vg (other line numbers)",
    ),
    Article(
        "ps",
        "How Large Language Model Works in the Prediction Stage",
        "004_969a621ea2433ed3.txt",
        "Zhe Li; llama2.c's stories15M, one token through the network",
    ),
)
BY_LABEL = {a.label: a for a in ARTICLES}


@dataclass(frozen=True)
class Place:
    """Where a claim is made: an article's label, the line (1-based), and a short quote from it."""

    article: str
    line: int
    quote: str


def at(article: str, line: int, quote: str) -> Place:
    """A place; the article label must be one of ARTICLES."""
    if article not in BY_LABEL:
        raise ValueError(f"unknown article {article!r}; known: {', '.join(BY_LABEL)}")
    return Place(article, line, quote)


def where(places: Sequence[Place]) -> str:
    """`en l.72, 74; zh l.72`: the places grouped by article, in the order of ARTICLES."""
    parts = []
    for article in ARTICLES:
        lines = sorted({p.line for p in places if p.article == article.label})
        if lines:
            parts.append(f"{article.label} l.{', '.join(map(str, lines))}")
    return "; ".join(parts)
