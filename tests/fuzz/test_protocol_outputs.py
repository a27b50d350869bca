"""The command protocol's outputs fuzzed: what a `--command` program hands back (logits as text, a .npy file,
greedy ids), valid and then mutated, read through the contract exactly as the suite reads it. It must be
the logits of the shape asked for, or one contract violation in a bounded message; never another
exception. (Running programs that flood, hang or escape is tests/command/test_hostile_programs.py.)

The default run tries a few outputs per kind; `--hypothesis-profile thorough` the profile's max_examples.
"""

from __future__ import annotations

import io
import shlex
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from tests.fuzz.mutations import byte_mutations
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.command import Command
from verifier.plugin.command.program import CommandModel
from verifier.plugin.contract import CheckedModel, ContractViolation, build_checked
from verifier.plugin.interface import Unsupported
from verifier.plugin.registry import ModelSpec
from verifier.reference import NumpyModel

EXAMPLES = settings().max_examples if settings.get_current_profile_name() == "thorough" else 40
CONFIG = preset("gpt2").replace(vocab_size=19, n_ctx=16, d_model=8, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=12)
TOKENS = np.array([3, 1, 4, 1, 5])
N_NEW = 3
MESSAGE = 6000  # characters: the command line, the problem, 2,000 of stderr's; never the output itself
TEMPLATES = {
    "logits-text": "{model} {tokens}",
    "last-logits-text": "{model} {tokens}",
    "logits-npy": "{model} {tokens} {out}",
    "last-logits-npy": "{model} {tokens} {out}",
    "greedy-ids": "{model} {tokens} {n_new}",
}
# Numbers as a program might misprint them, and what is not a number.
NUMBERS = ["nan", "inf", "-inf", "1e999", "9" * 5000, "0x10", "1,5", "\uff11", "--1", "1e", "", " ", "\x00"]


def _text(values: np.ndarray) -> bytes:
    return "".join(" ".join(f"{x:.9g}" for x in np.atleast_1d(row)) + "\n" for row in np.atleast_2d(values)).encode()


def _npy(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, values.astype(np.float32))
    return buffer.getvalue()


def _valid(gives: str) -> bytes:
    """What a correct program hands back for TOKENS: on stdout, or in its .npy file."""
    reference = NumpyModel(CONFIG, init_weights(CONFIG, seed=0))
    logits = reference.logits(TOKENS)
    if gives == "greedy-ids":
        ids = list(TOKENS)
        for _ in range(N_NEW):
            ids.append(int(np.argmax(reference.logits(np.array(ids))[-1])))
        return " ".join(map(str, ids[-N_NEW:])).encode() + b"\n"
    values = logits[-1] if gives.startswith("last") else logits
    return _npy(values) if gives.endswith("npy") else _text(values)


@st.composite
def text_mutations(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    """One number misprinted, a row or a number dropped or repeated, or a byte-level mutation."""
    rows = data.decode().splitlines()
    kind = draw(st.sampled_from(["number", "drop row", "repeat row", "drop number", "extra number", "bytes"]))
    if kind == "bytes":
        return draw(byte_mutations(data))
    r = draw(st.integers(0, len(rows) - 1))
    words = rows[r].split()
    w = draw(st.integers(0, len(words) - 1))
    if kind == "number":
        words[w] = draw(st.sampled_from(NUMBERS))
    elif kind == "drop number":
        del words[w]
    elif kind == "extra number":
        words.insert(w, words[w])
    elif kind == "drop row":
        del rows[r]
        return kind, "\n".join(rows).encode()
    else:
        rows.insert(r, rows[r])
        return kind, "\n".join(rows).encode()
    rows[r] = " ".join(words)
    return f"{kind} {words[w] if w < len(words) else ''!r:.20}", "\n".join(rows).encode()


@st.composite
def npy_mutations(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    """The header's shape or dtype changed (to a huge, negative, empty or nested shape; another dtype), or a
    byte-level mutation anywhere."""
    header_end = data.index(b"\n") + 1
    header = data[:header_end].decode("latin1")
    kind = draw(st.sampled_from(["shape", "descr", "bytes"]))
    if kind == "bytes":
        return draw(byte_mutations(data))
    if kind == "shape":
        shape = draw(st.sampled_from(["(536870912,)", "(-1, 19)", "()", "(5, 19, 1)", "((5,), 19)", "(0, 19)"]))
        start, end = header.index("'shape': ") + 9, header.index(")", header.index("'shape': ")) + 1
        new = header[:start] + shape + header[end:]
    else:
        descr = draw(st.sampled_from(["<f8", "<f2", "|b1", "<i8", "<U4", "|O", "<c16", "|V8", "<M8[s]"]))
        start = header.index("'descr': '") + 10
        new = header[:start] + descr + header[header.index("'", start) :]
    body = new.rstrip("\n").ljust(len(header) - 1) + "\n"  # the same length, so the data stays aligned
    return f"{kind} {new[start : start + 20]!r}", data[:10] + body[10:].encode("latin1") + data[header_end:]


def _replay(model: CommandModel, tokens: list[int], n_new: int = 0, prompt: str = "") -> tuple[bytes, str]:
    """Stands in for the model's `run`: hands back its `output` as the program's stdout or .npy file."""
    model._stderr = b""
    output: bytes = model.output  # type: ignore[attr-defined]
    if model.command.gives.endswith("npy"):
        model.out_path.write_bytes(output)
        return b"", "`fuzzed`"
    return output, "`fuzzed`"


@pytest.fixture(scope="module")
def models() -> Iterator[dict[str, CheckedModel]]:
    program = f"{shlex.quote(sys.executable)} -c pass"
    found = {}
    for gives, template in TEMPLATES.items():
        command = Command.parse(f"{program} {template}", "hf", gives)
        model = build_checked(ModelSpec(gives, command.build, "fuzz"), CONFIG, init_weights(CONFIG, seed=0))
        model.model.run = types.MethodType(_replay, model.model)
        found[gives] = model
    yield found


def _read(model: CheckedModel, gives: str) -> Any:
    if gives == "greedy-ids":
        return model.greedy(TOKENS, N_NEW)
    return model.last_logits(TOKENS) if gives.startswith("last") else model.logits(TOKENS)


@pytest.mark.parametrize("gives", list(TEMPLATES))
def test_a_valid_output_is_read_back(gives: str, models: dict[str, CheckedModel]) -> None:
    models[gives].model.output = _valid(gives)  # type: ignore[attr-defined]
    found = _read(models[gives], gives)
    expected = (N_NEW,) if gives == "greedy-ids" else (CONFIG.vocab_size,) if gives.startswith("last") else (5, 19)
    assert np.shape(found) == expected


@pytest.mark.parametrize("gives", list(TEMPLATES))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_a_mutated_output_is_the_logits_or_one_violation(
    gives: str, models: dict[str, CheckedModel], data: st.DataObject
) -> None:
    mutations = npy_mutations if gives.endswith("npy") else text_mutations
    label, output = data.draw(mutations(_valid(gives)), label="mutation")
    note(f"{label}: {len(output):,} bytes")
    model = models[gives]
    model.model.output = output  # type: ignore[attr-defined]
    try:
        found = _read(model, gives)
    except ContractViolation as e:
        assert len(str(e)) < MESSAGE, f"{len(str(e)):,} characters"
        return
    except Unsupported:
        pytest.fail("a malformed output is the program's failure, never a declined input")
    expected = (N_NEW,) if gives == "greedy-ids" else (CONFIG.vocab_size,) if gives.startswith("last") else (5, 19)
    assert np.shape(found) == expected
