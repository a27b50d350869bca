"""Runs the hostile programs of tests/command/hostile.py through the protocol, each once, in this process
limited to GIB more address space than it has at the start: `python -m tests.command.hostile_calls DIR
MODE:GIVES ...`. One JSON line per mode on stdout: {"mode", "outcome", "message"}, where outcome is
"violation" (a ContractViolation, its message), "returned" (the logits' shape) or "raised" (any other
exception). Each mode writes the pids it leaves behind to DIR/MODE.pids."""

from __future__ import annotations

import json
import resource
import shlex
import sys
from pathlib import Path

import numpy as np

from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.command import Command
from verifier.plugin.contract import ContractViolation, build_checked
from verifier.plugin.registry import ModelSpec

GIB = 1 << 30
TIMEOUT_S = 2.0
PROGRAM = Path(__file__).with_name("hostile.py")
CONFIG = preset("gpt2").replace(vocab_size=19, n_ctx=16, d_model=8, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=12)
TOKENS = np.array([3, 1, 4, 1, 5])


def _address_space() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


def call(directory: Path, mode: str, gives: str) -> dict[str, str]:
    pids = directory / f"{mode}.pids"
    program = f"{shlex.quote(sys.executable)} {shlex.quote(str(PROGRAM))}"
    template = f"{program} {mode} {{out}} {shlex.quote(str(pids))} {{tokens}} {{model}}"
    command = Command.parse(template, "hf", gives, TIMEOUT_S)
    try:
        model = build_checked(ModelSpec(mode, command.build, "test"), CONFIG, init_weights(CONFIG, seed=0))
        return {"mode": mode, "outcome": "returned", "message": str(model.logits(TOKENS).shape)}
    except ContractViolation as e:
        return {"mode": mode, "outcome": "violation", "message": str(e)}
    except Exception as e:
        return {"mode": mode, "outcome": "raised", "message": f"{type(e).__name__}: {e}"[:2000]}


def main(directory: str, *cases: str) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_address_space() + GIB, resource.RLIM_INFINITY))
    for case in cases:
        mode, gives = case.split(":")
        print(json.dumps(call(Path(directory), mode, gives)), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
