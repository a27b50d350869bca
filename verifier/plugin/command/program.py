"""A program on the command line as a model under test: write the model, run the command, read what it gives.

Each built model owns a private working directory (the program's current directory), where the
model file is written once (for `greedy-text`, again when the prompt's first id changes) and each
call's tokens and outputs are written anew; a relative program path is found from the directory
the user ran from (`Command.directory`). A program that exits with `UNSUPPORTED_STATUS` (77, as
automake's SKIP) declines that input: the call raises `Unsupported` with the last line of its
stderr as the reason, and the suite draws another input. Anything else that goes wrong with the
program (it cannot start, times out, exits non-zero, is killed by a signal, writes malformed output)
raises `CommandFailed`, whose message holds the command line and the tail of its stderr; the suite
turns that into a contract violation of the call that ran it.
"""

from __future__ import annotations

import io
import os
import shlex
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from verifier.analysis.precision import Precision, UnknownPrecision, resolve
from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import read_small
from verifier.formats.llama2c_tokenizer import Tokenizer, write_tokenizer
from verifier.model.config import ModelConfig
from verifier.model.weights import CLASSIFIER, EMBEDDING, Weights
from verifier.plugin import processes
from verifier.plugin.command.files import FORMATS, is_llama2c, stored_precision, write_model
from verifier.plugin.command.template import CommandTemplate, CommandTemplateError
from verifier.plugin.command.text import BOS, RUN_C, TextPrompt, TextRules, code_width, marker_pieces, renaming
from verifier.plugin.interface import Constraints, Unsupported

# What a program gives back, and how the suite reads it.
GIVES: dict[str, str] = {
    "logits-npy": "writes logits for every position, float [T, V], to the .npy file {out}",
    "last-logits-npy": "writes the last position's logits, float [V], to the .npy file {out}",
    "logits-text": "prints logits for every position on stdout: T lines of V numbers",
    "last-logits-text": "prints the last position's logits on stdout: V numbers",
    "greedy-ids": "prints the n_new greedily generated token ids on stdout",
    "greedy-text": "prints the generated text as llama2.c's run.c does, through the tokenizer.bin written for it",
}
DEFAULT_TIMEOUT_S = 300.0
# The exit status of a program declining an input it does not run (automake's SKIP): a skip, not a failure.
UNSUPPORTED_STATUS = 77
_STDERR_TAIL = 2000
_REASON_CHARS = 500  # a declining program's reason, as the report shows it
# What a program may print on stdout, by what it gives: a number in any printed form ("%.17g" takes 24
# characters, fixed point with many decimals more), a piece of the tokenizer.bin written for it, and
# room for a banner or timing lines (run.c's "achieved tok/s").
_NUMBER_BYTES = 64
_PIECE_BYTES = 64
_STDOUT_MARGIN = 64 * 1024
_NPY_HEADER_BYTES = 64 * 1024  # a .npy header is padded to 64 bytes; NumPy reads at most 10,000 of it


class CommandFailed(RuntimeError):
    """The program failed or gave malformed output; the message holds its command line and stderr."""


