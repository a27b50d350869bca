"""docs/families.md names only what exists: each reference function, property and catalog mutant in its
table is looked up in the code, and every family of the suite has a row (so the page cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verifier.model.config import FAMILIES
from verifier.reference import layers, llama

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "families.md"


def _rows() -> list[list[str]]:
    """The cells of the feature table (header and rule rows left out)."""
    lines = [line for line in PAGE.read_text().splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:] if "---" not in line]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _property_names() -> set[str]:
    return {
        m
        for path in (ROOT / "properties").glob("test_*.py")
        for m in re.findall(r"^def (test_\w+)", path.read_text(), re.M)
    }


def test_the_table_has_a_row_for_every_family_but_gpt2() -> None:
    named = {family for row in _rows() for family in re.findall(r"[a-z0-9_]+", row[0])}
    assert set(FAMILIES) - {"gpt2"} <= named, f"families without a row: {sorted(set(FAMILIES) - {'gpt2'} - named)}"


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row[1][:40])
def test_every_name_in_a_row_exists(row: list[str]) -> None:
    from tests.meta.mutants import catalog

    _, _, _, reference, properties, mutants = row
    modules = {"layers": layers, "llama": llama}
    for name in _names(reference):
        module, _, function = name.partition(".")
        assert callable(getattr(modules[module], function.split(" ")[0], None)), f"no reference function {name}"
    defined = _property_names()
    for name in _names(properties):
        if name.startswith("test_") and name.endswith(".py"):
            assert (ROOT / "properties" / name).exists(), f"no property file {name}"
        else:
            assert name in defined, f"no property {name}"
    mutant_names = {m.__name__ for m in catalog.MUTANTS}
    for name in _names(mutants):
        assert name in mutant_names, f"{name} is not in the catalog's MUTANTS"
