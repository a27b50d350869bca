"""Faithful adapters of well-known public implementations, written for this project from the math."""
