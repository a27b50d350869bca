"""Speed and memory of the NumPy reference against its peers, measured side by side in one run.

    python benchmarks/speed.py            # measure and print a Markdown section
    python benchmarks/speed.py --write    # ... and put it into benchmarks/RESULTS.md

Decode: tokens per second with a KV cache on the stories15M shape (seeded random weights; speed does
not depend on the values), greedy, over all 256 positions: the NumPy reference, `transformers`
(its default attention, its own DynamicCache) and llama2.c's run.c built as llama2.c's Makefile
builds it (`-O3`, and `-Ofast`), timed by run.c itself from the second token on, as for the others.
Each figure is also given as a fraction of the memory-bandwidth bound: a decode step reads every
weight once, so it cannot beat (copy bandwidth) / (bytes of weights), with the copy bandwidth
measured here as bytes read + written per second by a large array copy (STREAM's convention).
Prefill: GPT-2 124M at T = 5, 256, 1,024, NumPy against `transformers`, median of 3 after a warm-up.
Memory: the peak resident set (VmHWM) of each measurement, each run in a fresh process; for run.c,
of the run.c process itself (its model file is memory-mapped, so the weights count once).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks._machine import high_water_kib
from benchmarks.results_file import write_section

ROOT = Path(__file__).resolve().parent.parent
DECODE_PRESET, PREFILL_PRESET = "llama2c-stories15M", "gpt2"
PREFILL_LENGTHS = (5, 256, 1024)


def _weights(preset_name: str):
    from verifier.model.presets import preset
    from verifier.model.weights import init_weights

    config = preset(preset_name)
    return config, init_weights(config, seed=0)


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
            out = model(token, past_key_values=out.past_key_values, use_cache=True)
        return {"tok_s": (config.n_ctx - 1) / (time.perf_counter() - t0)}


def decode_run_c(optimization: str) -> dict:
    from verifier.formats.llama2c import write_llama2c
    from verifier.formats.llama2c_tokenizer import write_tokenizer
    from verifier.plugin.command.text import BOS, TextPrompt
    from verifier.plugin.llama2c import build

    config, weights = _weights(DECODE_PRESET)
    binary = build.binary(optimization)
    with tempfile.TemporaryDirectory() as tmp:
        write_llama2c(Path(tmp) / "model.bin", config, weights, version=0)
        write_tokenizer(Path(tmp) / "tokenizer.bin", TextPrompt.for_prompt(config.vocab_size, [BOS]).tokenizer())
        command = [str(binary), "model.bin", "0", str(config.n_ctx)]
        with subprocess.Popen(command, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
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
    if engine == "numpy":
        from verifier.reference import NumpyModel

        model = NumpyModel(config, weights)

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
    "decode/run.c -O3": lambda: decode_run_c("O3"),
    "decode/run.c -Ofast": lambda: decode_run_c("Ofast"),
    **{f"prefill/numpy/{T}": (lambda T=T: prefill("numpy", T)) for T in PREFILL_LENGTHS},
    **{f"prefill/transformers/{T}": (lambda T=T: prefill("transformers", T)) for T in PREFILL_LENGTHS},
}


def measure_in_subprocess(peer: str) -> dict:
    """One measurement in a fresh interpreter, so that its peak memory is its own."""
    out = subprocess.run(
        [sys.executable, __file__, "--peer", peer], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _peer_main(peer: str) -> None:
    result = PEERS[peer]()
    result.setdefault("peak_rss_mib", high_water_kib() / 1024)
    print(json.dumps(result))


def render(results: dict[str, dict], bandwidth: float, command: str) -> str:
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
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}). Copy bandwidth {bandwidth / 1e9:.1f} GB/s "
        f"(read + write); stories15M weights {weight_bytes / 1e6:.1f} MB a token, so the bandwidth bound is "
        f"{bound:.0f} tok/s.",
        "",
        "### Decode, stories15M shape, 256 positions, greedy with a KV cache",
        "",
        "| implementation | tok/s | x run.c -O3 | fraction of bandwidth bound | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("numpy", "transformers", "run.c -O3", "run.c -Ofast"):
        tok_s, rss = results[f"decode/{name}"]["tok_s"], results[f"decode/{name}"]["peak_rss_mib"]
        lines.append(f"| {name} | {tok_s:.1f} | {tok_s / o3:.2f} | {tok_s / bound:.0%} | {rss:.0f} |")
    lines += [
        "",
        "### Prefill, GPT-2 124M (median of 3 after a warm-up)",
        "",
        "| T | NumPy (s) | transformers (s) | NumPy / transformers | NumPy peak RSS (MiB) | HF peak RSS (MiB) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for T in PREFILL_LENGTHS:
        n, t = results[f"prefill/numpy/{T}"], results[f"prefill/transformers/{T}"]
        lines.append(
            f"| {T:,} | {n['seconds']:.3f} | {t['seconds']:.3f} | {n['seconds'] / t['seconds']:.2f} "
            f"| {n['peak_rss_mib']:.0f} | {t['peak_rss_mib']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", choices=list(PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    args = parser.parse_args()
    if args.peer:
        _peer_main(args.peer)
        return
    bandwidth = measure_in_subprocess("bandwidth")["bytes_per_s"]
    results = {}
    for peer in PEERS:
        if peer == "bandwidth":
            continue
        results[peer] = measure_in_subprocess(peer)
        print(f"{peer}: {results[peer]}", file=sys.stderr, flush=True)
    section = render(results, bandwidth, "python benchmarks/speed.py --write")
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
