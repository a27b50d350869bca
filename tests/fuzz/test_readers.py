"""The readers fuzzed (issue 25): valid files of every format, mutated (tests/fuzz/mutations.py), each
run through every reader of the four file-reading commands in a worker process limited in time and
memory (tests/fuzz/runner.py), which must return or refuse in one bounded line, never anything else.

The default run tries a few inputs per format; `--hypothesis-profile thorough` the profile's
max_examples (1,000) per format; `benchmarks/fuzz.py` runs for a given time and records throughput.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from tests.formats.test_hostile_binary import ARRAY, EMBEDDING, LLAMA, STRING, U32, gguf_file, gguf_string
from tests.fuzz.mutations import Deep, FuzzInput, dumps, fuzz_inputs
from tests.fuzz.runner import Runner
from tests.fuzz.seeds import FORMATS, HAVE_GGUF, NO_GGUF, seeds
from verifier.formats.hf_dir import SAFETENSORS_INDEX

# Inputs per format: a few in the default run (an input takes 2 to 30 ms), the profile's 1,000 in `thorough`.
EXAMPLES = settings().max_examples if settings.get_current_profile_name() == "thorough" else 40


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    with Runner() as started:
        yield started


def needs_format(fmt: str) -> None:
    if fmt == "gguf" and not HAVE_GGUF:
        pytest.skip(NO_GGUF)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_every_reader_returns_or_refuses_in_one_line_within_the_limits(
    fmt: str, data: st.DataObject, runner: Runner
) -> None:
    needs_format(fmt)
    case = data.draw(fuzz_inputs(seeds()[fmt]), label="mutated input")
    note(f"target {case.target}; mutations: {'; '.join(case.labels)}")
    result = runner.check(case)
    assert not result.violations, "\n".join(result.violations)


# ---------------------------------------------------------------------------------------------
# The issue's cases, through the same limited worker (their messages are tested in
# tests/formats/test_hostile_*.py; here: refused in one line, within the time and memory limits).


def _seed(fmt: str, index: int = 0) -> FuzzInput:
    seed = seeds()[fmt][index]
    return FuzzInput(seed.format, dict(seed.files), seed.targets[0], ())


def with_json(fmt: str, name: str, change: dict[str, object], target: str = ".", seed: int = 0) -> FuzzInput:
    """Seed `seed` of `fmt`, the JSON file `name` given the fields `change` (None: removed)."""
    case = _seed(fmt, seed)
    value = {k: v for k, v in (json.loads(case.files[name]) | change).items() if v is not None}
    return FuzzInput(fmt, {**case.files, name: dumps(value).encode()}, target, (f"{name}: {change}",))


def with_shard_file(file: str) -> FuzzInput:
    """The sharded seed, its index naming `file` as the shard of its first tensor."""
    case = _seed("safetensors-sharded")
    index = json.loads(case.files[SAFETENSORS_INDEX])
    index["weight_map"][next(iter(index["weight_map"]))] = file
    return FuzzInput(case.format, {**case.files, SAFETENSORS_INDEX: json.dumps(index).encode()}, ".", ())


def with_header(entry: object) -> FuzzInput:
    """A safetensors file whose header holds `entry` for its first tensor, given the directory."""
    case = _seed("safetensors")
    data = case.files["model.safetensors"]
    (length,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + length])
    header[next(k for k in header if k != "__metadata__")] = entry
    raw = dumps(header).encode()
    return FuzzInput("safetensors", {**case.files, "model.safetensors": struct.pack("<Q", len(raw)) + raw}, ".", ())


def header_of_empty_lists() -> FuzzInput:
    """The issue's 99 MB safetensors header of empty lists: it was refused after 12 to 17 s at 2.8 GB, in a
    message of 132 MB (now before it is parsed: ~2 s here, most of it writing the file)."""
    header = b'{"w": [' + b"[]," * 33_000_000 + b"[]]}"
    case = _seed("safetensors")
    return FuzzInput(
        "safetensors", {**case.files, "model.safetensors": struct.pack("<Q", len(header)) + header}, ".", ()
    )


def f32_entry(shape: list[int]) -> dict[str, object]:
    return {"dtype": "F32", "shape": shape, "data_offsets": [0, 4]}


def raw_file(fmt: str, name: str, data: bytes) -> FuzzInput:
    return FuzzInput(fmt, {name: data}, name, ())


def gguf_with_dimension(seed: int, tensor: str, axis: int, size: int) -> FuzzInput:
    """GGUF seed `seed` (0: llama F32, 1: gpt2 Q8_0) with dimension `axis` (fastest first) of `tensor` set to `size`."""
    data = _seed("gguf", seed).files["model.gguf"]
    name = gguf_string(tensor)
    at = data.index(name) + len(name) + 4 + 8 * axis  # after the name: u32 dimension count, u64 dimensions
    return raw_file("gguf", "model.gguf", data[:at] + struct.pack("<Q", size) + data[at + 8 :])


def gguf_architecture_not_utf8() -> FuzzInput:
    """The llama GGUF seed, its general.architecture's first byte made 0xff (not UTF-8)."""
    data = _seed("gguf").files["model.gguf"]
    stored = gguf_string("general.architecture") + struct.pack("<I", STRING) + gguf_string("llama")
    return raw_file("gguf", "model.gguf", data.replace(stored, stored[:-5] + b"\xfflama"))


