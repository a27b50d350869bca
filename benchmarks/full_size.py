"""Full-size verification against the streaming float64 oracle: Llama-2-7B's shape and the GPT-2 family.

    python benchmarks/full_size.py --scratch DIR            # measure; print a Markdown section
    python benchmarks/full_size.py --scratch DIR --write    # ... and put it into benchmarks/RESULTS.md
    python benchmarks/full_size.py --scratch DIR --models gpt2 gpt2-medium

For each model, a checkpoint with seeded weights (`iter_init_weights`, scale 0.02) is written to DIR
as sharded float32 safetensors, one shard in memory at a time (Llama-2-7B's is 27 GB, more than this
machine's memory), and removed afterwards. Then each implementation runs the same batch of sequences
in a process of its own (so its peak resident set, VmHWM, is its own), reading the checkpoint through
`verifier.formats.map_checkpoint`:

- the oracle: the NumPy reference in float64, streamed (each weight read, converted, used, dropped);
- the NumPy reference in float32, streamed the same way;
- `transformers`: in bfloat16 for Llama-2-7B (13.5 GB resident), in float32 for the GPT-2 family.

Each is compared with the oracle's logits: max |diff|, relative error (max |diff| / max |oracle|),
top-1 agreement (the fraction of positions whose argmax is the oracle's) and, for float32, the
ratio to the tolerance policy's bound (its relative floor; `verifier.analysis.tolerance`).
The oracle's time is set against the bound of reading the weights once: from disk (the checkpoint's
pages dropped from the page cache with posix_fadvise, then read sequentially: for Llama-2-7B a file
larger than the page cache can hold) and from the page cache (a 2 GiB file read twice, the second
read timed). The oracle runs cold (its checkpoint dropped from the page cache first) and, where the
checkpoint fits in memory, warm.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
from benchmarks._machine import describe, high_water_kib, worktree  # noqa: E402
from benchmarks.results_file import write_data, write_section  # noqa: E402

MODELS = ("llama-2-7b", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
SHARD_BYTES = 2 * 2**30
PAGE_CACHE_PROBE_BYTES = 2 * 2**30
READ_BLOCK = 16 * 2**20
SEED, SCALE = 0, 0.02


def model_config(name: str):
    from verifier.model.config import from_hf_dict
    from verifier.model.known_models import known_model
    from verifier.model.presets import PRESETS

    return PRESETS[name] if name in PRESETS else from_hf_dict(known_model(name).fields)


def write_checkpoint(name: str, directory: Path) -> float:
    """Seconds to write `name`'s seeded checkpoint to `directory`, shard by shard."""
    from verifier.formats.hf_dir import write_hf_shards
    from verifier.model.weights import iter_init_weights

    config = model_config(name)
    start = time.perf_counter()
    write_hf_shards(directory, config, iter_init_weights(config, seed=SEED, scale=SCALE), max_shard_bytes=SHARD_BYTES)
    return time.perf_counter() - start


def weight_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.safetensors"))


