"""mkdocs hooks: the pages generated from the code when the site is built (never committed as Markdown,
so they cannot go stale): the command-line reference, the property catalog, the family reference (config
fields, weights, stages), benchmarks/RESULTS.md (the measurements' tables, kept where the benchmarks write
them) as a page of the site, and the plots drawn from the figures the benchmarks commit (benchmarks/data/)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # mkdocs loads this file alone; the generators are beside it

import benchmark_plots
import cli_reference
import family_reference
import property_catalog
from mkdocs.structure.files import File, Files

# The measurements' tables name every property, family and option: without this the site's search ranks
# them above the guides that explain them (Material for MkDocs' search boost, front matter of the page).
RANKED_LOW = "---\nsearch:\n  boost: 0.1\n---\n\n"


def generated_pages() -> dict[str, str]:
    """{path in the site's docs: Markdown} of every generated page."""
    return {
        "reference/cli.md": cli_reference.render(),
        "reference/properties.md": property_catalog.render(),
        "reference/families.md": family_reference.render(),
        "benchmarks/results.md": RANKED_LOW + property_catalog.RESULTS.read_text(encoding="utf-8"),
        **benchmark_plots.render(),
    }


def on_files(files: Files, config: Any) -> Files:
    for path, text in generated_pages().items():
        files.append(File.generated(config, path, content=text))
    return files
