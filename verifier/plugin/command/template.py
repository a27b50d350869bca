"""A command template: the user's command line with `{placeholders}` the suite fills in for each run.

The template is split like a shell would (`shlex`), then each argument is filled in on its own, so a
path with spaces stays one argument and nothing is ever passed through a shell. `{{` and `}}` are
literal braces.
"""

from __future__ import annotations

import shlex
import string
from dataclasses import dataclass

PLACEHOLDERS: dict[str, str] = {
    "model": "the model file (or directory) the suite wrote, in the program's format",
    "tokenizer": "the tokenizer.bin the suite wrote beside a llama2.c model",
    "tokens": "a text file holding the input token ids, separated by spaces",
    "ids": "the input token ids inline, separated by commas",
    "n_tokens": "how many input tokens there are",
    "prompt": "the prompt as text for the program's tokenizer (greedy-text only)",
    "n_new": "how many tokens to generate",
    "steps": "positions to run, input tokens + n_new - 1 (llama2.c's -n)",
    "out": "the .npy file the program writes its logits to",
    "dir": "the run's working directory (also the program's current directory)",
}


class CommandTemplateError(ValueError):
    """A command template that cannot be used; the message says what is wrong with it."""


@dataclass(frozen=True)
class CommandTemplate:
    """A parsed command template: its arguments and the placeholders they use."""

    text: str
    arguments: tuple[str, ...]
    placeholders: frozenset[str]

    @classmethod
    def parse(cls, text: str) -> CommandTemplate:
        """Split and check `text`; CommandTemplateError names an unknown or malformed placeholder."""
        try:
            arguments = tuple(shlex.split(text))
        except ValueError as e:
            raise CommandTemplateError(f"command {text!r} cannot be split into arguments: {e}") from None
        if not arguments:
            raise CommandTemplateError("the command is empty")
        used: set[str] = set()
        for argument in arguments:
            try:
                fields = [name for _, name, _, _ in string.Formatter().parse(argument) if name is not None]
            except ValueError as e:
                problem = f"command {text!r}: argument {argument!r}: {e} (write {{{{ for a literal brace)"
                raise CommandTemplateError(problem) from None
            for name in fields:
                if name not in PLACEHOLDERS:
                    known = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
                    raise CommandTemplateError(f"command {text!r}: unknown placeholder {{{name}}}; known: {known}")
            used.update(fields)
        return cls(text, arguments, frozenset(used))

    def require(self, names: set[str], why: str) -> None:
        """Raise CommandTemplateError unless the template uses at least one of `names`."""
        if not names & self.placeholders:
            listed = " or ".join(f"{{{n}}}" for n in sorted(names))
            raise CommandTemplateError(f"command {self.text!r} uses no {listed}, which {why}")

    def render(self, values: dict[str, str]) -> list[str]:
        """The argument list with every placeholder filled in from `values`."""
        return [argument.format_map(values) for argument in self.arguments]
