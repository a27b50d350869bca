"""Which of the optional extras' packages start-up imports, for tests/cli/test_startup.py and
benchmarks/startup.py (which loads a copy of this file, so that it runs on another tree too).

`IMPORT_ALL` is a program that imports what a run imports before any model is built (the package, the CLI,
the plugin with every built-in model registered, every module of the suite) and prints the packages of
`HEAVY` it imported. As a pytest plugin, `-p tests.startup_probe --startup-probe FILE` appends a line to
FILE for start-up and collection, and for each test, that imported one (`when: name, name`), and one
`ran: N tests` at the end; `--startup-probe-no-model` runs the tests of no model only (those the suite
runs once, whatever the models)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# torch and transformers, the engines' packages, GGUF's reader, what they bring along (tokenizers, the Hub's
# client, scipy, pandas), and matplotlib (only `verifier trace --plot` draws): seconds of imports, needed only
# by a model (or a command) that uses them.
HEAVY = ("torch", "transformers", "tokenizers", "huggingface_hub", "onnxruntime", "onnx", "onnxscript",
         "ctranslate2", "llama_cpp", "gguf", "litgpt", "lightning", "transformer_lens", "matplotlib", "scipy",
         "pandas")  # fmt: skip

IMPORT_ALL = f"""
import importlib, pkgutil, sys
import verifier, verifier.cli, verifier.properties
from verifier.fixtures import plugin
plugin.import_fixture_modules()  # the built-in models registered, their extras looked up, not imported
for info in pkgutil.iter_modules(verifier.properties.__path__):
    importlib.import_module(f"verifier.properties.{{info.name}}")
print(sorted({{name.split(".")[0] for name in sys.modules}} & set({HEAVY!r})))
"""

_OUT = pytest.StashKey[Path]()
_seen: set[str] = set()
_ran: list[str] = []


def heavy_modules() -> list[str]:
    """The packages of HEAVY this process has imported."""
    return sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--startup-probe", metavar="FILE", help="append what this run imports of HEAVY to FILE")
    parser.addoption("--startup-probe-no-model", action="store_true", help="run the tests of no model only")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("startup_probe"):
        config.stash[_OUT] = Path(config.getoption("startup_probe"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("startup_probe_no_model"):
        kept = [item for item in items if "model_spec" not in getattr(item, "fixturenames", ())]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


def _note(config: pytest.Config, when: str) -> None:
    new = [name for name in heavy_modules() if name not in _seen]
    _seen.update(new)
    if new and _OUT in config.stash:
        with config.stash[_OUT].open("a") as out:
            out.write(f"{when}: {', '.join(new)}\n")


def pytest_collection_finish(session: pytest.Session) -> None:
    _note(session.config, "start-up and collection")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _ran.append(item.nodeid)
    _note(item.config, item.nodeid)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OUT in config.stash:
        with config.stash[_OUT].open("a") as out:
            out.write(f"ran: {len(_ran)} tests\n")
