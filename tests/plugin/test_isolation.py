"""The harness around a model under test (`verifier.plugin.isolation`): each piece of process-wide state a
model changes stays its own and is put back for the suite; what it prints is bounded; its exits and hangs
become contract violations; what its module's import changes is its own too."""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import needs
from verifier.plugin import isolation
from verifier.plugin.registry import load_spec


def _a_handler(signum: int, frame: object) -> None:
    """A SIGINT handler no process starts with (SIG_IGN would be none where the test's process inherits
    SIGINT ignored, as a job a shell starts in the background does)."""


# Each piece of state: a change a model makes to it, and how to read it.
CHANGES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "numpy.errstate": (lambda: np.seterr(all="raise"), np.geterr),
    "numpy.printoptions": (lambda: np.set_printoptions(precision=2), lambda: np.get_printoptions()["precision"]),
    "random": (lambda: random.seed(7), random.random),
    "numpy.random": (lambda: np.random.seed(7), np.random.random),
    "warnings.filters": (lambda: warnings.simplefilter("error"), lambda: list(warnings.filters)),
    "cwd": (lambda: os.chdir("/"), os.getcwd),
    "environ": (lambda: os.environ.__setitem__("VERIFIER_TEST_MODEL", "1"), lambda: dict(os.environ)),
    "recursionlimit": (lambda: sys.setrecursionlimit(150), sys.getrecursionlimit),
    "signals": (lambda: signal.signal(signal.SIGINT, _a_handler), lambda: signal.getsignal(signal.SIGINT)),
}


def _torch_changes() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    import torch

    return {
        "torch.default_dtype": (lambda: torch.set_default_dtype(torch.float64), torch.get_default_dtype),
        "torch.threads": (lambda: torch.set_num_threads(torch.get_num_threads() + 1), torch.get_num_threads),
        "torch.grad": (lambda: torch.set_grad_enabled(False), torch.is_grad_enabled),
        "torch.deterministic": (
            lambda: torch.use_deterministic_algorithms(True), torch.are_deterministic_algorithms_enabled
        ),
        "torch.matmul_precision": (
            lambda: torch.set_float32_matmul_precision("medium"), torch.get_float32_matmul_precision
        ),
        "torch.random": (lambda: torch.manual_seed(7), lambda: float(torch.rand(1))),
    }  # fmt: skip


def _check_kept_apart(name: str, change: Callable[[], Any], read: Callable[[], Any]) -> None:
    context = isolation.Context()
    before = read()
    with isolation.guarded(context):
        change()
        inside = read()
    assert name in context.delta, f"{name}: the model's change was not kept as its own"
    if name not in ("random", "numpy.random", "torch.random"):  # reading a generator draws from it
        assert read() == before, f"{name}: the model's change leaked to the suite"
        with isolation.guarded(context):
            assert read() == inside, f"{name}: the model's next call did not run with its own change"
        assert read() == before, f"{name}: the model's next call leaked it"


@pytest.mark.parametrize("name", list(CHANGES))
def test_a_change_a_model_makes_stays_its_own(name: str) -> None:
    _check_kept_apart(name, *CHANGES[name])


@needs.torch
def test_a_change_a_model_makes_to_torch_stays_its_own() -> None:
    for name, (change, read) in _torch_changes().items():
        _check_kept_apart(name, change, read)


@pytest.mark.parametrize("generator", ["random", "numpy.random"])
def test_a_model_draws_a_stream_of_its_own_and_the_suite_keeps_its_own(generator: str) -> None:
    draw = random.random if generator == "random" else np.random.random
    seed = random.seed if generator == "random" else np.random.seed
    context = isolation.Context()
    seed(3)
    with isolation.guarded(context):
        seed(11)  # the model seeds once, in its factory
    with isolation.guarded(context):
        first = draw()
    suite = draw()
    with isolation.guarded(context):
        second = draw()
    seed(3)
    assert suite == draw(), "the model's draws moved the suite's generator"
    seed(11)
    assert (first, second) == (draw(), draw()), "the model's calls did not go on with its own stream"


