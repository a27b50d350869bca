"""A stand-in program for the command-line protocol's own tests: `python program.py MODE ...`.

It reads an HF directory with the suite's reader and answers with the float32 NumPy reference, so
the tests exercise the protocol (files, placeholders, outputs, failures) without a compiler. The
language-neutral proof is the C program in examples/c_llama/. Modes:
  npy MODEL TOKENS OUT         logits for every position to OUT
  last-npy MODEL TOKENS OUT    the last position's logits to OUT
  text MODEL TOKENS            logits for every position on stdout
  greedy-ids MODEL TOKENS N    N greedy ids on stdout
  gpt2-text MODEL TOKENS       as text, for GPT-2 models; fails (status 3) if given another family
  declines-llama MODEL TOKENS  as text for GPT-2 models; declines others (status 77, its reason on stderr)
  declines-long MODEL TOKENS   as text for up to 3 tokens; declines longer inputs (status 77)
  llama2 MODEL TOKENS          as text, as a Llama 2 port: declines other families (status 77), fails on a
                               head_dim or attention biases (a traceback), computes without RoPE scaling
  fail | hang | crash | short-npy MODEL TOKENS OUT | words   ways to break the protocol
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np


def _logits(model: str, tokens: str, *, llama2: bool = False) -> np.ndarray:
    from verifier.formats.load import load_checkpoint
    from verifier.reference import NumpyModel

    checkpoint = load_checkpoint(model)
    config, weights = checkpoint.config, checkpoint.weights
    if llama2:  # what a port written for Llama 2 reads of the file
        config = config.replace(head_dim=None, rope_scaling=None, qkv_bias=False, o_bias=False)
        unexpected = [name for name in weights if name.endswith(".bias")]
        if unexpected:
            raise KeyError(f"unexpected tensor {unexpected[0]}")
    with open(tokens) as f:
        ids = np.array([int(t) for t in f.read().split()])
    return NumpyModel(config, weights).logits(ids)


def _ids(tokens: str) -> list[int]:
    with open(tokens) as f:
        return [int(t) for t in f.read().split()]


def _family(model: str) -> str:
    with open(os.path.join(model, "config.json")) as f:
        return str(json.load(f)["model_type"])


def main(mode: str, *args: str) -> None:
    if mode == "fail":
        print("cannot open the model: no such tensor", file=sys.stderr)
        sys.exit(3)
    if mode == "hang":
        time.sleep(60)
    if mode == "crash":
        print("about to crash", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "words":
        print("hello world")
        return
    if mode == "gpt2-text" and _family(args[0]) != "gpt2":
        print(f"fed a {_family(args[0])} model, though declared GPT-2 only", file=sys.stderr)
        sys.exit(3)
    if mode == "declines-llama" and _family(args[0]) != "gpt2":
        print(f"loading {args[0]}", file=sys.stderr)
        print(f"this program runs GPT-2 only, not {_family(args[0])}", file=sys.stderr)
        sys.exit(77)
    if mode == "declines-long" and len(_ids(args[1])) > 3:
        print("this program takes at most 3 tokens", file=sys.stderr)
        sys.exit(77)
    if mode == "llama2" and _family(args[0]) != "llama":
        print(f"a Llama 2 port: no {_family(args[0])}", file=sys.stderr)
        sys.exit(77)
    logits = _logits(args[0], args[1], llama2=mode == "llama2")
    if mode == "npy":
        np.save(args[2], logits)
    elif mode == "last-npy":
        np.save(args[2], logits[-1])
    elif mode == "short-npy":
        np.save(args[2], logits[:-1])
    elif mode in ("text", "gpt2-text", "declines-llama", "declines-long", "llama2"):
        for row in logits:
            print(" ".join(f"{x:.9g}" for x in row))
    elif mode == "greedy-ids":
        with open(args[1]) as f:
            ids = [int(t) for t in f.read().split()]
        out = []
        for _ in range(int(args[2])):
            out.append(int(np.argmax(logits[-1])))
            ids.append(out[-1])
            with open(args[1], "w") as f:
                f.write(" ".join(map(str, ids)))
            logits = _logits(args[0], args[1])
        print(" ".join(map(str, out)))


if __name__ == "__main__":
    main(*sys.argv[1:])