@dataclass(frozen=True)
class Command:
    """A program plugged in through the protocol: its command template, file format and output kind,
    and what it declares. It is the factory (`command(config, weights)`), declaring as a Python
    factory does by its `constraints` and `precision` attributes."""

    template: CommandTemplate
    format: str
    gives: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    text_rules: TextRules = RUN_C  # for greedy-text: whose prompt and printing rules the program follows
    precision: str | None = None  # the precision class the program declares; None: the format's
    constraints: Constraints | None = None  # the configs it declares it runs; None: any
    directory: Path = field(default_factory=Path.cwd)  # where a relative program path is found from

    @classmethod
    def parse(
        cls,
        template: str,
        format: str,
        gives: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        text_rules: TextRules = RUN_C,
        precision: str | None = None,
        constraints: Constraints | None = None,
        directory: Path | None = None,
    ) -> Command:
        """Check the pieces fit together; CommandTemplateError says what does not. A relative program
        path is found from `directory` (default: the current directory); `locate()` checks it is there."""
        if precision is not None:
            try:
                resolve(precision)
            except UnknownPrecision as e:
                raise CommandTemplateError(str(e)) from None
        if format not in FORMATS:
            raise CommandTemplateError(f"unknown format {format!r}; known: {', '.join(FORMATS)}")
        if gives not in GIVES:
            raise CommandTemplateError(f"unknown output kind {gives!r}; known: {', '.join(GIVES)}")
        if not timeout_s > 0:
            raise CommandTemplateError(f"the timeout must be positive, found {timeout_s}")
        parsed = CommandTemplate.parse(template)
        parsed.require({"model"}, "the program needs it to find the model file")
        if gives == "greedy-text":
            if not is_llama2c(format):
                raise CommandTemplateError(f"greedy-text needs a llama2.c format (with tokenizer.bin), not {format!r}")
            parsed.require({"prompt"}, "greedy-text passes the prompt to the program as text")
        else:
            parsed.require({"tokens", "ids"}, "the program needs one of them to get the input token ids")
        if gives.startswith("greedy"):
            parsed.require({"n_new", "steps"}, "the program needs one of them to know how many tokens to generate")
        if gives.endswith("npy"):
            parsed.require({"out"}, f"with {gives} the program writes its logits to the .npy file it names")
        parsed.program  # noqa: B018 - a placeholder in the program's name is refused here
        return cls(parsed, format, gives, timeout_s, text_rules, precision, constraints, directory or Path.cwd())

    @property
    def name(self) -> str:
        """The program's file name, as test ids and reports show it."""
        return Path(self.template.arguments[0]).name

    def locate(self) -> Path:
        """The program's file; ProgramNotFound, naming the path looked for, if it is not there or cannot run."""
        return self.template.locate(self.directory)

    def __call__(self, config: ModelConfig, weights: Weights) -> CommandModel:
        """The factory (`build`)."""
        return self.build(config, weights)

    def build(self, config: ModelConfig, weights: Weights) -> CommandModel:
        """The factory: the model under test for `config` (Unsupported if the format cannot hold it)."""
        model: CommandModel
        if self.gives.startswith("greedy"):
            model = CommandGreedy(self, config, weights)
        else:
            model = CommandLogits(self, config, weights)
        model.prepare()
        model.precision = self.precision or stored_precision(self.format, config)
        return model


