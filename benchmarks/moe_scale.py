"""A Mixtral-8x7B-shaped checkpoint, larger than this machine's memory, against the streaming float64 oracle.

    python benchmarks/moe_scale.py --scratch DIR --layers 5            # measure; print a Markdown section
    python benchmarks/moe_scale.py --scratch DIR --layers 5 --write    # ... and put it into benchmarks/RESULTS.md

Mixtral-8x7B's published shape (d_model 4096, 32 heads over 8 kv heads, 8 experts of d_ff 14336, top-2,
vocab 32000; `verifier/model/known_models/mixtral-8x7b.json`) with fewer layers where the disk cannot hold
all 32 (each layer is 1.45 B parameters, 5.8 GB in float32). Seeded weights (`iter_init_weights`, scale
0.02; the routers at their own scale) are written as float32 safetensors shards, one shard in memory at a
time (`write_hf_shards`), and removed afterwards. Each tensor is then read from the shards when looked
up (`read_header` / `load_tensor`, memory-mapped) by a `LazyWeights`, and the NumPy reference runs streamed
(`stream=True`: each weight read, converted, used and dropped; a MoE layer one expert at a time) in a
process of its own: the float64 oracle with the checkpoint dropped from the page cache first (cold), then
the reference in float32, compared with the oracle. The oracle's time is set against reading the files
once from the disk. The weights are read by the formats' tensor reader with the config given here, not
through `map_checkpoint`, which needs the Mixtral config.json reader of the cfg branch.
"""

from __future__ import annotations

import argparse
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
from benchmarks._machine import describe, high_water_kib, memory_gib  # noqa: E402
from benchmarks.full_size import SHARD_BYTES, disk_bandwidth, drop_from_page_cache  # noqa: E402
from benchmarks.results_file import write_section  # noqa: E402

SECTION = "## Scale: a Mixtral-8x7B-shaped checkpoint against the streaming float64 oracle"
SEED, SCALE = 0, 0.02


def mixtral_8x7b(n_layers: int):
    """Mixtral-8x7B's config.json values (the known_models copy), with `n_layers` layers."""
    from verifier.model.config import ModelConfig

    fields = json.loads((ROOT / "verifier/model/known_models/mixtral-8x7b.json").read_text())["config"]
    return ModelConfig(
        family="mixtral", vocab_size=fields["vocab_size"], n_ctx=fields["max_position_embeddings"],
        d_model=fields["hidden_size"], n_layers=n_layers, n_heads=fields["num_attention_heads"],
        n_kv_heads=fields["num_key_value_heads"], d_ff=fields["intermediate_size"], norm_eps=fields["rms_norm_eps"],
        tie_embeddings=fields["tie_word_embeddings"], rope_theta=fields["rope_theta"],
        n_experts=fields["num_local_experts"], top_k=fields["num_experts_per_tok"], norm_topk=True,
    )  # fmt: skip


def mapped_weights(directory: Path, config):
    """The shards' tensors as a `LazyWeights`, each read (memory-mapped, float32) when looked up."""
    from verifier.formats.fileio import open_bounded
    from verifier.formats.safetensors_file import load_tensor, read_header
    from verifier.model.weights import LazyWeights, weight_shapes

    located = {}
    for shard in sorted(directory.glob("*.safetensors")):
        with open_bounded(shard) as reader:
            file = read_header(reader)
        located |= {entry.name: (file, entry) for entry in file.entries}
    return LazyWeights(weight_shapes(config), lambda name: load_tensor(*located[name]))


def run_role(role: str, directory: Path, n_layers: int, tokens: np.ndarray, out: Path) -> dict:
    from verifier.reference import NumpyModel

    config = mixtral_8x7b(n_layers)
    reads: list[str] = []
    weights = mapped_weights(directory, config)
    counted = weights.map(lambda name, array: reads.append(name) or array)
    start, cpu_start = time.perf_counter(), time.process_time()
    model = NumpyModel(config, counted, np.float64 if role == "oracle" else np.float32, stream=True)
    logits = model.logits(tokens)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    np.save(out, logits)
    experts = sum(".experts." in name for name in reads) // 3
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss_kib": high_water_kib(), "experts_read": experts}


