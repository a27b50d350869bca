"""How long the test runs take: the README's default run and the slow set, measured, never asserted,
and where the time goes, from each run's JUnit XML: pytest's seconds of every test (setup, call and
teardown) summed per tier (the default run, the slow tier), per test file, per property (a property's
tests over every model), and per family, engine and precision class its test id names (`names`).

    python benchmarks/test_times.py            # time the runs and print a Markdown section
    python benchmarks/test_times.py --write    # ... and put it into benchmarks/RESULTS.md
    python benchmarks/test_times.py --junit .ci/out/slow.xml   # where a finished run's time went
    python benchmarks/test_times.py --junit default=d.xml --junit slow=s.xml   # ... over both tiers
    python benchmarks/test_times.py --runs default --before REV  # the README's run, and at git revision REV
    python benchmarks/test_times.py --runs default slow --before REV  # CI's two tiers, before and after
    python benchmarks/test_times.py --runs default --processes     # ... and the CPU of each process it started

`.ci/run` writes its slow tier's JUnit XML there and prints that breakdown at the end of every CI log.
A `--junit` file is one tier of a run, labelled `TIER=XML` or, without a label, by its file's name
(`slow` for `slow.xml`). `--before REV` runs each chosen run at REV (a git worktree, with this
checkout's `../shared` trees named as `.ci/run` has them), then here, and breaks each revision's runs
down apart.

The thorough profile's time is measured by `benchmarks/thorough_profile.py` (its own section).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
from benchmarks._machine import describe, worktree  # noqa: E402
from benchmarks.results_file import write_section  # noqa: E402
from verifier.analysis.audit.articles import SEEDS_ENV  # noqa: E402
from verifier.analysis.precision import CLASSES  # noqa: E402
from verifier.model.config import FAMILIES  # noqa: E402
from verifier.model.presets import PRESETS  # noqa: E402
from verifier.plugin.adapters.llamacpp import QUANTIZER_TYPES  # noqa: E402
from verifier.plugin.llama2c.checkout import SOURCE_ENV  # noqa: E402
from verifier.plugin.probes import PROBE_KINDS  # noqa: E402

# (key for --runs, what the run is, its arguments)
RUNS = (
    (
        "default",
        "default run (the README's test command)",
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto"],
    ),
    ("one-process", "default run in one process", ["-m", "pytest", "-q", "-p", "no:cacheprovider"]),
    (
        "slow",
        "slow tests (`.ci/run`'s second step)",
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow", "-n", "2"],
    ),
)
# The trees beside this checkout that `.ci/run`'s tests use (the root conftest and tests/conftest.py name
# them when they exist): named for a `--before` worktree too, which has no ../shared beside it.
SHARED: dict[str, Path] = {
    SOURCE_ENV: ROOT.parent / "shared" / "llama2c-src",
    SEEDS_ENV: ROOT.parent / "shared" / "seeds",
}

LISTED = 12  # the largest files and properties shown per run
OTHER = "other"  # the row of the tests whose id names no family (engine, class)

# What a test id names, by kind: each word an id may contain and the family, engine or precision class
# it stands for. Families from their records: each family, each probe config kind (`llama-gqa`), each
# preset (`llama2c-stories15M`).
FAMILY_WORDS: dict[str, str] = {
    **{family: family for family in FAMILIES},
    **{kind: family for kind, (family, _, _) in PROBE_KINDS.items()},
    **{name: config.family for name, config in PRESETS.items()},
}
# The engines, by adapter module (verifier/plugin/adapters/): the name reports give it (its registered
# model's) first, then the other words that name it. The reference's module name is not one of them: it
# is also the oracle, so tests/test_reference*.py are everything's, not the `numpy` engine's.
ENGINES = {
    "reference": ("numpy",),
    "hf_transformers": ("transformers", "hf_trace"),
    "llama2c": ("llama2c", "runq"),
    "llamacpp": ("llamacpp",),
    "onnxruntime": ("onnxruntime",),
    "ctranslate2": ("ctranslate2",),
    "litgpt": ("litgpt",),
    "transformer_lens": ("transformer-lens", "transformer_lens"),
}
ENGINE_WORDS = {word: words[0] for words in ENGINES.values() for word in words}
# The precision classes declarable by name, llama.cpp's quantizer's file types (`q4_k_m`, the class of
# the file's own weights), and the models of the q8_0 class whose names say so otherwise: llama2.c's
# runq.c and this project's version-2 reader, and CTranslate2's int8 (q8_0 with a row per group).
CLASS_WORDS = {
    **{name: name for name in CLASSES},
    **{kind.lower(): kind.lower() for kind in QUANTIZER_TYPES},
    **{word: "q8_0" for word in ("runq", "v2-reader", "int8")},
}
NAMED = {"family": FAMILY_WORDS, "engine": ENGINE_WORDS, "class": CLASS_WORDS}


def _words(words: dict[str, str]) -> re.Pattern[str]:
    """Any of `words` as a whole word: between characters that are not letters or digits, so `_`, `-`,
    `@`, `.`, `/` and brackets part words (`build_bfloat16`, `numpy@llama`), and the longest first
    (`qwen2_moe` before `qwen2`); any case (`Q8_0`), never inside a CamelCase name (`Float16Accumulation`)."""
    alternatives = "|".join(re.escape(word) for word in sorted(words, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])", re.IGNORECASE)


_NAMED = {kind: (_words(words), {w.lower(): label for w, label in words.items()}) for kind, words in NAMED.items()}


def names(node: str) -> dict[str, tuple[str, ...]]:
    """The families, engines and precision classes (`NAMED`) a test's id names, each kind in order of
    appearance and once: read from its file's path and its parameters, not from the test's name (prose:
    `test_mixtral_is_llama_with_...`).

        names("tests/precision/test_builtins.py::test_each_built_in_conforms[llamacpp-q4_k_m@llama]")
        == {"family": ("llama",), "engine": ("llamacpp",), "class": ("q4_k_m",)}

    A property's tests are parametrized by model only: its Hypothesis draws over the families name none.
    """
    path, _, test = node.partition("::")
    text = f"{path} {test[test.find('[') :] if '[' in test else ''}"
    return {
        kind: tuple(dict.fromkeys(labels[m.group(0).lower()] for m in pattern.finditer(text)))
        for kind, (pattern, labels) in _NAMED.items()
    }


class ProcessSampler:
    """The CPU time (user + system) of every process descended from `root`, read from Linux's /proc
    every `interval` seconds while the run goes: each process's last reading, so a process's last
    `interval` and processes living less than that are missed (`processes` reports them as unattributed)."""

    def __init__(self, root: int, interval: float = 0.1) -> None:
        self.root, self.interval = root, interval
        self.seen: dict[int, tuple[int, str, float]] = {}  # pid: (parent pid, command line, CPU seconds)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        while not self._done.wait(self.interval):
            stats = {}
            for entry in Path("/proc").iterdir():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    fields = (entry / "stat").read_text().rpartition(")")[2].split()
                    stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
            children: dict[int, list[int]] = {}
            for pid, (parent, _) in stats.items():
                children.setdefault(parent, []).append(pid)
            family, todo = set(), [self.root]
            while todo:
                family.update(found := children.get(todo.pop(), []))
                todo += found
            for pid in family:
                if pid not in self.seen or self.seen[pid][0] != stats[pid][0]:
                    with contextlib.suppress(OSError):
                        argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
                        self.seen[pid] = (stats[pid][0], shlex.join(a.decode(errors="replace") for a in argv if a), 0.0)
                if pid in self.seen:
                    self.seen[pid] = (*self.seen[pid][:2], stats[pid][1])

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def process_kind(command: str, parent: int, root: int) -> str:
    """What a process was, for grouping: an xdist worker, `verifier <subcommand>`, pytest under `verifier
    check`, another pytest, a Python module or script by name, or a program by name."""
    argv = shlex.split(command)
    if not argv:
        return "(exited before it was read)"
    if "python" not in Path(argv[0]).name:
        name = Path(argv[0]).name
        return f"verifier {argv[1]}" if name == "verifier" and len(argv) > 1 else name
    rest = argv[1:]
    while rest and rest[0].startswith("-") and rest[0] not in ("-c", "-m"):  # the interpreter's own options
        rest = rest[2:] if rest[0] in ("-W", "-X") else rest[1:]
    if rest[:1] == ["-c"]:
        return "an xdist worker" if parent == root else "python -c"
    if rest[:1] == ["-m"] and len(rest) > 1:
        module, rest = rest[1], rest[2:]
    else:
        module, rest = (Path(rest[0]).name if rest else "python"), rest[1:]
    if module == "verifier" and rest:
        return f"verifier {rest[0]}"
    if module == "pytest":
        return "pytest under verifier check" if "verifier.report.collect" in rest else "pytest (other)"
    return module


def processes(sampler: ProcessSampler, cpu: float) -> list[str]:
    """Markdown: the run's CPU time by kind of process, against the CPU of the whole run (`cpu`)."""
    kinds: dict[str, list[float]] = {}
    for parent, command, seconds in sampler.seen.values():
        kinds.setdefault(process_kind(command, parent, sampler.root), []).append(seconds)
    sampled = sum(sum(v) for v in kinds.values())
    lines = [
        "",
        f"Where the run's CPU goes, by process: {cpu:.0f} s of user and system time in all, {len(sampler.seen)} "
        f"processes seen (sampled from /proc every {sampler.interval} s; {max(cpu - sampled, 0):.0f} s unattributed: "
        "pytest's own process, and processes shorter than a sample).",
        "",
        "| process | runs | CPU seconds | share |",
        "|---|---:|---:|---:|",
    ]
    for kind, times in sorted(kinds.items(), key=lambda item: -sum(item[1]))[:LISTED]:
        lines.append(f"| {kind} | {len(times)} | {sum(times):.1f} | {sum(times) / cpu:.0%} |")
    return lines


