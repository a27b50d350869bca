"""A --command program from the options of a front end (`verifier check`, the pytest plugin), each
error in the option names the user typed there.

Both front ends give the same settings (`SETTINGS`): the template, its file format and output kind,
the timeout, a declaration file, and each declaration of `declarations.DECLARATIONS`. `PYTEST_OPTIONS`
and `CHECK_OPTIONS` spell them as pytest and `verifier check` take them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from verifier.plugin.command import declarations
from verifier.plugin.command.program import DEFAULT_TIMEOUT_S, Command
from verifier.plugin.command.template import CommandTemplateError

# What each front end's settings hold besides the template: how the program is run, then what it declares.
SETTINGS = ("format", "gives", "timeout", "declarations", *declarations.DECLARATIONS)


def _spelled(prefix: str) -> dict[str, str]:
    return {"command": "--command", **{key: f"--{prefix}{key.replace('_', '-')}" for key in SETTINGS}}


PYTEST_OPTIONS = _spelled("command-")  # --command-format, --command-families, ...
CHECK_OPTIONS = _spelled("")  # --format, --families, ...


def help_texts() -> dict[str, tuple[str, str]]:
    """(metavar, help) of the declaration file's option and of each declaration's, the same in both front ends."""
    texts = {
        "declarations": (
            "FILE",
            f"the TOML file of what the --command program declares (default: <program>{declarations.FILE_SUFFIX} "
            "beside it, if there is one; options win over it)",
        )
    }
    for key, meaning in declarations.DECLARATIONS.items():
        default = " (default: float32, or the Q8_0 of a llama2c-v2 or gguf-q8_0 file)" if key == "precision" else ""
        texts[key] = (declarations.METAVARS[key], f"the --command program declares {meaning}{default}")
    return texts


def from_options(values: Mapping[str, Any], options: Mapping[str, str], directory: Path) -> Command | None:
    """The program `values` describe (key of SETTINGS or "command" -> the option's value, None where
    not given), or None without a template; `options` spells each key as the user typed it. The
    program is found from `directory` (where the user ran), and its declaration file read (the one
    `declarations` names, else the one beside the program if there is one); options win over the file.
    CommandTemplateError (ProgramNotFound, DeclarationError) says what is wrong, in those names."""
    given = [key for key in SETTINGS if values.get(key) is not None]
    if values.get("command") is None:
        if given:
            named = ", ".join(options[key] for key in given)
            raise CommandTemplateError(f"{named} {'need' if len(given) > 1 else 'needs'} {options['command']}")
        return None
    missing = [options[key] for key in ("format", "gives") if values.get(key) is None]
    if missing:
        raise CommandTemplateError(f"{options['command']} needs {' and '.join(missing)}")
    timeout = DEFAULT_TIMEOUT_S if values.get("timeout") is None else float(values["timeout"])
    if not timeout > 0:
        raise CommandTemplateError(f"{options['timeout']} must be a positive number of seconds, found {timeout:g}")
    command = Command.parse(values["command"], values["format"], values["gives"], timeout, directory=directory)
    program = command.locate()
    file = _declaration_file(values.get("declarations"), options["declarations"], program, directory)
    declared: dict[str, Any] = {}
    where: dict[str, str] = {}
    if file is not None:
        declared = declarations.read_file(file)
        where = {key: f"{key} in {file}" for key in declared}
    for key in declarations.DECLARATIONS:
        if values.get(key) is not None:
            declared[key], where[key] = values[key], options[key]
    found = declarations.parse(declared, where)
    return dataclasses.replace(command, precision=found.precision, constraints=found.constraints)


def _declaration_file(named: str | None, option: str, program: Path, directory: Path) -> Path | None:
    """The file `named` by `option` (found from `directory`; it must exist), else the one beside `program` if any.
    Whatever is in the file's place is returned, to be refused by `declarations.read_file` if it is no
    regular file: a pipe or device passed over would leave the program run without what it declared."""
    if named is not None:
        path = Path(directory, named)
        if not path.exists():
            raise declarations.DeclarationError(f"{option} {named}: there is no file {path}")
        return path
    path = declarations.beside(program)
    return path if path.exists() else None
