"""llama2.c's run.c, built once per session; tests that need it skip with the reason it is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifier.plugin.llama2c import Llama2cUnavailable, binary


@pytest.fixture(scope="session")
def run_c() -> Path:
    try:
        return binary("O3")
    except Llama2cUnavailable as e:
        pytest.skip(f"llama2.c's run.c is unavailable: {e}")
