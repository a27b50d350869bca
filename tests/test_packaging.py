"""The wheel holds every package of the tree: pyproject.toml lists them by hand, because the suite's
folders (`properties/`, `fixtures/`) are mapped under `verifier.` and package discovery cannot map."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

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


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"constraints.txt pins exact versions, found {line!r}"
            pins[canonicalize_name(requirement.name)] = Version(specifier.version)
    return pins


def test_constraints_pin_every_dependency_within_its_range() -> None:
    """What CI installs (constraints.txt) is what pyproject.toml allows: a range changed so that it
    excludes the pinned version, or a dependency added without a pin, fails here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pins = _pins()
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if name == canonicalize_name(project["name"]):  # dev = the project's own extra, and tools
            continue
        assert name in pins, f"{requirement} has no pin in constraints.txt"
        pinned = pins[name]
        assert requirement.specifier.contains(pinned), f"constraints.txt pins {name}=={pinned}: not {requirement}"


def test_the_core_needs_neither_torch_nor_transformers() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    assert not core & {"torch", "transformers", "huggingface-hub", "tokenizers"}, core
    extra = {canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["transformers"]}
    assert extra == {"torch", "transformers"}


def test_parallel_runs_need_only_the_core() -> None:
    """`verifier check -- -n auto`, as the docs show it, works from `pip install lm-verifier`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    assert "pytest-xdist" in core, core


def test_the_suite_s_own_pytest_configuration_is_package_data() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "pytest.ini" in data["verifier.report"] and (ROOT / "verifier" / "report" / "pytest.ini").is_file()


def test_the_audit_s_claims_file_is_package_data() -> None:
    # verifier audit reads its claims from this file at import: a wheel without it could not run.
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    claims = ROOT / "verifier" / "data" / "audit" / "claims.toml"
    assert claims.is_file() and any(claims.relative_to(ROOT / "verifier").match(p) for p in data["verifier"])


def test_tox_s_docs_environment_has_what_the_docs_tests_import() -> None:
    # `tox -e docs` failed on a fresh clone: its environment had the docs extra alone, no torch, and the
    # PyTorch page's snippets failed (2 failed).
    import configparser

    tox = configparser.ConfigParser()
    tox.read(ROOT / "tox.ini")
    extras = {e.strip() for e in tox["testenv:docs"]["extras"].replace("\n", ",").split(",") if e.strip()}
    assert {"docs", "dev"} <= extras, extras


def test_the_changelog_s_newest_release_is_the_package_s_version_and_says_what_changes_for_verdicts() -> None:
    # There was no changelog: four implementations that conformed on one version failed on the next, and
    # nothing in the project said why (issue 47).
    import re
    import tomllib

    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, flags=re.MULTILINE)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert releases and releases[0] == version, (releases, version)
    newest = changelog.split(f"## [{version}]", 1)[1].split("\n## [", 1)[0]
    assert "### Verdicts that change, and what to declare" in newest