def gguf(metadata: dict[str, tuple[int, object]], tensors: dict[str, list[int]], tmp: Path) -> FuzzInput:
    return raw_file("gguf", "model.gguf", gguf_file(tmp / "m.gguf", metadata, tensors).read_bytes())


DEEP = Deep(100_000, "object")
LONG = "x" * 100_000
NEEDS_GGUF = pytest.mark.skipif(not HAVE_GGUF, reason=NO_GGUF)
GGUF_2_61 = struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + gguf_string("a") + struct.pack("<IIQ", ARRAY, 0, 2**61)

CASES = {
    "num_hidden_layers 10**19": lambda tmp: with_json("safetensors", "config.json", {"num_hidden_layers": 10**19}),
    "config.json alone, num_hidden_layers 10**19": lambda tmp: with_json(
        "safetensors", "config.json", {"num_hidden_layers": 10**19}, target="config.json"
    ),
    "config.json nested 100,000 deep": lambda tmp: with_json("safetensors", "config.json", {"rope_scaling": DEEP}),
    "safetensors header nested 100,000 deep": lambda tmp: with_header(DEEP),
    "shard index nested 100,000 deep": lambda tmp: with_json(
        "safetensors-sharded", "model.safetensors.index.json", {"weight_map": DEEP}
    ),
    "rope_parameters not an object": lambda tmp: with_json("safetensors", "config.json", {"rope_parameters": [1]}),
    "rope_scaling not an object": lambda tmp: with_json(
        "safetensors", "config.json", {"rope_parameters": None, "rope_scaling": "linear"}
    ),
    "99 MB header of empty lists": lambda tmp: header_of_empty_lists(),
    "dtype a list": lambda tmp: with_header({"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}),
    "rms_norm_eps Infinity": lambda tmp: with_json("safetensors", "config.json", {"rms_norm_eps": float("inf")}),
    "rms_norm_eps true": lambda tmp: with_json("safetensors", "config.json", {"rms_norm_eps": True}),
    "rope_theta Infinity": lambda tmp: with_json(
        "safetensors", "config.json", {"rope_parameters": None, "rope_theta": float("inf")}
    ),
    "rope_parameters' rope_theta Infinity": lambda tmp: with_json(
        "safetensors", "config.json", {"rope_parameters": {"rope_theta": float("inf"), "rope_type": "default"}}
    ),
    "max_position_embeddings 1e30": lambda tmp: with_json(
        "safetensors", "config.json", {"max_position_embeddings": 1e30}
    ),
    # Found by the fuzzer (the shake-out run of benchmarks/fuzz.py): another exception, or a message of many lines
    # or of 100 KB, echoing the value.
    "shard named by 100,000 characters": lambda tmp: with_shard_file(LONG + ".safetensors"),  # OSError ENAMETOOLONG
    "shard name with a line break": lambda tmp: with_shard_file("model\n.safetensors"),
    "header entry a string with a line break": lambda tmp: with_header("F\n32"),
    "header shape of two 400-digit sizes": lambda tmp: with_header(f32_entry([16, 10**400, 10**400])),
    "header shape of a 4,800-digit size": lambda tmp: with_header(f32_entry([10**300] * 16)),
    "model_type 100,000 characters": lambda tmp: with_json("safetensors", "config.json", {"model_type": LONG}),
    "hidden_act 100,000 characters": lambda tmp: with_json("safetensors", "config.json", {"hidden_act": LONG}),
    "activation_function 100,000 characters": lambda tmp: with_json(
        "safetensors", "config.json", {"activation_function": LONG}, seed=1
    ),
    "rope_type nested 100 deep": lambda tmp: with_json(
        "safetensors", "config.json", {"rope_parameters": {"rope_type": Deep(100, "object")}}
    ),
    "GGUF Q8_0 token embedding dimension 0": lambda tmp: gguf_with_dimension(1, "token_embd.weight", 0, 0),
    "GGUF q rows fewer than the heads": lambda tmp: gguf_with_dimension(0, "blk.0.attn_q.weight", 1, 1),
    "GGUF array of 2**61 items": lambda tmp: raw_file("gguf", "model.gguf", GGUF_2_61),
    "GGUF context length a string": lambda tmp: gguf({**LLAMA, "llama.context_length": (STRING, "16")}, EMBEDDING, tmp),
    "GGUF context length an array": lambda tmp: gguf({**LLAMA, "llama.context_length": (ARRAY, [16])}, EMBEDDING, tmp),
    "GGUF epsilon a string": lambda tmp: gguf(
        {**LLAMA, "llama.attention.layer_norm_rms_epsilon": (STRING, "1e-5")}, EMBEDDING, tmp
    ),
    "GGUF architecture not UTF-8": lambda tmp: gguf_architecture_not_utf8(),  # the hour's run: UnicodeDecodeError
    "GGUF head_count 0": lambda tmp: gguf({**LLAMA, "llama.attention.head_count": (U32, 0)}, EMBEDDING, tmp),
    "GGUF 1-D token embedding": lambda tmp: gguf(LLAMA, {"token_embd.weight": [8]}, tmp),
}


# A config is read without the tensors these break: only the model readers refuse them.
TENSOR_CASES = {"GGUF Q8_0 token embedding dimension 0", "GGUF q rows fewer than the heads"}
MARKS: dict[str, list[pytest.MarkDecorator]] = {name: [NEEDS_GGUF] for name in CASES if "GGUF" in name}


@pytest.mark.parametrize("name", [pytest.param(name, marks=MARKS.get(name, [])) for name in CASES])
def test_the_issue_cases_are_refused_in_one_line_within_the_limits(name: str, runner: Runner, tmp_path: Path) -> None:
    result = runner.check(CASES[name](tmp_path))
    assert not result.violations, "\n".join(result.violations)
    refusing = ["load_checkpoint"] if name in TENSOR_CASES else ["load_checkpoint", "checkpoint_config"]
    assert [result.outcomes[reader] for reader in refusing] == ["refused"] * len(refusing), result.outcomes


# ---------------------------------------------------------------------------------------------
# The runner catches what it is there to catch (stand-in workers).


def _stand_in(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_worker_that_dies_is_a_violation_and_restarted(tmp_path: Path) -> None:
    crash = "import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGSEGV)"
    with Runner(command=_stand_in(crash)) as runner:
        for _ in range(2):
            result = runner.run(tmp_path, 0)
            assert result.violations and "the worker died (signal SIGSEGV)" in result.violations[0]
        assert runner.restarts == 2


def test_a_worker_that_overruns_is_a_violation(tmp_path: Path) -> None:
    hang = "import sys, time; sys.stdin.readline(); time.sleep(60)"
    with Runner(time_limit=0.5, command=_stand_in(hang)) as runner:
        result = runner.run(tmp_path, 0)
    assert result.violations and result.violations[0].startswith("no answer within 0 s")


def test_an_allocation_beyond_the_memory_limit_is_a_violation(tmp_path: Path) -> None:
    # A reader that allocates 1 GiB for an empty file: the limit is 256 MiB plus 8 bytes a byte of input.
    greedy = "from tests.fuzz import worker; worker.READERS = {'greedy': lambda path: bytearray(2**30)}; worker.main()"
    with Runner(command=_stand_in(greedy)) as runner:
        result = runner.run(tmp_path, 0)
    assert result.violations == ["greedy: raised MemoryError: "]


def test_a_long_or_multi_line_message_is_a_violation(tmp_path: Path) -> None:
    # CheckpointError escapes line breaks itself: these stand-ins get past it, as a future change might.
    wordy = (
        "from tests.fuzz import worker; from verifier.formats import CheckpointError\n"
        "def multi_line(path):\n"
        "    error = CheckpointError(path, 'field', 'problem'); error.args = ('line one\\nline two',); raise error\n"
        "def long(path): raise CheckpointError(path, 'field', 'x' * 1000)\n"
        "worker.READERS = {'multi_line': multi_line, 'long': long}; worker.main()"
    )
    with Runner(command=_stand_in(wordy)) as runner:
        result = runner.run(tmp_path, 0)
    assert [v.split(":")[0] for v in result.violations] == ["multi_line", "long"], result.violations
