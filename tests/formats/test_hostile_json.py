"""Hostile JSON in every file a reader parses (issue 25): a shard index, a tokenizer's vocabulary and a
safetensors header, nested deep or built of millions of empty containers, each refused in one
CheckpointError line (TokenizerError for a tokenizer), never a RecursionError or minutes of parsing."""

from __future__ import annotations

import ast
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import verifier.formats
from verifier.cli import main
from verifier.formats import CheckpointError, load_checkpoint, map_checkpoint
from verifier.formats.hf_dir import SAFETENSORS_INDEX, write_hf_dir
from verifier.formats.safetensors_file import read_safetensors
from verifier.formats.tokenizer import TokenizerError, load_gpt2_tokenizer
from verifier.model.presets import preset
from verifier.model.weights import init_weights

LLAMA = preset("llama2c-stories260K").replace(n_layers=2, vocab_size=90, n_ctx=32)
DEEP = ["[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000]


@pytest.mark.parametrize("text", DEEP, ids=["lists", "objects"])
@pytest.mark.parametrize("read", [load_checkpoint, map_checkpoint])
def test_a_shard_index_nested_100000_deep_is_a_checkpoint_error(tmp_path: Path, text: str, read: object) -> None:
    write_hf_dir(tmp_path, LLAMA, init_weights(LLAMA), max_shard_bytes=20_000)
    (tmp_path / SAFETENSORS_INDEX).write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"model\.safetensors\.index\.json: shard index: JSON nested too deeply"):
        read(tmp_path)  # type: ignore[operator]


def test_inspect_refuses_a_deep_shard_index_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_hf_dir(tmp_path, LLAMA, init_weights(LLAMA), max_shard_bytes=20_000)
    (tmp_path / SAFETENSORS_INDEX).write_text(DEEP[0], encoding="utf-8")
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "JSON nested too deeply" in err, err[-2000:]


def test_check_refuses_a_deep_shard_index_before_the_suite_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As docs/how-to/inspect.md says: pytest's one-line usage error naming the checkpoint, then check's line;
    exit status 2 (it was a RecursionError: an INTERNALERROR of some 50 lines)."""
    model = tmp_path / "model"
    write_hf_dir(model, LLAMA, init_weights(LLAMA), max_shard_bytes=20_000)
    (model / SAFETENSORS_INDEX).write_text(DEEP[0], encoding="utf-8")
    reports = tmp_path / "reports"
    assert main(["check", "--model", "numpy", "--checkpoint", str(model), "--reports", str(reports)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"ERROR: --checkpoint {model}: {model / SAFETENSORS_INDEX}: shard index: JSON nested too deeply",
        f"verifier check: error: pytest stopped before the suite ran (a usage error); see {reports / 'pytest.log'}",
    ], err


def test_a_vocabulary_nested_100000_deep_is_a_tokenizer_error(tmp_path: Path) -> None:
    (tmp_path / "vocab.json").write_text(DEEP[1], encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"vocab\.json: vocabulary: JSON nested too deeply"):
        load_gpt2_tokenizer(tmp_path)


def test_every_json_parse_of_the_readers_goes_through_the_guarded_helper() -> None:
    """A `json.loads` / `json.load` elsewhere in verifier/formats would escape the RecursionError guard."""
    calls = []
    for source in Path(verifier.formats.__file__).parent.glob("*.py"):
        if source.name == "jsonio.py":
            continue
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("loads", "load") and ast.unparse(node.value) == "json":
                calls.append(f"{source.name}:{node.lineno}")
    assert calls == []


# ---------------------------------------------------------------------------------------------
# safetensors headers of tiny values: json.loads makes a 50 to 60-byte object of each 2 or 3 bytes


def safetensors_file(path: Path, header: bytes) -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


FLOODS = {
    "empty objects in a list": b'{"w": [' + b"{}," * 300_000 + b"{}]}",
    "entries that are empty objects": b"{" + b",".join(b'"%d": {}' % i for i in range(300_000)) + b"}",
    "short strings": b'{"w": [' + b'"ab",' * 300_000 + b'"ab"]}',
    "a shape of short strings": b'{"w": {"dtype": "F32", "shape": [' + b'"ab",' * 300_000 + b'"ab"]}}',
    "objects and lists": b'{"w": [' + b"{},[],[]," * 100_000 + b"{}]}",
    "objects nested 100,000 deep": b'{"w": ' + b'{"a": ' * 100_000 + b"{}" + b"}" * 100_001,
}


@pytest.mark.parametrize("header", list(FLOODS.values()), ids=list(FLOODS))
def test_a_header_of_tiny_values_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, header: bytes
) -> None:
    path = safetensors_file(tmp_path / "m.safetensors", header)

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the header was parsed")

    monkeypatch.setattr(json, "loads", no_parse)
    with pytest.raises(CheckpointError, match="not of the form of a safetensors header") as caught:
        read_safetensors(path)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 800


# The child's own peak (VmHWM: a new address space from exec; ru_maxrss would count pytest's, forked).
PEAK_RSS = """
import sys
from pathlib import Path
from verifier.formats import CheckpointError
from verifier.formats.safetensors_file import read_safetensors
try:
    read_safetensors(Path(sys.argv[1]))
except CheckpointError as e:
    print(e)
status = Path("/proc/self/status").read_text()
print(int(status.split("VmHWM:")[1].split()[0]) // 1024)  # MiB
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak from Linux's /proc")
def test_a_99_mb_header_of_empty_objects_is_refused_in_little_memory(tmp_path: Path) -> None:
    """The issue's size: parsed, 99 MB of `{},` took 2.5 GB; refused unparsed, the reader holds the
    header's bytes and little more."""
    header = b'{"w": [' + b"{}," * 33_000_000 + b"{}]}"
    path = safetensors_file(tmp_path / "m.safetensors", header)
    del header
    result = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, str(path)], capture_output=True, text=True, timeout=300, check=True
    )
    message, peak_mib = result.stdout.splitlines()
    assert int(peak_mib) < 400, f"peak resident set {peak_mib} MiB"
    assert "not of the form of a safetensors header" in message and len(message) < 800