def measure(role: str, directory: Path, n_layers: int, tokens_file: Path, out: Path) -> dict:
    load = os.getloadavg()[0]
    env = dict(os.environ) | {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, __file__, "--role", role, "--checkpoint", str(directory), "--layers", str(n_layers),
         "--tokens", str(tokens_file), "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, check=False, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{role} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"load_average": load}


def bench(scratch: Path, n_layers: int, batch: int, length: int) -> dict:
    from verifier.analysis import tolerance
    from verifier.formats.hf_dir import write_hf_shards
    from verifier.model.weights import iter_init_weights, weight_shapes

    config = mixtral_8x7b(n_layers)
    directory = scratch / f"mixtral-8x7b-{n_layers}-layers"
    shutil.rmtree(directory, ignore_errors=True)
    start = time.perf_counter()
    write_hf_shards(directory, config, iter_init_weights(config, seed=SEED, scale=SCALE), max_shard_bytes=SHARD_BYTES)
    write_seconds = time.perf_counter() - start
    files = sorted(directory.glob("*.safetensors"))
    nbytes = sum(p.stat().st_size for p in files)
    print(f"wrote {nbytes / 1e9:.1f} GB in {write_seconds:.0f} s", file=sys.stderr, flush=True)
    try:
        disk_bps = disk_bandwidth(files)
        tokens = np.random.default_rng(1).integers(0, config.vocab_size, (batch, length))
        tokens_file = scratch / "moe-tokens.npy"
        np.save(tokens_file, tokens)
        runs = {}
        for role in ("oracle", "numpy-float32"):
            drop_from_page_cache(files)
            runs[role] = measure(role, directory, n_layers, tokens_file, scratch / f"moe-{role}.npy")
            print(f"{role}: {runs[role]}", file=sys.stderr, flush=True)
        oracle, found = np.load(scratch / "moe-oracle.npy"), np.load(scratch / "moe-numpy-float32.npy")
        diff = float(np.abs(found.astype(np.float64) - oracle).max())
        runs["numpy-float32"] |= {
            "max_diff": diff,
            "bound_ratio": diff / tolerance.bound(oracle, rope_positions=length - 1),
            "top1": float(np.mean(found.argmax(-1) == oracle.argmax(-1))),
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    parameters = sum(int(np.prod(shape)) for shape in weight_shapes(config).values())
    return {"layers": n_layers, "parameters": parameters, "bytes": nbytes, "write_seconds": write_seconds,
            "disk_bps": disk_bps, "batch": batch, "length": length, "runs": runs}  # fmt: skip


def _row(name: str, run: dict, r: dict, disk: float) -> str:
    compared = "- | - | -"
    if "max_diff" in run:
        compared = f"{run['max_diff']:.3g} | {run['bound_ratio']:.3g} | {run['top1']:.1%}"
    return (
        f"| {name} | {r['parameters']:,} | {run['seconds']:.1f} s ({run['cpu_seconds']:.1f} s) "
        f"| {run['seconds'] / disk:.2f} | {run['peak_rss_kib'] / 2**20:.2f} GiB "
        f"| {run['experts_read']} of {8 * r['layers']} | {compared} | {run['load_average']:.1f} |"
    )


def render(r: dict, command: str) -> str:
    disk = r["bytes"] / r["disk_bps"]
    expert_gib = 3 * 4096 * 14336 * 8 / 2**30
    larger = ", more than the machine's memory" if r["bytes"] > memory_gib() * 2**30 else ""
    return "\n".join([
        SECTION,
        "",
        f"Machine: {describe()}.  ",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}). Mixtral-8x7B's shape with {r['layers']} of its 32 "
        f"layers (all 32 in float32 are 187 GB, more than the disk holds), seeded weights (scale {SCALE}, "
        f"routers at their own scale), float32 safetensors in {SHARD_BYTES // 2**30} GiB shards written shard by "
        f"shard in {r['write_seconds']:.0f} s and removed after: {r['bytes'] / 1e9:.1f} GB{larger}. Read from disk "
        f"once: {disk:.1f} s ({r['disk_bps'] / 1e9:.2f} GB/s, the files dropped "
        f"from the page cache first, as before each run). Tokens: {r['batch']} x {r['length']}. Each run in a "
        "process of its own, one BLAS thread; the machine is shared (1-minute load average given).",
        "",
        "| implementation | parameters | forward (CPU) | / disk read bound | peak RSS | experts read | max \\|diff\\| "
        "| / float32 floor | top-1 agreement | load average |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        _row("oracle (float64, streamed)", r["runs"]["oracle"], r, disk),
        _row("reference, float32, streamed", r["runs"]["numpy-float32"], r, disk),
        "",
        f"One expert (gate, up, down) is {expert_gib:.2f} GiB in float64: the oracle's peak is about that plus "
        "the float32 copy read from the file and the activations, not a layer's eight experts "
        f"({8 * expert_gib:.1f} GiB) nor the checkpoint.",
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch", type=Path, help="where the checkpoint is written (outside the repository)")
    parser.add_argument("--layers", type=int, default=5, help="layers of the 32 (default 5: 30 GB in float32)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tokens", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        print(json.dumps(run_role(args.role, args.checkpoint, args.layers, np.load(args.tokens), args.out)))
        return
    if args.scratch is None:
        parser.error("--scratch is required")
    args.scratch.mkdir(parents=True, exist_ok=True)
    result = bench(args.scratch, args.layers, args.batch, args.length)
    command = f"python benchmarks/moe_scale.py --scratch DIR --layers {args.layers}" + (" --write" * args.write)
    text = render(result, command)
    print(text)
    if args.write:
        write_section(text)


if __name__ == "__main__":
    main()
