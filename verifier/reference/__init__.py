"""The independent NumPy reference: imports NumPy and the standard library only."""

from verifier.reference.model import InputError, KVCache, NumpyModel

__all__ = ["InputError", "KVCache", "NumpyModel"]
