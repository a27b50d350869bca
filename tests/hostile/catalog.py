"""The hostile-model catalog: models that attack the harness rather than compute the wrong function, each
with the verdict it must get (`EXPECTED`), as the mutant catalog lists the bugs the suite must catch.

Each is a plain factory (`--model tests.hostile.catalog:NAME`) around the float32 NumPy reference,
declaring GPT-2 only, so that a model that hangs costs the run one probe, not one a family. What a
model leaves behind (a daemon's pid) goes to the file $HOSTILE_PIDS names.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.interface import Constraints
from verifier.reference import NumpyModel

GPT2_ONLY = Constraints(families=("gpt2",))


@dataclass(frozen=True)
class Expected:
    """The verdict a hostile model must get: `conforms`, or `fails` with the contract rule named."""

    verdict: str
    rule: str | None = None
    why: str = ""


class _Reference:
    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.ref = NumpyModel(config, weights)

    def logits(self, tokens: np.ndarray) -> Any:
        return self.ref.logits(tokens)


class EditsItsTokens(_Reference):
    """Zeroes the tokens it is given, in place, and answers for the zeros: on an array shared with the
    oracle, the oracle answered for the zeros too, and the model conformed."""

    def logits(self, tokens: np.ndarray) -> Any:
        tokens[...] = 0
        return self.ref.logits(tokens)


class ReusesItsBuffer(_Reference):
    """Returns the same array every call, as engine bindings that expose their logits buffer do; correct."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        super().__init__(config, weights)
        self.buffer: np.ndarray | None = None

    def logits(self, tokens: np.ndarray) -> Any:
        out = self.ref.logits(tokens)
        if self.buffer is None or self.buffer.shape != out.shape:
            self.buffer = np.empty_like(out)
        self.buffer[...] = out + self.noise(out)
        return self.buffer

    def noise(self, out: np.ndarray) -> Any:
        return 0


class ReusesItsBufferNoisily(ReusesItsBuffer):
    """Returns the same array every call, with noise drawn anew each call: two calls compared through the
    shared buffer were always equal, and the determinism rule passed at ratio 0."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        super().__init__(config, weights)
        self.rng = np.random.default_rng()

    def noise(self, out: np.ndarray) -> Any:
        return self.rng.normal(0, 1e-2, out.shape).astype(out.dtype)


class RaisesOnFloatErrors(_Reference):
    """Sets NumPy to raise on floating-point errors (underflow aside, which its softmax meets), and its print
    options, in its factory: the built-in NumPy model of the same run failed with FloatingPointError."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        np.seterr(all="raise", under="ignore")
        np.set_printoptions(precision=1, threshold=5)
        super().__init__(config, weights)


class ChangesEverything(_Reference):
    """Changes every piece of process-wide state it can, in each call: the working directory, the
    environment, warnings into errors, the random generators, the recursion limit, Ctrl-C, stdout."""

    def logits(self, tokens: np.ndarray) -> Any:
        out = self.ref.logits(tokens)
        os.chdir(tempfile.gettempdir())
        os.environ["HOSTILE_WAS_HERE"] = "1"
        os.environ.pop("HYPOTHESIS_PROFILE", None)
        warnings.simplefilter("error")
        random.seed(0)
        np.random.seed(0)
        sys.setrecursionlimit(120)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.stdout = io.StringIO()
        return out


class PrintsGigabytes(_Reference):
    """Prints 64 MB in every call through sys.stdout, and 4 MB more straight to the file descriptor: pytest
    kept it all (a run of one property printing 300 MB a call was killed for memory at 24 GB)."""

    def logits(self, tokens: np.ndarray) -> Any:
        chunk = "x" * (1 << 20)
        for _ in range(64):
            print(chunk)
        for _ in range(4):
            os.write(1, chunk.encode())
        return self.ref.logits(tokens)


class ExitsWithStatusZero(_Reference):
    """Ends the process with status 0 in a call: pytest stopped with no report, and a CI job passed."""

    def logits(self, tokens: np.ndarray) -> Any:
        os._exit(0)


class HangsInLogits(_Reference):
    """Waits forever in a call, on a server that never answers."""

    def logits(self, tokens: np.ndarray) -> Any:
        while True:
            time.sleep(1)


class StartsADaemon(_Reference):
    """Starts a daemon in its factory that leaves its session (`setsid()`) and forks again: it outlived
    `verifier check`, although everything a model starts dies with the run. Correct otherwise."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        super().__init__(config, weights)
        if (child := os.fork()) == 0:
            os.setsid()
            if (daemon := os.fork()) == 0:
                time.sleep(600)
                os._exit(0)
            with open(os.environ["HOSTILE_PIDS"], "a") as f:
                f.write(f"{daemon}\n")
            os._exit(0)
        os.waitpid(child, 0)


def exits_in_its_factory(config: ModelConfig, weights: Weights) -> Any:
    """Calls sys.exit in its factory: 31 lines of INTERNALERROR."""
    sys.exit("no GPU found")


def hangs_in_its_factory(config: ModelConfig, weights: Weights) -> Any:
    """Never returns from its factory: the run hung, with no limit."""
    while True:
        time.sleep(1)


def _factory(cls: type) -> Any:
    def build(config: ModelConfig, weights: Weights) -> Any:
        return cls(config, weights)

    build.__name__ = build.__qualname__ = cls.__name__
    build.__doc__ = cls.__doc__
    build.constraints = GPT2_ONLY  # type: ignore[attr-defined]
    return build


exits_in_its_factory.constraints = GPT2_ONLY  # type: ignore[attr-defined]
hangs_in_its_factory.constraints = GPT2_ONLY  # type: ignore[attr-defined]


edits_its_tokens = _factory(EditsItsTokens)
reuses_its_buffer = _factory(ReusesItsBuffer)
reuses_its_buffer_noisily = _factory(ReusesItsBufferNoisily)
raises_on_float_errors = _factory(RaisesOnFloatErrors)
changes_everything = _factory(ChangesEverything)
prints_gigabytes = _factory(PrintsGigabytes)
exits_with_status_zero = _factory(ExitsWithStatusZero)
hangs_in_logits = _factory(HangsInLogits)
starts_a_daemon = _factory(StartsADaemon)

EXPECTED: dict[str, Expected] = {
    "edits_its_tokens": Expected("fails", "inputs-unchanged"),
    "reuses_its_buffer": Expected("conforms", why="a buffer reused is copied on return: correct logits conform"),
    "reuses_its_buffer_noisily": Expected("fails", "deterministic"),
    "raises_on_float_errors": Expected("conforms", why="its NumPy settings are its own; the oracle's unchanged"),
    "changes_everything": Expected("conforms", why="every setting it changes is put back after each call"),
    "prints_gigabytes": Expected("conforms", why="what a test's models print is cut at 1 MiB a stream"),
    "exits_with_status_zero": Expected("fails", "keeps-the-process"),
    "exits_in_its_factory": Expected("fails", "keeps-the-process"),
    "hangs_in_logits": Expected("fails", "returns-in-time"),
    "hangs_in_its_factory": Expected("fails", "returns-in-time"),
    "starts_a_daemon": Expected("conforms", why="correct; its daemon dies with the run"),
}


class SwallowsTheInterruption(_Reference):
    """Catches every exception in a loop, the deadline's interruption included: only the backstop can end it,
    and with it the run (so it is not in EXPECTED, whose models share one run)."""

    def logits(self, tokens: np.ndarray) -> Any:
        while True:
            with contextlib.suppress(BaseException):  # the point of this model
                time.sleep(1)


swallows_the_interruption = _factory(SwallowsTheInterruption)
