"""A program plugged in through the command line declares its precision class: by
`--command-precision` (`verifier check --precision`), or by the file it reads (a version-2 llama2.c
file holds Q8_0 weights); an unknown class is a usage error naming the classes."""

from __future__ import annotations

import pytest

from verifier.analysis.precision import Q8_0, resolve
from verifier.plugin.command import Command, CommandTemplateError
from verifier.plugin.command.files import stored_precision, version2_precision
from verifier.plugin.contract import CheckedModel
from verifier.properties.pinned_cases import RICH_LLAMA

TEMPLATE = "prog {model} {tokens}"


def _class(command: Command) -> str:
    case = RICH_LLAMA
    model = command.build(case.config, case.weights())
    return CheckedModel(model, command.name, case.config).precision.label


def test_a_program_declares_its_class_or_gets_its_file_s() -> None:
    assert _class(Command.parse(TEMPLATE, "llama2c-v1", "logits-text")) == "float32"
    assert _class(Command.parse(TEMPLATE, "llama2c-v1", "logits-text", precision="bfloat16")) == "bfloat16"
    v2 = _class(Command.parse(TEMPLATE, "llama2c-v2", "logits-text"))
    assert v2 == version2_precision(RICH_LLAMA.config).label == "q8_0 (groups of 8, float32 scales)"
    assert resolve("q8_0").label == _class(Command.parse(TEMPLATE, "llama2c-v2", "logits-text", precision="q8_0"))
    assert (
        stored_precision("gguf-q8_0", RICH_LLAMA.config) is Q8_0 and stored_precision("gguf", RICH_LLAMA.config) is None
    )


def test_an_unknown_class_is_a_usage_error() -> None:
    with pytest.raises(CommandTemplateError, match="precision 'int4' is not a precision class; known: float32"):
        Command.parse(TEMPLATE, "hf", "logits-text", precision="int4")
