"""The mutant catalog, and its correct base at each class, declaring no precision class: what a
user's model that says nothing about its precision looks like to the suite (judged as float32, its
failures checked for what class they behave like). `--model tests.meta.undeclared:mutants.NAME`
plugs in a mutant; `logits_only.NAME` the same without its trace (so a hint can rest on its logits
alone); `at.bfloat16` the correct base computing in bfloat16.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from tests.meta.mutants.base import Transformer, factory
from tests.meta.mutants.catalog import MUTANTS, PRECISIONS
from verifier.plugin.interface import detected_capabilities


def undeclared(
    cls: type[Transformer], precision: str = "float32", *, trace: bool = True
) -> Callable[[Any, dict[str, Any]], Transformer]:
    """The factory of `cls` computing at `precision` and declaring no class (and, without `trace`,
    declaring its capabilities but `trace`)."""
    build = factory(cls, precision)

    def make(config: Any, weights: dict[str, Any]) -> Transformer:
        model = build(config, weights)
        model.precision = None  # type: ignore[assignment]  # the catalog's factory declares the class it computes at
        if not trace:
            model.capabilities = sorted(detected_capabilities(model) - {"trace"})  # type: ignore[attr-defined]
        return model

    make.__name__ = make.__qualname__ = f"{build.__name__}_undeclared" + ("" if trace else "_logits_only")
    make.__doc__ = cls.__doc__
    return make


mutants = SimpleNamespace(**{cls.__name__: undeclared(cls) for cls in MUTANTS})
logits_only = SimpleNamespace(**{cls.__name__: undeclared(cls, trace=False) for cls in MUTANTS})
at = SimpleNamespace(**{p: undeclared(Transformer, p) for p in PRECISIONS if p != "q8_0"})
