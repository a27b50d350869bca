"""File formats: the only code that knows file layouts. Files in, config + canonical weights out."""

from verifier.formats.errors import CheckpointError

__all__ = ["CheckpointError"]
