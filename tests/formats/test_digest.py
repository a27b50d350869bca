"""The sha256 a report names a checkpoint by: a single-file checkpoint's is what `sha256sum` prints."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'lm-verifier[gguf]')")

from tests.formats.families import FAMILY_EXAMPLES
from verifier.formats.digest import checkpoint_sha256
from verifier.formats.gguf import write_gguf
from verifier.model.weights import init_weights


def test_a_gguf_file_s_sha256_is_the_file_s_own(tmp_path: Path) -> None:
    """A GGUF file was taken for a Hugging Face file and its directory's config.json looked for
    (FileNotFoundError: `verifier check --checkpoint model.gguf` stopped before the suite ran)."""
    config = FAMILY_EXAMPLES["mixtral"]
    write_gguf(tmp_path / "m.gguf", config, init_weights(config))
    assert checkpoint_sha256(tmp_path / "m.gguf") == hashlib.sha256((tmp_path / "m.gguf").read_bytes()).hexdigest()
