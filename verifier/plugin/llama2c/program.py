"""Running llama2.c's `run.c` on canonical weights: greedy tokens after a prompt of token ids.

run.c always starts from token 1 (BOS) at position 0, then forces the prompt's tokens, then
samples; at temperature 0 it takes the argmax. To honour any prompt, the written checkpoint
renumbers the vocabulary so that the prompt's first id is the one run.c calls 1: swapping two ids'
embedding rows (and classifier rows, when unshared) renames tokens without changing the function
the model computes. The prompt's other ids go in as a string through a tokenizer made for it
(`verifier.plugin.llama2c.vocab`), and the printed pieces are read back and renamed.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from verifier.formats.llama2c import NORM_EPS, write_llama2c
from verifier.formats.llama2c_tokenizer import write_tokenizer
from verifier.model.config import ModelConfig
from verifier.model.weights import CLASSIFIER, EMBEDDING, Weights
from verifier.plugin.llama2c.vocab import PromptVocabulary

BOS = 1  # the token run.c feeds at position 0
RUN_TIMEOUT_S = 600


class Llama2cRunError(RuntimeError):
    """run.c failed or printed something that is not the expected tokens; the message holds its output."""


def unsupported_reason(config: ModelConfig) -> str | None:
    """Why this run.c (llama2.c at fd68dd2) cannot run `config`, or None if it can."""
    if config.family != "llama":
        return f"llama2.c's run.c implements Llama only, not the {config.family} family"
    if config.n_kv_heads != config.n_heads:
        return (
            f"this run.c (llama2.c at fd68dd2) has no grouped-query attention "
            f"(n_kv_heads={config.n_kv_heads} < n_heads={config.n_heads})"
        )
    if config.norm_eps != NORM_EPS:
        return f"run.c hard-codes RMSNorm eps {NORM_EPS:g}; this config has {config.norm_eps:g}"
    if config.vocab_size <= BOS:
        return f"run.c feeds token {BOS} first, so vocab_size must exceed {BOS}; found {config.vocab_size}"
    return None


def _swapped(config: ModelConfig, weights: Weights, a: int, b: int) -> Weights:
    """The same model with token ids a and b exchanged (embedding and classifier rows)."""
    out = dict(weights)
    names = [EMBEDDING[config.family]] + ([] if config.tie_embeddings else [CLASSIFIER])
    for name in names:
        rows = np.array(weights[name], dtype=np.float32)
        rows[[a, b]] = rows[[b, a]]
        out[name] = rows
    return out


class Llama2cProgram:
    """run.c as a model under test with the `greedy` capability only.

    Files live in a private temporary directory (run.c reads `tokenizer.bin` from its working
    directory), removed when the object is collected.
    """

    capabilities = frozenset({"greedy"})

    def __init__(self, config: ModelConfig, weights: Weights, binary: Path) -> None:
        reason = unsupported_reason(config)
        if reason:
            raise ValueError(reason)
        self.config = config
        self.binary = binary
        self._weights = weights
        self._workdir = tempfile.TemporaryDirectory(prefix="verifier-llama2c-")
        self._checkpoint = Path(self._workdir.name) / "model.bin"
        self._first: int | None = None  # the prompt's first id the written checkpoint calls BOS

    def _write_checkpoint(self, first: int) -> None:
        if self._first != first:
            weights = self._weights if first == BOS else _swapped(self.config, self._weights, BOS, first)
            write_llama2c(self._checkpoint, self.config, weights, version=0)
            self._first = first

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        """The n_new argmax tokens run.c generates after `prompt` [T] (T >= 1), at temperature 0."""
        tokens = [int(t) for t in np.asarray(prompt).reshape(-1)]
        V, n_ctx = self.config.vocab_size, self.config.n_ctx
        if not tokens or min(tokens) < 0 or max(tokens) >= V:
            raise ValueError(f"prompt must hold 1 or more ids in [0, {V}), found {tokens}")
        if len(tokens) + n_new - 1 > n_ctx:
            raise ValueError(
                f"prompt of {len(tokens)} + {n_new} new tokens needs {len(tokens) + n_new - 1} "
                f"positions, more than n_ctx={n_ctx}"
            )
        if n_new == 0:
            return np.zeros(0, dtype=np.int64)
        first = tokens[0]
        rename = {BOS: first, first: BOS}  # an involution: the same map both ways

        def renamed(ids: list[int]) -> list[int]:
            return [rename.get(t, t) for t in ids]

        rest = renamed(tokens[1:])
        vocab = PromptVocabulary.for_prompt(V, rest)
        self._write_checkpoint(first)
        write_tokenizer(Path(self._workdir.name) / "tokenizer.bin", vocab.tokenizer())
        steps = len(rest) + n_new
        printed = self._run(vocab.encode(rest), steps)
        try:
            out, end = vocab.decode(printed, steps, start=len(b"<s>\n"))
        except ValueError as e:
            raise Llama2cRunError(f"cannot read run.c's output ({e}): {printed[:200]!r}") from None
        if not printed.startswith(b"<s>\n") or not printed[end:].startswith(b"\nachieved tok/s:"):
            raise Llama2cRunError(f"run.c's output is not '<s>', {steps} pieces, 'achieved tok/s': {printed[:200]!r}")
        if out[: len(rest)] != rest:
            raise Llama2cRunError(f"run.c encoded the prompt as {out[: len(rest)]}, not {rest}")
        return np.array(renamed(out[len(rest) :]), dtype=np.int64)

    def _run(self, prompt: bytes, steps: int) -> bytes:
        command = [os.fsencode(self.binary), os.fsencode(self._checkpoint), b"0.0", str(steps).encode(), prompt]
        try:
            done = subprocess.run(command, cwd=self._workdir.name, capture_output=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Llama2cRunError(f"run.c did not finish {steps} steps in {RUN_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise Llama2cRunError(
                f"run.c exited with status {done.returncode}: {done.stdout[-300:]!r} {done.stderr[-300:]!r}"
            )
        return done.stdout
