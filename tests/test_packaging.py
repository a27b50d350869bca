"""The wheel holds every package of the tree: pyproject.toml lists them by hand, because the suite's
folders (`properties/`, `fixtures/`) are mapped under `verifier.` and package discovery cannot map."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tree_packages() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {"verifier": ROOT / "verifier", **{name: ROOT / d for name, d in config["package-dir"].items()}}
    found = set()
    for name, root in roots.items():
        for init in root.rglob("__init__.py"):
            relative = init.parent.relative_to(root).parts
            found.add(".".join((name, *relative)))
    return found


def test_pyproject_lists_every_package_of_the_tree() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = _tree_packages()
    assert listed == tree, f"packages missing from pyproject.toml: {sorted(tree - listed)}; listed but absent: " + str(
        sorted(listed - tree)
    )
