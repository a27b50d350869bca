"""The independent NumPy reference: imports NumPy and the standard library only."""

from verifier.reference.model import InputError, KVCache, NumpyModel
from verifier.reference.recorder import Routes

__all__ = ["InputError", "KVCache", "NumpyModel", "Routes"]
