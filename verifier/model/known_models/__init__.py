"""Well-known open models, each a small JSON file of its published `config.json` values.

A file `<name>.json` holds `name`, `source` (where the values are published), `note` and `config`
(the fields of that `config.json` which fix the architecture). `verifier.model.params.from_hf_dict`
turns `config` into what the parameter formula counts; the tests check every total against
`transformers` instantiated on the meta device.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from verifier.model.params import Architecture, from_hf_dict


@dataclass(frozen=True)
class KnownModel:
    """One published model: its name, its source, and its `config.json` fields."""

    name: str
    source: str
    fields: dict[str, Any]

    @property
    def architecture(self) -> Architecture:
        return from_hf_dict(self.fields)


class UnknownModelError(KeyError):
    """A name that is not in the table of known models."""

    def __str__(self) -> str:
        return f"unknown model {self.args[0]!r}; known models: {', '.join(known_models())}"


@functools.cache
def known_models() -> dict[str, KnownModel]:
    """Every known model by name, in name order."""
    models = {}
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text(encoding="utf-8"))
            models[data["name"]] = KnownModel(data["name"], data["source"], data["config"])
    return models


def known_model(name: str) -> KnownModel:
    """The known model called `name` (see `known_models()`)."""
    try:
        return known_models()[name]
    except KeyError:
        raise UnknownModelError(name) from None
