"""Speed and memory of the NumPy reference against its peers, measured side by side in one run.

    python benchmarks/speed.py            # measure and print a Markdown section
    python benchmarks/speed.py --write    # ... and put it into benchmarks/RESULTS.md

Decode: tokens per second with a KV cache on the stories15M shape (seeded random weights; speed does
not depend on the values), greedy, over all 256 positions: the NumPy reference, `transformers`
(its default attention, its own DynamicCache), llama2.c's run.c built as llama2.c's Makefile
builds it (the pinned 2023 one at `-O3` and `-Ofast`, the current one from a llama2.c tree at
`-O3`), timed by run.c itself from the second token on, as for the others, and llama.cpp
(llama-cpp-python, F32 weights and KV cache; one thread as run.c, and one per core: its threads
spin while they wait, so a busy machine slows the second far more than the first),
255 one-token steps through its own KV cache. Token 1's embedding row is scaled by 1e-3 so that
greedy decoding never picks it: the current run.c stops at token 1 (BOS).
Each figure is also given as a fraction of the memory-bandwidth bound: a decode step reads every
weight once, so it cannot beat (copy bandwidth) / (bytes of weights), with the copy bandwidth
measured here as bytes read + written per second by a large array copy (STREAM's convention).
Prefill: GPT-2 124M at T = 5, 256, 1,024: the float64 oracle and the float32 NumPy reference against
`transformers` in float32 (SDPA attention), each the median of 3 passes after a warm-up in a fresh
process, in PREFILL_ROUNDS rounds: the fastest round counts (a shared machine's noise only adds time).
`--before REV` also times the oracle and the reference as they were at git revision REV (checked out
in a temporary worktree) in each round, alternately with this checkout's, so that a change's before
and after are measured side by side through the same moments of the machine.
Memory: the peak resident set (VmHWM) of each measurement, each run in a fresh process; for run.c,
of the run.c process itself (its model file is memory-mapped, so the weights count once).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks._machine import high_water_kib, worktree
from benchmarks.results_file import write_data, write_section

ROOT = Path(__file__).resolve().parent.parent
DECODE_PRESET, PREFILL_PRESET = "llama2c-stories15M", "gpt2"
PREFILL_LENGTHS = (5, 256, 1024)
PREFILL_ENGINES = ("oracle", "numpy", "transformers")
# On a shared machine a before measured minutes after its after meets another load (one such run had
# the float32 reference at T = 1,024 7% slower after a change that made it faster in rounds): so each
# prefill is measured in rounds, the trees alternating, and the fastest round counts.
PREFILL_ROUNDS = 3


def _weights(preset_name: str):
    from verifier.model.presets import preset
    from verifier.model.weights import EMBEDDING, init_weights

    config = preset(preset_name)
    weights = init_weights(config, seed=0)
    weights[EMBEDDING[config.family]][1] *= 1e-3  # (tied classifier) never the argmax: run.c stops at BOS
    return config, weights


def copy_bandwidth(n_bytes: int = 512 * 2**20, repeats: int = 10) -> float:
    """Bytes read + written per second by the best of `repeats` copies of an n_bytes array."""
    a = np.ones(n_bytes // 4, np.float32)
    b = np.empty_like(a)
    best = min(_timed(lambda: np.copyto(b, a)) for _ in range(repeats))
    return 2 * a.nbytes / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def decode_numpy() -> dict:
    from verifier.reference import NumpyModel

    config, weights = _weights(DECODE_PRESET)
    model = NumpyModel(config, weights)
    logits, cache = model.decode(np.array([1]))
    t0 = time.perf_counter()
    for _ in range(config.n_ctx - 1):
        logits, cache = model.decode(np.array([int(np.argmax(logits[-1]))]), cache)
    return {"tok_s": (config.n_ctx - 1) / (time.perf_counter() - t0)}


def decode_transformers() -> dict:
    import torch

    from verifier.formats.hf import build_model

    config, weights = _weights(DECODE_PRESET)
    model = build_model(config, weights, attn_implementation="sdpa")
    with torch.no_grad():
        out = model(torch.tensor([[1]]), use_cache=True)
        t0 = time.perf_counter()
        for _ in range(config.n_ctx - 1):
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(token, cache=out.cache, use_cache=True)
        return {"tok_s": (config.n_ctx - 1) / (time.perf_counter() - t0)}


def decode_llamacpp(threads: int) -> dict:
    from verifier.plugin.adapters.llamacpp import LlamaCppModel

    config, weights = _weights(DECODE_PRESET)
    model = LlamaCppModel(config, weights, threads=threads)
    del weights  # llama.cpp holds its own copy
    t0 = time.perf_counter()
    generated = model.greedy(np.array([1]), config.n_ctx - 1)
    elapsed = time.perf_counter() - t0
    if len(generated) != config.n_ctx - 1:
        raise RuntimeError(f"llama.cpp generated {len(generated)} tokens, not {config.n_ctx - 1}")
    return {"tok_s": (config.n_ctx - 1) / elapsed}


def decode_run_c(program: str) -> dict:
    """`program`: `pinned-O3` / `pinned-Ofast` (the 2023 run.c) or `current-O3` (from a llama2.c tree)."""
    from verifier.formats.llama2c import write_llama2c
    from verifier.formats.llama2c_tokenizer import write_tokenizer
    from verifier.plugin.command.text import BOS, TextPrompt
    from verifier.plugin.llama2c import build, checkout

    config, weights = _weights(DECODE_PRESET)
    with tempfile.TemporaryDirectory() as tmp:
        write_llama2c(Path(tmp) / "model.bin", config, weights, version=0)
        write_tokenizer(Path(tmp) / "tokenizer.bin", TextPrompt.for_prompt(config.vocab_size, [BOS]).tokenizer())
        if program == "current-O3":
            binary = checkout.program("run")
            command = [str(binary), "model.bin", "-t", "0", "-n", str(config.n_ctx), "-i", "", "-z", "tokenizer.bin"]
        else:
            binary = build.binary(program.removeprefix("pinned-"))
            command = [str(binary), "model.bin", "0", str(config.n_ctx)]
        # The 2023 run.c prints its speed on stdout, the current one on stderr.
        with subprocess.Popen(command, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
            peak_kib = 0
            while proc.poll() is None:  # run.c's own high-water mark, sampled until it exits
                peak_kib = max(peak_kib, high_water_kib(proc.pid))
                time.sleep(0.01)
            stdout = proc.stdout.read() if proc.stdout else b""
    match = re.search(rb"achieved tok/s: ([0-9.]+)", stdout)
    if proc.returncode != 0 or not match:
        raise RuntimeError(f"run.c exited {proc.returncode} and printed no speed: {stdout[-200:]!r}")
    return {"tok_s": float(match.group(1)), "peak_rss_mib": peak_kib / 1024}


def prefill(engine: str, T: int) -> dict:
    config, weights = _weights(PREFILL_PRESET)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, T)
    if engine in ("oracle", "numpy"):
        from verifier.reference import NumpyModel

        model = NumpyModel(config, weights, dtype=np.float64 if engine == "oracle" else np.float32)

        def run() -> None:
            model.logits(tokens)
    else:
        import torch

        from verifier.formats.hf import build_model

        hf = build_model(config, weights, attn_implementation="sdpa")
        ids = torch.from_numpy(tokens)[None]

        def run() -> None:
            with torch.no_grad():
                hf(ids)

    run()
    return {"seconds": statistics.median(_timed(run) for _ in range(3))}


PEERS = {
    "bandwidth": lambda: {"bytes_per_s": copy_bandwidth()},
    "decode/numpy": decode_numpy,
    "decode/transformers": decode_transformers,
    "decode/run.c -O3": lambda: decode_run_c("pinned-O3"),
    "decode/run.c -Ofast": lambda: decode_run_c("pinned-Ofast"),
    "decode/run.c current -O3": lambda: decode_run_c("current-O3"),
    "decode/llama.cpp 1 thread": lambda: decode_llamacpp(1),
    f"decode/llama.cpp {os.cpu_count()} threads": lambda: decode_llamacpp(os.cpu_count() or 1),
    **{
        f"prefill/{engine}/{T}": (lambda engine=engine, T=T: prefill(engine, T))
        for engine in PREFILL_ENGINES
        for T in PREFILL_LENGTHS
    },
}


def measure_in_subprocess(peer: str, tree: Path | None = None) -> dict:
    """One measurement in a fresh interpreter, so that its peak memory is its own, of the package in
    `tree` (default: this checkout); {"error": why} if the peer cannot run here (llama.cpp not
    installed, no llama2.c tree)."""
    command = [sys.executable, __file__, "--peer", peer, *(["--tree", str(tree)] if tree else [])]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or [f"exited with status {out.returncode}"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fastest(measured: list[dict]) -> dict:
    """The round with the fewest seconds, or the first error if a round failed."""
    failed = [m for m in measured if "error" in m]
    return failed[0] if failed else min(measured, key=lambda m: m["seconds"])


def _peer_main(peer: str) -> None:
    result = PEERS[peer]()
    result.setdefault("peak_rss_mib", high_water_kib() / 1024)
    print(json.dumps(result))


DECODE_PEERS = (
    "numpy", "transformers", "run.c -O3", "run.c -Ofast", "run.c current -O3",
    "llama.cpp 1 thread", f"llama.cpp {os.cpu_count()} threads",
)  # fmt: skip


def render(
    results: dict[str, dict], bandwidth: float, command: str, load: tuple[float, float], before: str | None = None
) -> str:
    from benchmarks._machine import describe
    from verifier.model.params import count_parameters
    from verifier.model.presets import preset

    weight_bytes = 4 * count_parameters(preset(DECODE_PRESET))
    bound = bandwidth / weight_bytes
    o3 = results["decode/run.c -O3"]["tok_s"]
    lines = [
        "## Speed and memory",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}); load average (1 min) {load[0]:.2f} before, "
        f"{load[1]:.2f} after. Copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write); stories15M weights "
        f"{weight_bytes / 1e6:.1f} MB a token, so the bandwidth bound is {bound:.0f} tok/s.",
        "",
        "### Decode, stories15M shape, 256 positions, greedy with a KV cache",
        "",
        "run.c -O3 / -Ofast: the pinned 2023 run.c (llamac2py 0.1.4); run.c current: llama2.c at its tree's "
        "commit; llama.cpp: llama-cpp-python's vendored llama.cpp, F32 weights and KV cache.",
        "",
        "| implementation | tok/s | x run.c -O3 | fraction of bandwidth bound | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in DECODE_PEERS:
        result = results.get(f"decode/{name}")
        if result is None or "error" in result:
            lines.append(f"| {name} | not measured: {result['error'] if result else 'not run'} | | | |")
            continue
        tok_s, rss = result["tok_s"], result["peak_rss_mib"]
        lines.append(f"| {name} | {tok_s:.1f} | {tok_s / o3:.2f} | {tok_s / bound:.0%} | {rss:.0f} |")
    lines += [
        "",
        f"### Prefill, GPT-2 124M (the fastest of {PREFILL_ROUNDS} rounds, each the median of 3 after a warm-up)",
        "",
        "The oracle is the NumPy reference in float64, the reference float32; transformers runs in float32 "
        "with SDPA attention. Ratios are to transformers in the same run."
        + (f" Before: the same code at {before} (a temporary worktree), measured in this run." if before else ""),
        "",
        "| T | implementation | seconds | / transformers | peak RSS (MiB) |",
        "|---:|---|---:|---:|---:|",
    ]
    for T in PREFILL_LENGTHS:
        hf = results[f"prefill/transformers/{T}"]["seconds"]
        rows = [("oracle (float64)", f"prefill/oracle/{T}"), ("reference (float32)", f"prefill/numpy/{T}")]
        if before:
            rows += [(f"{name}, before", f"before/{key}") for name, key in rows]
        rows.append(("transformers (float32)", f"prefill/transformers/{T}"))
        for name, key in rows:
            r = results[key]
            lines.append(f"| {T:,} | {name} | {r['seconds']:.3f} | {r['seconds'] / hf:.2f} | {r['peak_rss_mib']:.0f} |")
    return "\n".join(lines)


def _data(
    results: dict[str, dict], bandwidth: float, command: str, load: tuple[float, float], before: str | None
) -> dict:
    """The run's figures for benchmarks/data/speed.json (the docs' plots)."""
    from benchmarks._machine import describe

    return {
        "machine": describe(), "command": command, "date": time.strftime("%Y-%m-%d"), "load": list(load),
        "bandwidth_bytes_per_s": bandwidth, "before": before, "prefill_lengths": list(PREFILL_LENGTHS),
        "decode_peers": list(DECODE_PEERS), "results": results,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", choices=list(PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)  # the package of a --before worktree
    parser.add_argument("--before", metavar="REV", help="also time the oracle and the reference at git revision REV")
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    args = parser.parse_args()
    if args.peer:
        if args.tree:  # before `verifier` is first imported: the package measured is the worktree's
            sys.path.insert(0, str(args.tree))
        _peer_main(args.peer)
        return
    load_before = os.getloadavg()[0]
    bandwidth = measure_in_subprocess("bandwidth")["bytes_per_s"]
    results = {}
    for peer in PEERS:
        if peer.startswith("decode/"):
            results[peer] = measure_in_subprocess(peer)
            print(f"{peer}: {results[peer]}", file=sys.stderr, flush=True)
    with contextlib.ExitStack() as stack:
        trees = {"": None} | ({"before/": stack.enter_context(worktree(args.before))} if args.before else {})
        rounds: dict[str, list[dict]] = {}
        for _ in range(PREFILL_ROUNDS):
            for peer in (peer for peer in PEERS if peer.startswith("prefill/")):
                for prefix, tree in trees.items():
                    if prefix and peer.startswith("prefill/transformers/"):
                        continue  # the peer, not the code changed
                    rounds.setdefault(prefix + peer, []).append(measure_in_subprocess(peer, tree))
                    print(f"{prefix}{peer}: {rounds[prefix + peer][-1]}", file=sys.stderr, flush=True)
    results |= {peer: _fastest(measured) for peer, measured in rounds.items()}
    failed = [peer for peer, result in results.items() if "error" in result and not peer.startswith("decode/")]
    if failed:
        raise SystemExit(f"these measurements failed: {', '.join(failed)}")
    load = (load_before, os.getloadavg()[0])
    command = "python benchmarks/speed.py" + (f" --before {args.before}" if args.before else "") + " --write"
    section = render(results, bandwidth, command, load, args.before)
    print(section)
    if args.write:
        write_section(section)
        write_data("speed", _data(results, bandwidth, command, load, args.before))


if __name__ == "__main__":
    main()
