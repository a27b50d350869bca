"""The checkpoint a run verifies its models on (`--checkpoint PATH|REPO_ID`).

With one, the properties that make sense with fixed weights build every model from the checkpoint's
config and weights and draw only what is still free (token sequences, lengths, chunkings, batches,
edited tokens); the others skip, saying they need drawn configs. The checkpoint is a file, a
directory or a repo id in the local Hugging Face cache (never downloaded), in any format
`verifier.formats` reads.

Its weights are loaded whole when their float64 copy (the oracle's) stays under `RESIDENT_BYTES`;
larger ones are mapped (`map_checkpoint`): the oracle then streams them layer by layer, and a
model's factory gets the mapping (each weight read from the file when looked up).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

from verifier.formats import load_checkpoint, map_checkpoint
from verifier.formats.digest import checkpoint_sha256
from verifier.formats.hf_cache import cached_snapshot, hub_cache
from verifier.formats.sources import SourceError
from verifier.formats.tokenizer import Tokenizer, TokenizerError, find_tokenizer
from verifier.model.config import ModelConfig
from verifier.model.weights import WeightMap, weight_shapes

RESIDENT_BYTES = 4 * 2**30  # float64 weights up to this size are held; larger ones stream
ENV_VAR = "VERIFIER_CHECKPOINT"


@dataclass(frozen=True)
class FixedCheckpoint:
    """A checkpoint named by `spec`, found at `path`, with its config."""

    spec: str
    path: Path
    config: ModelConfig

    @classmethod
    def open(cls, spec: str) -> FixedCheckpoint:
        """The checkpoint `spec` names, its layout checked (no weight read yet); SourceError or CheckpointError
        (naming the file and the fault) if it names none."""
        path = Path(spec)
        if not path.exists():
            snapshot = cached_snapshot(spec)
            if snapshot is None:
                raise SourceError(
                    f"{spec!r} is no file or directory, nor a repo id in the local Hugging Face cache "
                    f"({hub_cache()}; nothing is downloaded)"
                )
            path = snapshot
        return cls(spec, path, map_checkpoint(path).config)

    @property
    def float64_bytes(self) -> int:
        return 8 * sum(math.prod(shape) for shape in weight_shapes(self.config).values())

    @property
    def streams(self) -> bool:
        """Whether the weights are mapped and the oracle streams them (too large to hold in float64)."""
        return self.float64_bytes > RESIDENT_BYTES

    @functools.cached_property
    def weights(self) -> WeightMap:
        """The canonical weights: loaded, or mapped when `streams`."""
        return (map_checkpoint if self.streams else load_checkpoint)(self.path).weights

    @functools.cached_property
    def sha256(self) -> str:
        """See `verifier.formats.digest` (read once, on first use)."""
        return checkpoint_sha256(self.path)

    @functools.cached_property
    def tokenizer(self) -> Tokenizer | None:
        """The tokenizer of this checkpoint's family and vocabulary (its own files, the data directory, the
        HF cache: `find_tokenizer`), or None where there is none: its properties then draw token ids only."""
        directory = self.path if self.path.is_dir() else self.path.parent
        try:
            return find_tokenizer(self.config.family, self.config.vocab_size, model_dir=directory)
        except TokenizerError:
            return None

    def describe(self) -> str:
        """One line: what was given, where it is, its digest."""
        where = "" if str(self.path) == self.spec else f" ({self.path})"
        return f"{self.spec}{where}, sha256 {self.sha256}"


_current: list[FixedCheckpoint] = []


def use(checkpoint: FixedCheckpoint | None) -> None:
    """Make `checkpoint` the one this process's properties run on (None: drawn configs and weights)."""
    _current[:] = [] if checkpoint is None else [checkpoint]


def current() -> FixedCheckpoint | None:
    """The checkpoint this process's properties run on, or None (set by the pytest plugin from --checkpoint)."""
    return _current[0] if _current else None
