"""A command template: the user's command line with `{placeholders}` the suite fills in for each run.

The template is split like a shell would (`shlex`), then each argument is filled in on its own, so a
path with spaces stays one argument and nothing is ever passed through a shell. `{{` and `}}` are
literal braces. The first argument is the program: a path with a `/` (`./llama`, `bin/run`) is found
from the directory the user ran from (the run's own working directory is a fresh temporary one), a
bare name (`llama`) on PATH, as a shell finds it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import string
from dataclasses import dataclass
from pathlib import Path

from verifier.messages import BoundedMessage

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


class CommandTemplateError(BoundedMessage, ValueError):
    """A command template that cannot be used; the message says what is wrong with it."""


class ProgramNotFound(CommandTemplateError):
    """The template's program cannot be found or run; the message names the path looked for."""


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

    @property
    def program(self) -> str:
        """The program as the template names it (`./llama`, `llama`, `/opt/bin/run`)."""
        try:
            return self.arguments[0].format_map({})
        except (KeyError, ValueError):
            raise CommandTemplateError(
                f"command {self.text!r}: the program {self.arguments[0]!r} holds a placeholder; name the program itself"
            ) from None

    def program_path(self, directory: Path) -> str:
        """The program to start: a path with a `/` made absolute against `directory`; a bare name as it
        is (the system looks it up on PATH, as `locate` does)."""
        program = self.program
        return str(Path(directory, program)) if "/" in program else program

    def locate(self, directory: Path) -> Path:
        """The program's file, found as `program_path` says; ProgramNotFound if there is none that can run."""
        program = self.program
        if "/" not in program:
            found = shutil.which(program)
            if found is None:
                raise ProgramNotFound(
                    f"program {program!r} not found on PATH; give its path (./{program} for one in this directory)"
                )
            return Path(found)
        path = Path(self.program_path(directory))
        where = "" if Path(program).is_absolute() else f" (a relative path is found from {directory}, where you ran)"
        if not path.exists():
            raise ProgramNotFound(f"program {program!r} not found: there is no {path}{where}")
        if path.is_dir():
            raise ProgramNotFound(f"program {program!r} is a directory: {path}{where}")
        if not os.access(path, os.X_OK):
            raise ProgramNotFound(f"program {program!r} cannot be run: {path} is not executable (chmod +x {path})")
        return path

    def require(self, names: set[str], why: str) -> None:
        """Raise CommandTemplateError unless the template uses at least one of `names`; `why` is the
        sentence saying what for (`the program needs one to get the input token ids`)."""
        if not names & self.placeholders:
            first, *others = (f"{{{n}}}" for n in sorted(names))
            missing = f"neither {first} nor {' nor '.join(others)}" if others else f"no {first}"
            raise CommandTemplateError(f"command {self.text!r} uses {missing}: {why}")

    def render(self, values: dict[str, str]) -> list[str]:
        """The argument list with every placeholder filled in from `values`."""
        return [argument.format_map(values) for argument in self.arguments]
