"""The fuzzer's worker process: reads one path a line from stdin, runs every reader on it under a
memory limit, and answers with one JSON line per path (see tests/fuzz/runner.py, which starts it).

Run as `python -m tests.fuzz.worker` from the repository root. A request is
`{"path": ..., "memory": bytes}`: the address space the readers may add to what the worker holds
(RLIMIT_AS, set before the readers run and lifted after). The answer is
`{"outcomes": [[reader, outcome, detail], ...], "peak_rss_kib": ...}` with outcome "returned",
"refused" (a CheckpointError; detail is its message, cut to 2,000 characters, and its length) or
"raised" (any other exception; detail is its type and message).
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import resource
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from verifier.cli import inspect_cmd, params_cmd
from verifier.formats import (
    Checkpoint,
    CheckpointError,
    checkpoint_config,
    detect_format,
    load_checkpoint,
    map_checkpoint,
    read_tokenizer,
)
from verifier.formats.load import TOKENIZER
from verifier.model.config import ModelConfig
from verifier.model.weights import weight_shapes

_SHOWN = 2000  # characters of a message sent back: enough to judge it, never a 100 MB echo


class InvalidResult(Exception):
    """A reader returned, but not a validated config and weights."""


def touched(checkpoint: Checkpoint) -> Checkpoint:
    """`checkpoint`, every weight looked up (a mapped one read from the file) and checked against the config."""
    if not isinstance(checkpoint.config, ModelConfig):
        raise InvalidResult(f"config is a {type(checkpoint.config).__name__}")
    shapes = weight_shapes(checkpoint.config)
    if set(checkpoint.weights) != set(shapes):
        raise InvalidResult("the weights are not the config's canonical set")
    for name, shape in shapes.items():
        array = checkpoint.weights[name]
        if array.shape != shape or array.dtype != np.float32 or not np.isfinite(array).all():
            raise InvalidResult(f"weight {name}: {array.dtype} {array.shape}, or not finite")
    return checkpoint


def _config(config: ModelConfig) -> ModelConfig:
    if not isinstance(config, ModelConfig):
        raise InvalidResult(f"config is a {type(config).__name__}")
    return config


def inspect(path: Path) -> str:
    """What `verifier inspect PATH` prints (both forms), as its `run` makes it."""
    if detect_format(path) == TOKENIZER:
        report = inspect_cmd.tokenizer_report(path, read_tokenizer(path))
    else:
        report = inspect_cmd.checkpoint_report(touched(load_checkpoint(path)))
    return json.dumps(report) + inspect_cmd.render(report)


def params(path: Path) -> str:
    """What `verifier params PATH` prints (both forms)."""
    counted = params_cmd._counted(str(path), download=False)
    return json.dumps(params_cmd.to_json(counted)) + params_cmd.render(counted)


# The readers of the four commands that read files: `inspect` (detect_format, then load_checkpoint or
# read_tokenizer), `params` (its own config.json path, else checkpoint_config), `trace` (checkpoint_config
# for a config.json, else load_checkpoint), `check --checkpoint` (map_checkpoint, then the weights loaded or
# mapped). read_tokenizer runs on every file: nothing in a tokenizer.bin tells it from another file.
READERS: dict[str, Callable[[Path], Any]] = {
    "inspect": inspect,
    "load_checkpoint": lambda path: touched(load_checkpoint(path)),
    "map_checkpoint": lambda path: touched(map_checkpoint(path)),
    "checkpoint_config": lambda path: _config(checkpoint_config(path)),
    "params": params,
    "read_tokenizer": read_tokenizer,
}


def run_readers(path: Path) -> list[tuple[str, str, Any]]:
    """(reader, outcome, detail) for each reader on `path`."""
    outcomes: list[tuple[str, str, Any]] = []
    for name, read in READERS.items():
        try:
            read(path)
        except CheckpointError as e:
            message = str(e)
            outcomes.append((name, "refused", {"message": message[:_SHOWN], "length": len(message)}))
        except BaseException as e:  # anything else is what the fuzzer looks for
            if isinstance(e, KeyboardInterrupt):
                raise
            outcomes.append((name, "raised", f"{type(e).__name__}: {str(e)[:_SHOWN]}"))
        else:
            outcomes.append((name, "returned", None))
    return outcomes


def _status_kib(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(found.group(1)) if found else 0


def serve(requests: Any, answers: Any) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    for line in requests:
        request = json.loads(line)
        limit = _status_kib("VmSize") * 1024 + request["memory"]
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
        try:
            outcomes = run_readers(Path(request["path"]))
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        answers.write(json.dumps({"outcomes": outcomes, "peak_rss_kib": _status_kib("VmHWM")}) + "\n")
        answers.flush()


def main() -> None:
    faulthandler.enable()  # a crash leaves its traceback on stderr, which the runner keeps
    warnings.simplefilter("ignore")  # overflow warnings of mutated weights are no finding
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # a stray print goes to stderr, not into the answers
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
