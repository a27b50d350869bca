"""Marks for the tests that need the `transformers` extra (torch and transformers): without it,
they skip with the reason, as the suite's own checks do."""

from __future__ import annotations

import pytest

from verifier import extra

_TRANSFORMERS = extra.missing("this test")
_TORCH = extra.missing("this test", ("torch",))

transformers = pytest.mark.skipif(_TRANSFORMERS is not None, reason=str(_TRANSFORMERS))
torch = pytest.mark.skipif(_TORCH is not None, reason=str(_TORCH))
