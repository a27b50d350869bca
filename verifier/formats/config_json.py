"""A Hugging Face `config.json`, read into the suite's config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from verifier.formats.errors import CheckpointError
from verifier.formats.jsonio import read_json
from verifier.model.config import ConfigError, ModelConfig, from_hf_dict

T = TypeVar("T")

MAX_CONFIG_BYTES = 2**22  # 4 MiB: published config.json files are a few KB


def read_config_fields(path: str | Path) -> dict[str, Any]:
    """The JSON object of a `config.json` file (or of the one inside directory `path`)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    fields = read_json(path, "config.json", MAX_CONFIG_BYTES)
    if not isinstance(fields, dict):
        raise CheckpointError(path, "config.json", "must hold a JSON object", found=type(fields).__name__)
    return fields


def read_config_json(path: str | Path) -> ModelConfig:
    """The config described by a `config.json` file (or by the one inside directory `path`)."""
    path = Path(path)
    if path.is_dir():  # errors name the file itself, not the folder around it
        path = path / "config.json"
    return config_from_fields(path, read_config_fields(path), from_hf_dict)


def config_from_fields(path: str | Path, fields: dict[str, Any], convert: Callable[[dict[str, Any]], T]) -> T:
    """`convert(fields)`, with its errors reported as errors of the file at `path`."""
    try:
        return convert(fields)
    except ConfigError as e:
        raise CheckpointError(path, e.field, e.reason) from None
    except (TypeError, ValueError) as e:  # a field of the wrong JSON type, e.g. "rms_norm_eps": "tiny"
        raise CheckpointError(path, "config.json", f"a field has the wrong type: {e}") from None
