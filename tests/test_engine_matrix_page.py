"""docs/engine-matrix.md is the committed matrix (benchmarks/matrix/matrix.json) as `python
benchmarks/matrix.py --page` writes it, and every cell that ran and did not conform is explained by a
hand-checked difference (docs/engine_differences.toml) whose reproducing tests exist."""

from __future__ import annotations

import re

import pytest

import verifier
from benchmarks import matrix as published
from verifier.plugin.interface import declared_deviations
from verifier.report.matrix import JSON, Matrix, cell_spec

ROOT = published.ROOT


@pytest.fixture(scope="module")
def measured() -> Matrix:
    return Matrix.read(published.OUT / JSON)


def test_every_failing_cell_is_explained(measured: Matrix) -> None:
    differences = published.read_differences()
    unexplained = [
        cell_spec(c.model, c.family) for c in published.failing(measured) if not any(d.explains(c) for d in differences)
    ]
    assert not unexplained, f"cells with no difference in {published.DIFFERENCES.name}: {unexplained}"


def test_every_difference_explains_a_measured_cell(measured: Matrix) -> None:
    failing = published.failing(measured)
    stale = [d.title for d in published.read_differences() if not any(d.explains(c) for c in failing)]
    assert not stale, f"differences no failing cell of the committed matrix shows: {stale}"


def test_every_difference_names_tests_that_exist() -> None:
    for d in published.read_differences():
        assert d.reproduce, d.title
        for node in d.reproduce:
            path, _, name = node.partition("::")
            source = (ROOT / path).read_text()
            assert re.search(rf"^def {re.escape(name)}\(", source, re.M), f"{d.title}: no test {node}"


def test_the_page_is_the_committed_matrix(measured: Matrix) -> None:
    machine, commit = (path.read_text().strip() for path in (published.MACHINE, published.COMMIT))
    expected = published.page(measured, published.read_differences(), machine, commit)
    assert published.PAGE.read_text() == expected, "docs/engine-matrix.md is stale: python benchmarks/matrix.py --page"


def test_every_model_of_the_published_command_is_in_the_matrix(measured: Matrix) -> None:
    assert tuple(measured.models) == published.MODELS
    assert len(measured.cells) == len(published.MODELS) * len(measured.families)


def test_every_declaration_the_page_shows_is_one_the_suite_accepts() -> None:
    # It showed Deviation("logits_agree", ...), which Deviation refuses: a property is named by its test.
    pattern = r"`([^`]*verifier\.Deviation\([^`]*)`"
    shown = [m for d in published.read_differences() for m in re.findall(pattern, d.what)]
    assert shown
    for code in shown:
        build = type("Factory", (), {})()
        exec(code.replace("\n", " "), {"verifier": verifier, "build": build})  # the page's own text
        assert declared_deviations(build), code