def timed_run(
    args: list[str], tree: Path = ROOT, *, junit: Path | None = None, sample: bool = False
) -> tuple[float, str, str, list[str]]:
    """Wall time of `python <args>` from the root of `tree` (this checkout, or a worktree of another
    revision, imported ahead of this one; either with `SHARED`'s trees named), writing its JUnit XML to
    `junit`; pytest's summary line, its output and, with `sample`, where its CPU time went by process
    (`processes`)."""
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [sys.executable, *args, *([f"--junitxml={junit}"] if junit else [])]
    shared = {name: str(path) for name, path in SHARED.items() if path.is_dir()}
    env = {**shared, **os.environ, "PYTHONPATH": str(tree)}
    with subprocess.Popen(command, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as run:
        sampler = ProcessSampler(run.pid) if sample else None
        stdout, _ = run.communicate()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    by_process = []
    if sampler is not None:
        sampler.stop()
        by_process = processes(sampler, cpu)
    summary = stdout.strip().splitlines()[-1] if stdout.strip() else f"exit {run.returncode}"
    return wall, re.sub(r"=+", "", summary).strip(), stdout, by_process


@dataclass(frozen=True)
class Tier:
    """One tier of a run (the default run, the slow tier), from its JUnit XML: its wall time (its test
    suites' time: pytest's session, collection included) and each test's node id and seconds (setup,
    call and teardown: pytest's default `junit_duration_report`)."""

    label: str
    wall: float
    cases: tuple[tuple[str, float], ...]

    @property
    def seconds(self) -> float:
        """The tests' seconds summed: with xdist workers, more than the wall time."""
        return sum(seconds for _, seconds in self.cases)


def read_junit(xml: str, label: str) -> Tier:
    """The tier `label` from pytest's JUnit XML (`--junitxml`). A case's classname is its module's
    dotted path (`tests.meta.test_mutants`), so its node id is `tests/meta/test_mutants.py::NAME`."""
    root = ET.fromstring(xml)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    cases = tuple(
        (f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name', '')}", float(case.get("time") or 0))
        for case in root.iter("testcase")
    )
    return Tier(label, sum(float(suite.get("time") or 0) for suite in suites), cases)


Rows = Callable[[str], Sequence[str] | None]


def totals(tiers: Sequence[Tier], rows: Rows) -> dict[str, dict[str, float]]:
    """Seconds per row and tier: each test's seconds go to the rows `rows` gives its node id, split evenly
    over them; to `OTHER` when it gives none, nowhere when it gives None."""
    table: dict[str, dict[str, float]] = {}
    for tier in tiers:
        for node, seconds in tier.cases:
            found = rows(node)
            if found is None:
                continue
            for row in found or (OTHER,):
                by_tier = table.setdefault(row, dict.fromkeys((t.label for t in tiers), 0.0))
                by_tier[tier.label] += seconds / max(len(found), 1)
    return table


def by_file(node: str) -> tuple[str, ...]:
    return (node.partition("::")[0],)


def by_property(node: str) -> tuple[str, ...] | None:
    """A test of properties/, over all its parameters (models); other tests are not properties."""
    path, _, test = node.partition("::")
    return (test.split("[")[0],) if path.startswith("properties/") else None


def junit_times(xml: str) -> tuple[dict[str, float], dict[str, float]]:
    """A finished run's seconds per test file and per property, from its JUnit XML."""
    tier = read_junit(xml, "run")
    files, properties = totals([tier], by_file), totals([tier], by_property)
    return {k: v["run"] for k, v in files.items()}, {k: v["run"] for k, v in properties.items()}


def breakdown(title: str, tiers: Sequence[Tier]) -> list[str]:
    """Markdown: where the time of `tiers` (of one run, one revision) goes: each tier's tests, seconds and
    wall time, then the largest test files and properties, then every family, engine and precision class.
    A row's `wall s` is its share of each tier's wall time (the wall time split over the tests by their
    seconds, so collection and workers' idle time count in proportion); `share`, of all the tiers'."""
    labels = [tier.label for tier in tiers]
    if len(set(labels)) != len(labels):
        raise ValueError(f"tiers {labels}: each needs its own label (`--junit TIER=XML`)")
    wall = sum(tier.wall for tier in tiers)
    seconds = sum(tier.seconds for tier in tiers)
    lines = [
        "",
        f"Where the time of {title} goes: {seconds:,.0f} s of tests' setup, call and teardown (summed over "
        f"the xdist workers) in {wall / 60:.1f} min of wall time.",
        "",
        "| tier | tests | seconds | wall time | workers busy |",
        "|---|---:|---:|---:|---:|",
    ]
    rows = [(t.label, len(t.cases), t.seconds, t.wall) for t in tiers]
    if len(tiers) > 1:
        rows.append(("all", sum(len(t.cases) for t in tiers), seconds, wall))
    for label, n, sec, w in rows:
        lines.append(f"| {label} | {n:,} | {sec:,.1f} | {w / 60:.1f} min | {sec / w if w else 0:.2f} |")
    lines += _table("test file", totals(tiers, by_file), tiers, LISTED)
    if properties := totals(tiers, by_property):
        lines += _table("property", properties, tiers, LISTED)
    for kind in NAMED:
        lines += _table(kind, totals(tiers, _named(kind)), tiers)
    return lines


def _named(kind: str) -> Rows:
    """The rows of a kind of `names`: the families (engines, classes) a test's id names."""
    return lambda node: names(node)[kind]


def _table(
    title: str, table: dict[str, dict[str, float]], tiers: Sequence[Tier], limit: int | None = None
) -> list[str]:
    """Markdown: the rows of `table` by wall seconds (`OTHER` last), the largest `limit` of them."""
    scale = {tier.label: tier.wall / tier.seconds if tier.seconds else 0.0 for tier in tiers}
    wall = {row: sum(sec * scale[label] for label, sec in by_tier.items()) for row, by_tier in table.items()}
    whole = sum(tier.wall for tier in tiers) or 1.0
    order = sorted(table, key=lambda row: (row == OTHER, -wall[row]))[:limit]
    lines = [
        "",
        f"| {title} | {' | '.join(f'{tier.label} s' for tier in tiers)} | wall s | share |",
        f"|---|{'---:|' * len(tiers)}---:|---:|",
    ]
    for row in order:
        cells = " | ".join(f"{table[row][tier.label]:.1f}" for tier in tiers)
        lines.append(f"| {row} | {cells} | {wall[row]:.1f} | {wall[row] / whole:.0%} |")
    return lines


def junit_tier(text: str) -> tuple[str, Path]:
    """A `--junit` value: `TIER=XML`, or `XML` labelled by its file's name (`slow` for `.ci/out/slow.xml`)."""
    label, sep, path = text.partition("=")
    if sep and label and "/" not in label:
        return label, Path(path)
    return Path(text).stem, Path(text)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    keys = [key for key, _, _ in RUNS]
    parser.add_argument("--runs", nargs="+", choices=keys, default=keys, help="the runs timed (default: all)")
    parser.add_argument("--default-only", action="store_true", help="the default runs only: --runs default one-process")
    parser.add_argument(
        "--junit",
        metavar="[TIER=]XML",
        action="append",
        type=junit_tier,
        help="print where a finished run's time went, from its --junitxml; repeat it for each tier",
    )
    parser.add_argument("--before", metavar="REV", help="also time each run at git revision REV, before this checkout")
    parser.add_argument(
        "--processes", action="store_true", help="also sum each run's CPU time by the processes it started (Linux)"
    )
    args = parser.parse_args(argv)
    if args.junit:
        if args.before or args.write:
            parser.error("--junit reads finished runs: time runs at a revision with --runs and --before instead")
        try:
            finished = [read_junit(path.read_text(), label) for label, path in args.junit]
        except (OSError, ET.ParseError) as e:  # a run that stopped before pytest wrote it
            parser.error(f"--junit: {e}")
        if len({tier.label for tier in finished}) < len(finished):
            parser.error(f"--junit {' '.join(label for label, _ in args.junit)}: label each tier once (TIER=XML)")
        print("\n".join(breakdown(f"the run of {', '.join(str(path) for _, path in args.junit)}", finished)))
        return
    chosen = ["default", "one-process"] if args.default_only else args.runs
    runs = {key: (name, run_args) for key, name, run_args in RUNS if key in chosen}
    lines = [
        "## Test run times",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `python benchmarks/test_times.py {' '.join(sys.argv[1:] if argv is None else argv)}` "
        f"({time.strftime('%Y-%m-%d')}); run cache warm (llama2.c's run.c already built).",
        "",
        "| run | command | wall time | pytest's summary |",
        "|---|---|---:|---|",
    ]
    by_process: list[list[str]] = []
    tiers: dict[str, list[Tier]] = {}
    with contextlib.ExitStack() as stack:
        out = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        trees = {"": ROOT}
        if args.before:
            trees = {f"{args.before}: ": stack.enter_context(worktree(args.before, installed=True)), **trees}
        for key, (name, run_args) in runs.items():
            for code, tree in trees.items():  # the revision before this checkout, run by run
                junit = out / f"{len(by_process)}.xml"
                wall, summary, _, sampled = timed_run(run_args, tree, junit=junit, sample=args.processes)
                lines.append(f"| {code}{name} | `python {' '.join(run_args)}` | {wall / 60:.1f} min | {summary} |")
                print(lines[-1], file=sys.stderr, flush=True)
                by_process.append(sampled)
                if junit.exists():  # none when pytest stopped before its session ended
                    tiers.setdefault(code, []).append(read_junit(junit.read_text(), key))
    for code, code_tiers in tiers.items():
        lines += breakdown(f"the runs at {code.rstrip(': ')}" if code else "this checkout's runs", code_tiers)
    for sampled in by_process:
        lines += sampled
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
