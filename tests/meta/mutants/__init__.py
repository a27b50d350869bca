"""Deliberately broken implementations: each mutant is the correct `base.Transformer` with one
realistic bug, plugged in through the public plug-in path (a factory) exactly as a user would."""
