"""`Unsupported`: what a model raises for a config or an input it cannot run. Defined here, below the
plug-in interface that documents it (`verifier.plugin.interface`) and the analyses that count it."""

from __future__ import annotations


class Unsupported(Exception):
    """Raised by a factory for a config its model cannot run, with the reason as message."""