def test_a_stream_a_model_puts_in_place_of_stdout_stays_its_own() -> None:
    context = isolation.Context()
    suite = sys.stdout
    mine = io.StringIO()
    with isolation.guarded(context):
        sys.stdout = mine
    assert sys.stdout is suite
    with isolation.guarded(context):
        print("to the model's own stream")
    assert sys.stdout is suite and mine.getvalue() == "to the model's own stream\n"


def test_a_change_the_suite_makes_between_calls_reaches_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    context = isolation.Context()
    with isolation.guarded(context):
        os.environ["VERIFIER_TEST_MODEL"] = "mine"
    monkeypatch.setenv("VERIFIER_TEST_SUITE", "later")
    with isolation.guarded(context):
        seen = (os.environ.get("VERIFIER_TEST_MODEL"), os.environ.get("VERIFIER_TEST_SUITE"))
    assert seen == ("mine", "later")
    assert "VERIFIER_TEST_MODEL" not in os.environ


def test_what_importing_a_model_changes_is_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sets_errors.py").write_text(
        textwrap.dedent("""
            import numpy as np
            np.seterr(over="raise")

            def build(config, weights):
                return None
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    before = np.geterr()
    spec = load_spec("sets_errors:build")
    assert np.geterr() == before, "the import's change leaked to the suite"
    with isolation.guarded(isolation.Context(spec.imported)):
        assert np.geterr()["over"] == "raise", "the factory did not start from what its import changed"


def test_what_a_model_prints_is_cut_at_the_budget(capfd: pytest.CaptureFixture[str]) -> None:
    isolation.reset_output_budget()
    context = isolation.Context()
    with isolation.guarded(context):
        print("#" * (3 * isolation.OUTPUT_BUDGET))  # through sys.stdout
        os.write(1, b"@" * (3 * isolation.OUTPUT_BUDGET))  # through the descriptor, as native code prints
    out = capfd.readouterr().out
    assert out.count("#") == isolation.OUTPUT_BUDGET and out.count("@") == isolation.OUTPUT_BUDGET
    assert "more bytes the model printed on stdout were dropped" in out
    isolation.reset_output_budget()
    with isolation.guarded(context):
        print("a line of the next test")
    assert capfd.readouterr().out == "a line of the next test\n"


@pytest.mark.parametrize(
    ("end", "how"), [(lambda: os._exit(3), "os._exit(3)"), (lambda: sys.exit("bye"), "sys.exit('bye')")]
)
def test_an_exit_in_a_call_is_refused(end: Callable[[], Any], how: str) -> None:
    with pytest.raises(isolation.ModelExited) as caught, isolation.guarded(isolation.Context()):
        end()
    assert caught.value.how == how
    assert os._exit.__module__ == "posix", "os._exit was not put back"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_the_model_forks_exits_as_it_asks() -> None:
    with isolation.guarded(isolation.Context()):
        if (child := os.fork()) == 0:
            os._exit(5)
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 5


def test_a_call_runs_where_stderr_has_no_descriptor(capsys: pytest.CaptureFixture[str]) -> None:
    # pytest's capsys puts a stream without fileno() in sys.stderr; the backstop armed for a new deadline
    # must not take its traceback's destination from it.
    with isolation.guarded(isolation.Context(), deadline_s=123.0):
        print("runs")
    assert capsys.readouterr().out == "runs\n"


def test_a_call_past_its_deadline_is_interrupted() -> None:
    with pytest.raises(isolation.CallTimedOut), isolation.guarded(isolation.Context(), deadline_s=0.2):
        while True:
            pass


# A model that swallows the interruption: only the backstop ends it.
_SWALLOWS = """
from verifier.plugin import isolation
with isolation.guarded(isolation.Context(), deadline_s=0.5):
    while True:
        try:
            while True:
                pass
        except BaseException:
            pass
"""


def test_a_call_that_swallows_the_interruption_ends_the_process() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SWALLOWS],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Timeout (" in done.stderr and "<string>" in done.stderr, done.stderr[-2000:]  # faulthandler's traceback
