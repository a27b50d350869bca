"""What the command line accepts as a model: a preset name, a `config.json`, a model directory."""

from __future__ import annotations

from pathlib import Path

from verifier.config import ModelConfig
from verifier.formats.config_json import read_config_json
from verifier.presets import PRESETS


class SourceError(ValueError):
    """A model argument that names nothing the suite can read."""


def load_config(spec: str) -> ModelConfig:
    """The config named by `spec`: a preset, a `config.json` file, or a directory holding one."""
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if path.is_dir() or path.suffix == ".json":
        return read_config_json(path)
    raise SourceError(f"{spec!r} is not a preset ({', '.join(PRESETS)}), a config.json, or a directory with one")