def drop_from_page_cache(paths: list[Path]) -> None:
    """Evict the files' (clean) pages, so that the next read comes from the disk."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_seconds(paths: list[Path]) -> float:
    """Seconds to read the files once, sequentially, into a reused buffer."""
    buffer = bytearray(READ_BLOCK)
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass
    return time.perf_counter() - start


def disk_bandwidth(paths: list[Path]) -> float:
    """Bytes per second read from the disk: the files dropped from the page cache, then read once."""
    drop_from_page_cache(paths)
    return sum(p.stat().st_size for p in paths) / read_seconds(paths)


def page_cache_bandwidth(scratch: Path) -> float:
    """Bytes per second read from the page cache: a 2 GiB file read twice, the second read timed."""
    probe = scratch / "page-cache-probe.bin"
    with open(probe, "wb") as handle:
        chunk = np.random.default_rng(0).integers(0, 256, READ_BLOCK, dtype=np.uint8).tobytes()
        for _ in range(PAGE_CACHE_PROBE_BYTES // READ_BLOCK):
            handle.write(chunk)
    try:
        read_seconds([probe])
        return PAGE_CACHE_PROBE_BYTES / read_seconds([probe])
    finally:
        probe.unlink()


# ---- the implementations, each run in a process of its own --------------------------------------


def run_role(role: str, checkpoint: Path, tokens: np.ndarray, out: Path) -> dict:
    """Run one implementation on `tokens` [B, T]; save its logits (float32) to `out`; return timings."""
    from verifier.formats import map_checkpoint
    from verifier.reference import NumpyModel

    ckpt = map_checkpoint(checkpoint)
    start, cpu_start = time.perf_counter(), time.process_time()
    if role in ("oracle", "numpy-float32"):
        model = NumpyModel(ckpt.config, ckpt.weights, np.float64 if role == "oracle" else np.float32, stream=True)
        load = 0.0
    else:
        import torch

        from verifier.plugin.adapters.hf_transformers import TransformersModel

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count() or 1)
        model = TransformersModel(ckpt.config, ckpt.weights, getattr(torch, role.removeprefix("transformers-")))
        load = time.perf_counter() - start
    logits = model.logits(tokens)
    seconds, cpu_seconds = time.perf_counter() - start - load, time.process_time() - cpu_start
    np.save(out, np.asarray(logits, dtype=np.float64 if role == "oracle" else np.float32))
    return {"load_seconds": load, "seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss_kib": high_water_kib()}


def measure(
    role: str,
    checkpoint: Path,
    tokens_file: Path,
    out: Path,
    *,
    threads: int,
    needs_bytes: int = 0,
    tree: Path | None = None,
) -> dict:
    """`run_role` in a fresh process, once `needs_bytes` of memory are available (the machine is shared),
    with the package of `tree` (a --before worktree) where given."""
    while _available_bytes() < needs_bytes:
        print(f"{role}: waiting for {needs_bytes / 2**30:.1f} GiB of available memory", file=sys.stderr, flush=True)
        time.sleep(30)
    load = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, __file__, "--role", role, "--checkpoint", str(checkpoint), "--tokens", str(tokens_file),
         "--out", str(out), *(["--tree", str(tree)] if tree else [])],
        capture_output=True, text=True, cwd=ROOT, check=False, env=_thread_env(threads),
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{role} on {checkpoint} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"load_average": load}


def _thread_env(threads: int) -> dict[str, str]:
    """The environment of a measured process: `threads` BLAS / torch threads (0: the libraries' defaults)."""
    env = dict(os.environ)
    if threads:  # read by OpenBLAS and torch when they start
        env |= {name: str(threads) for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    return env


def compare(found: np.ndarray, oracle: np.ndarray, *, rope_positions: int, role: str, n_layers: int) -> dict:
    """The raw figures of `found` against the oracle's logits, both [B, T, V]: max |diff|, relative
    error, top-1 agreement, and the ratio to the bound of the implementation's precision (the float32
    policy's, or the bfloat16 class's) on its floor: the spread terms would take three more passes."""
    from verifier.analysis import tolerance

    diff = float(np.max(np.abs(found.astype(np.float64) - oracle)))
    figures: dict = {
        "max_diff": diff,
        "relative": diff / float(np.max(np.abs(oracle))),
        "top1": float(np.mean(found.argmax(-1) == oracle.argmax(-1))),
    }
    if role.endswith("float32"):
        figures["bound_ratio"] = diff / tolerance.bound(oracle, rope_positions=rope_positions)
        figures["bound"] = "the float32 floor"
    else:
        bound = bfloat16_floor(oracle, rope_positions, n_layers)
        figures["bound_ratio"], figures["bound"] = diff / bound, "the bfloat16 class's floor"
    return figures


def bfloat16_floor(oracle: np.ndarray, rope_positions: int, n_layers: int) -> float:
    """The bfloat16 precision class's floor for `oracle` (its bound without neighbours)."""
    from verifier.analysis.precision import resolve

    return float(resolve("bfloat16").bound(oracle, rope_positions=rope_positions, n_layers=n_layers))


# ---- one model ----------------------------------------------------------------------------------------


def bench_model(
    name: str,
    scratch: Path,
    batch: int,
    length: int,
    threads: int,
    disk_bps: float | None,
    cache_bps: float,
    before: Path | None = None,
) -> dict:
    config = model_config(name)
    directory = scratch / name
    shutil.rmtree(directory, ignore_errors=True)
    print(f"{name}: writing the checkpoint to {directory}", file=sys.stderr, flush=True)
    write_seconds = write_checkpoint(name, directory)
    files = weight_files(directory)
    nbytes = sum(p.stat().st_size for p in files)
    try:
        if disk_bps is None:
            disk_bps = disk_bandwidth(files)
        tokens = np.random.default_rng(1).integers(0, config.vocab_size, (batch, length))
        tokens_file = scratch / "tokens.npy"
        np.save(tokens_file, tokens)
        runs: dict[str, dict] = {}
        drop_from_page_cache(files)
        runs["oracle"] = measure("oracle", directory, tokens_file, scratch / "oracle.npy", threads=threads)
        print(f"{name}: oracle (cold) {runs['oracle']}", file=sys.stderr, flush=True)
        if before:
            drop_from_page_cache(files)
            runs["oracle-before"] = measure(
                "oracle", directory, tokens_file, scratch / "oracle-before.npy", threads=threads, tree=before
            )
            print(f"{name}: oracle before (cold) {runs['oracle-before']}", file=sys.stderr, flush=True)
        fits = nbytes < 0.5 * _available_bytes()
        if fits:
            read_seconds(files)  # into the page cache
            runs["oracle-warm"] = measure(
                "oracle", directory, tokens_file, scratch / "oracle-warm.npy", threads=threads
            )
            print(f"{name}: oracle (warm) {runs['oracle-warm']}", file=sys.stderr, flush=True)
        peers = ["numpy-float32", "transformers-bfloat16" if config.family == "llama" else "transformers-float32"]
        oracle = np.load(scratch / "oracle.npy")
        rope_positions = length - 1 if config.uses_rope else 0
        for role in peers:
            resident = nbytes // 2 if role.endswith("bfloat16") else nbytes if role.startswith("transformers") else 0
            runs[role] = measure(
                role, directory, tokens_file, scratch / f"{role}.npy", threads=threads, needs_bytes=resident + 2**30
            )
            found = np.load(scratch / f"{role}.npy")
            runs[role] |= compare(found, oracle, rope_positions=rope_positions, role=role, n_layers=config.n_layers)
            print(f"{name}: {role} {runs[role]}", file=sys.stderr, flush=True)
        for again in ("oracle-warm", "oracle-before"):
            if again in runs:
                runs[again]["identical"] = bool(np.array_equal(np.load(scratch / f"{again}.npy"), oracle))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    from verifier.model.params import count_parameters

    return {
        "name": name, "parameters": count_parameters(config), "bytes": nbytes, "write_seconds": write_seconds,
        "disk_bps": disk_bps, "cache_bps": cache_bps, "tokens": batch * length, "batch": batch, "length": length,
        "runs": runs,
    }  # fmt: skip


def _available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


# ---- the report -------------------------------------------------------------------------------------------


def render(results: list[dict], command: str, disk_bps: float, cache_bps: float, before: str | None = None) -> str:
    lines = [
        "## Full size: Llama-2-7B and the GPT-2 family against the streaming float64 oracle",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}). Seeded weights (scale {SCALE}), float32 safetensors "
        f"in {SHARD_BYTES // 2**30} GiB shards, written shard by shard and removed after. Read bandwidth: disk "
        f"{disk_bps / 1e9:.2f} GB/s (the largest checkpoint dropped from the page cache, then read once), page "
        f"cache {cache_bps / 1e9:.2f} GB/s (a 2 GiB file read twice, the second read timed). The machine is shared: "
        "each run's 1-minute load average is given (2 cores), and its CPU time beside its wall time.",
        "",
        "### The oracle against the bound of reading the weights once",
        "",
        "| model | parameters | checkpoint | tokens (B x T) | read from disk | read from page cache | oracle, cold "
        "(CPU) | / disk bound | oracle, warm (CPU) | / page-cache bound | oracle peak RSS | load average |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        disk, cache = r["bytes"] / r["disk_bps"], r["bytes"] / r["cache_bps"]
        cold, warm = r["runs"]["oracle"], r["runs"].get("oracle-warm")
        warm_cells = "- (larger than memory) | -"
        if warm:
            warm_cells = f"{warm['seconds']:.1f} s ({warm['cpu_seconds']:.1f} s) | {warm['seconds'] / cache:.2f}"
        loads = ", ".join(f"{run['load_average']:.1f}" for role, run in r["runs"].items() if role.startswith("oracle"))
        lines.append(
            f"| {r['name']} | {r['parameters']:,} | {r['bytes'] / 1e9:.1f} GB | {r['batch']} x {r['length']} "
            f"| {disk:.1f} s | {cache:.1f} s | {cold['seconds']:.1f} s ({cold['cpu_seconds']:.1f} s) "
            f"| {cold['seconds'] / disk:.2f} | {warm_cells} | {cold['peak_rss_kib'] / 2**20:.2f} GiB | {loads} |"
        )
    if before:
        lines += [
            "",
            f"### The oracle's read-ahead, before ({before}) and after",
            "",
            "The same cold oracle run twice in this run, each after the checkpoint was dropped from the page cache: "
            f"with the package at {before} (read-ahead asked of the kernel with posix_fadvise(WILLNEED)), and as "
            "committed (a thread of the reader's reads the next 512 MB while the pass computes).",
            "",
            "| model | before, cold (CPU) | / disk bound | after, cold (CPU) | / disk bound | same logits "
            "| load average |",
            "|---|---:|---:|---:|---:|---|---|",
        ]
        for r in results:
            disk, old, new = r["bytes"] / r["disk_bps"], r["runs"]["oracle-before"], r["runs"]["oracle"]
            lines.append(
                f"| {r['name']} | {old['seconds']:.1f} s ({old['cpu_seconds']:.1f} s) | {old['seconds'] / disk:.2f} "
                f"| {new['seconds']:.1f} s ({new['cpu_seconds']:.1f} s) | {new['seconds'] / disk:.2f} "
                f"| {old['identical']} | {old['load_average']:.1f}, {new['load_average']:.1f} |"
            )
    lines += [
        "",
        "### Each implementation against the oracle",
        "",
        "| model | implementation | peak RSS | load | forward | CPU time | per verified token | max \\|diff\\| "
        "| relative error | top-1 agreement | verdict | load average |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        for role, run in r["runs"].items():
            if role in ("oracle-warm", "oracle-before"):
                continue
            per_token = (run["load_seconds"] + run["seconds"]) / r["tokens"]
            figures = (
                "| - | - | - | the oracle"
                if role == "oracle"
                else (
                    f"| {run['max_diff']:.3g} | {run['relative']:.3g} | {run['top1']:.1%} | "
                    + f"{run['bound_ratio']:.3g}x {run['bound']}"
                )
            )
            lines.append(
                f"| {r['name']} | {role} | {run['peak_rss_kib'] / 2**20:.2f} GiB | {run['load_seconds']:.1f} s "
                f"| {run['seconds']:.1f} s | {run['cpu_seconds']:.1f} s | {per_token:.2f} s {figures} "
                f"| {run['load_average']:.1f} |"
            )
    identical = [f"{r['name']} {r['runs']['oracle-warm']['identical']}" for r in results if "oracle-warm" in r["runs"]]
    lines += [
        "",
        "Load is `transformers` building the model and copying each weight in (converted) from the mapped file; "
        "the streamed NumPy runs read their weights inside the forward pass. CPU time covers load and forward "
        "(both cores count). Per verified token: (load + forward) / tokens. The warm oracle's logits are bit for "
        "bit the cold run's: " + (", ".join(identical) or "no warm run") + ".",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch", type=Path, help="where checkpoints are written (outside the repository)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--batch", type=int, default=4, help="sequences (default 4)")
    parser.add_argument("--length", type=int, default=16, help="tokens per sequence (default 16)")
    parser.add_argument(
        "--threads", type=int, default=1, help="BLAS / torch threads per process (0: every core; default 1)"
    )
    parser.add_argument("--before", metavar="REV", help="also run the oracle cold as at git revision REV")
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tokens", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        if args.tree:  # before `verifier` is first imported: the package measured is the worktree's
            sys.path.insert(0, str(args.tree))
        print(json.dumps(run_role(args.role, args.checkpoint, np.load(args.tokens), args.out)))
        return
    if args.scratch is None:
        parser.error("--scratch DIR is required (a directory outside the repository, with room for the checkpoints)")
    args.scratch.mkdir(parents=True, exist_ok=True)
    cache_bps = page_cache_bandwidth(args.scratch)
    results, disk_bps = [], None
    with contextlib.ExitStack() as stack:
        before = stack.enter_context(worktree(args.before)) if args.before else None
        for name in args.models:  # the largest first: its disk read measures the disk bandwidth for all
            result = bench_model(name, args.scratch, args.batch, args.length, args.threads, disk_bps, cache_bps, before)
            disk_bps = result["disk_bps"]
            results.append(result)
    command = f"python benchmarks/full_size.py --scratch DIR --threads {args.threads}"
    command += (f" --before {args.before}" if args.before else "") + (" --write" if args.write else "")
    if args.models != list(MODELS):
        command += " --models " + " ".join(args.models)
    section = render(results, command, disk_bps or 0.0, cache_bps, args.before)
    print(section)
    if args.write:
        write_section(section)
        data = {"machine": describe(), "command": command, "date": time.strftime("%Y-%m-%d"), "before": args.before}
        write_data("full_size", data | {"disk_bps": disk_bps, "cache_bps": cache_bps, "models": results})


if __name__ == "__main__":
    main()
