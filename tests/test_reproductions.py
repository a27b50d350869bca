"""The engines' minimal reproductions (examples/reproductions/*.py, shown on docs/engine-matrix.md):
every difference an engine computes has one, its section exists, and each still reproduces it (the
script exits 0; 1 once the engine computes what transformers does, which makes the page stale)."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks import matrix as published
from tests.plugin.project import ROOT, run

DIFFERENCES = published.read_differences()
# The module each script's engine imports as, by the script's name.
ENGINES = {
    "ctranslate2_differences.py": "ctranslate2",
    "llamacpp_differences.py": "llama_cpp",
    "litgpt_differences.py": "litgpt.model",
    "transformer_lens_differences.py": "transformer_lens",
}


def test_every_engine_s_difference_has_a_minimal_reproduction_whose_section_exists() -> None:
    for d in DIFFERENCES:
        assert d.minimal, f"{d.title}: no minimal reproduction"
        path, section = d.script
        source = (ROOT / path).read_text()
        assert f"# --8<-- [start:{section}]" in source and f"# --8<-- [end:{section}]" in source, d.minimal
        assert f'"{section}":' in source or "CASES" not in source, f"{d.minimal}: not among the script's CASES"
        assert path.rsplit("/", 1)[-1] in ENGINES, path


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package missing
        return False


@pytest.mark.slow  # torch, transformers and the engine imported, a model converted: 10 to 30 s each
@pytest.mark.parametrize("difference", DIFFERENCES, ids=[d.minimal.rsplit("/", 1)[-1] for d in DIFFERENCES])
def test_the_minimal_reproduction_still_shows_the_difference(difference: published.Difference) -> None:
    path, section = difference.script
    module = ENGINES[path.rsplit("/", 1)[-1]]
    if not _installed(module):
        pytest.skip(f"{module} is not installed here")
    done = run(ROOT, str(ROOT / path), section, timeout=600)
    print(done.stdout)
    assert done.returncode == 0, f"{difference.title}: the reproduction no longer shows it\n{done}"