def _tail(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return "(stderr was empty)"
    return "stderr: " + (text if len(text) <= _STDERR_TAIL else "..." + text[-_STDERR_TAIL:])


class CommandModel:
    """What the logits and greedy kinds share: the working directory, the model file, running the program."""

    capabilities: frozenset[str] = frozenset()
    precision: Precision | str | None = None  # declared to the suite (verifier.analysis.precision)

    def __init__(self, command: Command, config: ModelConfig, weights: Weights) -> None:
        self.command = command
        self.config = config
        self._weights = weights
        self._workdir = tempfile.TemporaryDirectory(prefix="verifier-command-")
        self.dir = Path(self._workdir.name)
        self.model_path = self.dir / FORMATS[command.format][1]
        self.tokenizer_path = self.dir / "tokenizer.bin"
        self.out_path = self.dir / "logits.npy"

    def prepare(self) -> None:
        """Write the model file (and a tokenizer.bin for llama2.c formats)."""
        write_model(self.command.format, self.dir, self.config, self._weights)
        if is_llama2c(self.command.format):
            V = self.config.vocab_size
            write_tokenizer(self.tokenizer_path, Tokenizer(marker_pieces(V), (0.0,) * V, 1 + code_width(V)))

    def run(self, tokens: list[int], n_new: int = 0, prompt: str = "") -> tuple[bytes, str]:
        """Run the program on `tokens`; its stdout and the command line. CommandFailed if it fails."""
        (self.dir / "tokens.txt").write_text(" ".join(map(str, tokens)) + "\n")
        self.out_path.unlink(missing_ok=True)  # a file left by an earlier call must never count
        values = {
            "model": str(self.model_path),
            "tokenizer": str(self.tokenizer_path),
            "tokens": str(self.dir / "tokens.txt"),
            "ids": ",".join(map(str, tokens)),
            "n_tokens": str(len(tokens)),
            "prompt": prompt,
            "n_new": str(n_new),
            "steps": str(len(tokens) + n_new - 1),
            "out": str(self.out_path),
            "dir": str(self.dir),
        }
        argv = self.command.template.render(values)
        argv[0] = self.command.template.program_path(self.command.directory)  # the program runs in self.dir
        line = shlex.join(argv)
        timeout = self.command.timeout_s
        limit = self._max_stdout(len(tokens), n_new)
        try:
            done = processes.run(argv, cwd=self.dir, timeout_s=timeout, max_stdout=limit)
        except OSError as e:
            raise CommandFailed(f"`{line}` could not start: {e}") from None
        if done.timed_out:
            raise CommandFailed(f"`{line}` did not finish in {timeout:g} s; {_tail(done.stderr)}")
        if done.flooded:
            raise CommandFailed(
                f"`{line}` printed more than {limit:,} bytes on stdout, more than {self.command.gives} of "
                f"{len(tokens)} tokens can take (stopped there); {_tail(done.stderr)}"
            )
        assert done.status is not None  # neither stopped for its time nor for its output: it exited
        if done.status < 0:
            try:
                name = signal.Signals(-done.status).name
            except ValueError:
                name = f"signal {-done.status}"
            raise CommandFailed(f"`{line}` crashed ({name}); {_tail(done.stderr)}")
        if done.status == UNSUPPORTED_STATUS:
            # Its reason, not the command line: the line names this run's files, and the suite keeps one
            # entry per distinct reason.
            lines = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
            reason = lines[-1].strip()[:_REASON_CHARS] if lines else "it gave no reason on stderr"
            raise Unsupported(f"{self.command.name} declined the input (exit status {UNSUPPORTED_STATUS}): {reason}")
        if done.status != 0:
            raise CommandFailed(f"`{line}` exited with status {done.status}; {_tail(done.stderr)}")
        self._stderr = done.stderr
        return done.stdout, line

    def _max_stdout(self, n_tokens: int, n_new: int) -> int | None:
        """The most a program may print on stdout for this run, from what it gives (None: stdout is not its
        output, and only its end is kept): numbers of any printed form, or pieces of the written tokenizer."""
        V, gives = self.config.vocab_size, self.command.gives
        if gives == "greedy-text":
            return (n_tokens + n_new) * _PIECE_BYTES + _STDOUT_MARGIN
        numbers = {"logits-text": n_tokens * V, "last-logits-text": V, "greedy-ids": n_new}.get(gives)
        return None if numbers is None else numbers * _NUMBER_BYTES + _STDOUT_MARGIN

    def malformed(self, line: str, problem: str) -> CommandFailed:
        """The error for output that is not what `gives` promises."""
        return CommandFailed(
            f"`{line}` gave malformed output for {self.command.gives} "
            f"({GIVES[self.command.gives]}): {problem}; {_tail(self._stderr)}"
        )


class CommandLogits(CommandModel):
    """A program that gives the logits of one sequence per run ("unbatched"): every position's, or
    the last position's only ("last_logits": the suite runs each prefix)."""

    def __init__(self, command: Command, config: ModelConfig, weights: Weights) -> None:
        super().__init__(command, config, weights)
        self.capabilities = frozenset({"last_logits" if command.gives.startswith("last") else "logits", "unbatched"})

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """Logits for int64 tokens [T] -> [T, V], or the last position's [V]."""
        ids = [int(t) for t in np.asarray(tokens).reshape(-1)]
        return self._read(ids, last=self.command.gives.startswith("last"))

    def _read(self, ids: list[int], *, last: bool) -> np.ndarray:
        stdout, line = self.run(ids)
        V = self.config.vocab_size
        shape = (V,) if last else (len(ids), V)
        if self.command.gives.endswith("npy"):
            values = self._read_npy(line, [shape, (1, V)] if last else [shape])
        else:
            try:
                rows = [row.split() for row in stdout.decode().splitlines() if row.strip()]
                values = np.array([[float(x) for x in row] for row in rows])
            except (UnicodeDecodeError, ValueError) as e:
                raise self.malformed(line, f"stdout is not numbers: {e}") from None
        if last and values.shape == (1, V):
            values = values[0]
        if values.shape != shape:
            raise self.malformed(line, f"expected {list(shape)} values, found {list(values.shape)}")
        return values

    def _read_npy(self, line: str, shapes: list[tuple[int, ...]]) -> np.ndarray:
        """The array the program wrote to its .npy file, of one of `shapes`: its size is bounded by them before
        it is read, and its header read before its data (a header may claim any size)."""
        if not os.path.lexists(self.out_path):
            raise self.malformed(line, f"it wrote no file {self.out_path}")
        limit = max(int(np.prod(shape)) for shape in shapes) * np.dtype(np.longdouble).itemsize + _NPY_HEADER_BYTES
        try:
            data = io.BytesIO(read_small(self.out_path, "its .npy file", limit))
        except CheckpointError as e:
            raise self.malformed(line, str(e)) from None
        try:
            version = np.lib.format.read_magic(data)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            found, _, dtype = read_header(data)
            if not np.issubdtype(dtype, np.floating):
                raise self.malformed(line, f"{self.out_path} holds {dtype}, not floating-point numbers")
            if tuple(found) not in shapes:
                raise self.malformed(line, f"expected {list(shapes[0])} values, found {list(found)}")
            data.seek(0)
            return np.load(data, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise self.malformed(line, f"{self.out_path} is not a .npy array: {e}") from None


class CommandGreedy(CommandModel):
    """A program that generates: its greedy ids, printed as ids or as text through a tokenizer.bin."""

    capabilities = frozenset({"greedy"})

    def __init__(self, command: Command, config: ModelConfig, weights: Weights) -> None:
        super().__init__(command, config, weights)
        self._first: int | None = None  # the id the written model calls BOS (greedy-text)

    def prepare(self) -> None:
        if self.command.gives == "greedy-text":
            self._write_renamed(BOS)
        else:
            super().prepare()

    def _write_renamed(self, first: int) -> None:
        if self._first != first:
            weights = self._weights if first == BOS else _swapped(self.config, self._weights, BOS, first)
            write_model(self.command.format, self.dir, self.config, weights)
            self._first = first

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        """The n_new tokens the program generates after `prompt` [T]."""
        ids = [int(t) for t in np.asarray(prompt).reshape(-1)]
        V, n_ctx = self.config.vocab_size, self.config.n_ctx
        if not ids or min(ids) < 0 or max(ids) >= V:
            raise ValueError(f"prompt must hold 1 or more ids in [0, {V}), found {ids}")
        if len(ids) + n_new - 1 > n_ctx:
            raise ValueError(
                f"prompt of {len(ids)} + {n_new} new tokens needs {len(ids) + n_new - 1} positions, "
                f"more than n_ctx={n_ctx}"
            )
        if n_new == 0:
            return np.zeros(0, dtype=np.int64)
        if self.command.gives == "greedy-ids":
            stdout, line = self.run(ids, n_new)
            try:
                out = [int(x) for x in stdout.split()]
            except ValueError as e:
                raise self.malformed(line, f"stdout is not token ids: {e}") from None
            if len(out) != n_new:
                raise self.malformed(line, f"expected {n_new} ids, found {len(out)}: {out[:20]}")
            return np.array(out, dtype=np.int64)
        rename = renaming(ids[0])
        renamed = [rename.get(t, t) for t in ids]
        text = TextPrompt.for_prompt(V, renamed, self.command.text_rules)
        self._write_renamed(ids[0])
        write_tokenizer(self.tokenizer_path, text.tokenizer())
        stdout, line = self.run(ids, n_new, prompt=os.fsdecode(text.text()))  # argv carries the bytes back
        try:
            out = text.read(stdout, n_new)
        except ValueError as e:
            raise self.malformed(line, str(e)) from None
        return np.array([rename.get(t, t) for t in out], dtype=np.int64)


def _swapped(config: ModelConfig, weights: Weights, a: int, b: int) -> Weights:
    """The same model with token ids a and b exchanged (embedding and classifier rows)."""
    out: dict[str, Any] = dict(weights)
    names = [EMBEDDING[config.family]] + ([] if config.tie_embeddings else [CLASSIFIER])
    for name in names:
        rows = np.array(weights[name], dtype=np.float32)
        rows[[a, b]] = rows[[b, a]]
        out[name] = rows
    return out
