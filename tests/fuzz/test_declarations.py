"""Declarations files fuzzed: a valid `<program>.verifier.toml`, mutated (a value of another type, a huge or
deep one, a key added, bytes changed), read and parsed as `verifier check --command` reads it. It must be
declarations the suite can use, or one `DeclarationError` in a bounded message; never another exception.

The default run tries a few files; `--hypothesis-profile thorough` the profile's max_examples.
"""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from tests.fuzz.mutations import byte_mutations
from verifier.plugin.command import declarations
from verifier.plugin.command.declarations import DeclarationError

EXAMPLES = settings().max_examples if settings.get_current_profile_name() == "thorough" else 40
VALID = b"""families = ["gpt2", "llama"]
switches = ["rope_scaling"]
d_ff = "llama2c:256"
tie_embeddings = true
norm_eps = 1e-5
rope_theta = 10000.0
grouped_query = false
max_n_ctx = 1024
precision = "float32"
"""
MESSAGE = 2000  # characters: a line naming the file, the key and the problem, with a value cut short
# Values of every TOML type, and the hostile ones: huge, deep, long, duplicated.
VALUES = [
    "1", "-1", "0", "1.5", "nan", "inf", "-0.0", "true", '"gpt2"', '""', "[]", '["gpt2", "gpt2"]', "[1, 2]",
    "{}", '{a = 1}', "1979-05-27T07:32:00Z", "9" * 5000, '"' + "x" * 100_000 + '"', "[" * 5000 + "]" * 5000,
    '"\\u0000"', '"gpt2\\n"', "[" + ", ".join(['"llama"'] * 5000) + "]", "0x7fffffffffffffff", "1e400",
]  # fmt: skip


@st.composite
def toml_mutations(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    """A declaration's value replaced, a key added or repeated, or a byte-level mutation."""
    lines = data.decode().splitlines()
    kind = draw(st.sampled_from(["value", "key", "repeat", "bytes"]))
    if kind == "bytes":
        return draw(byte_mutations(data))
    i = draw(st.integers(0, len(lines) - 1))
    key = lines[i].split(" = ")[0]
    if kind == "value":
        value = draw(st.sampled_from(VALUES))
        lines[i] = f"{key} = {value}"
        return f"{key} = {value[:20]!r}", "\n".join(lines).encode()
    if kind == "repeat":
        lines.append(lines[i])
        return f"{key} twice", "\n".join(lines).encode()
    new = draw(st.sampled_from(["model", "Families", "families.x", '"families"', "[table]"]))
    lines.insert(i, new if new.startswith("[") else f"{new} = 1")
    return f"key {new!r}", "\n".join(lines).encode()


def test_the_valid_file_reads() -> None:
    found = declarations.parse(tomllib.loads(VALID.decode()), {})
    assert found.constraints is not None and found.constraints.families == ("gpt2", "llama")


@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_a_mutated_declarations_file_is_declarations_or_one_error(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    label, content = data.draw(toml_mutations(VALID), label="mutation")
    note(f"{label}: {len(content):,} bytes")
    path = tmp_path_factory.mktemp("declarations") / f"program{declarations.FILE_SUFFIX}"
    path.write_bytes(content)
    try:
        values = declarations.read_file(path)
        declarations.parse(values, {key: f"{key} in {path}" for key in values})
    except DeclarationError as e:
        message = str(e)
        assert len(message) < MESSAGE and "\n" not in message, f"{len(message):,} characters: {message[:300]}"
