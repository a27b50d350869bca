"""A Hugging Face `config.json`, read into the suite's config."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from verifier.formats.errors import CheckpointError
from verifier.model.config import ConfigError, ModelConfig, from_hf_dict

T = TypeVar("T")


def read_config_fields(path: str | Path) -> dict[str, Any]:
    """The JSON object of a `config.json` file (or of the one inside directory `path`)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(path, "config.json", "file not found") from None
    except OSError as e:
        raise CheckpointError(path, "config.json", f"cannot be read: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(path, "config.json", f"not valid JSON: {e}") from None
    except RecursionError:  # e.g. 100,000 nested arrays: no configuration nests more than a few levels
        raise CheckpointError(path, "config.json", "JSON nested too deeply") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise CheckpointError(path, "config.json", f"not valid JSON: {str(e)[:80]}") from None
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
