"""The property suite: Hypothesis properties every model under test must meet."""
