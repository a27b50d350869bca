"""Under pytest-xdist each worker's BLAS and OpenMP pools get its share of the cores (the plugin's
`_share_the_cores`): two workers each with a pool the size of the machine spin against each other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.fixtures.plugin import THREAD_POOLS

pytestmark = pytest.mark.slow  # pytest runs with two xdist workers each: 3 to 5 s a test here

SHOW = """
import json
import os

def test_show():  # xdist's workers print nowhere: a file
    with open("pools.json", "w") as f:
        json.dump([os.environ.get(pool) for pool in {pools!r}], f)
"""


def _pools_in_a_worker(tmp_path: Path, *args: str, **env: str) -> list[str | None]:
    """What a test sees of the pools' variables in a pytest run with `args`, the pools unset but `env`."""
    (tmp_path / "test_show.py").write_text(SHOW.format(pools=THREAD_POOLS))
    clean = {k: v for k, v in os.environ.items() if k not in THREAD_POOLS} | env
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, "test_show.py"],
        cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((tmp_path / "pools.json").read_text())


@pytest.mark.parametrize(
    ("workers", "args"),
    [(2, ["-n", "2"]), (2, ["-d", "--tx", f"2*popen//python={sys.executable}"])],
    ids=["-n 2", "--tx 2*popen"],
)
def test_each_xdist_worker_s_pools_get_its_share_of_the_cores(tmp_path: Path, workers: int, args: list[str]) -> None:
    share = str(max(1, (os.cpu_count() or 1) // workers))
    assert _pools_in_a_worker(tmp_path, *args) == [share] * len(THREAD_POOLS)


def test_one_process_and_a_user_s_own_setting_are_left_alone(tmp_path: Path) -> None:
    assert _pools_in_a_worker(tmp_path) == [None] * len(THREAD_POOLS)
    assert _pools_in_a_worker(tmp_path, "-n", "2", OPENBLAS_NUM_THREADS="3")[0] == "3"
