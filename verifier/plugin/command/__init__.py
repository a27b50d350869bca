"""Any program as a model under test, through the command line (the fourth way in).

The user gives a command template (`template`), the file format the program reads (`files`) and
what it gives back (`program.GIVES`); `Command.parse(...).build` is then a factory like any other.
`text` holds llama2.c's prompt-as-text rules for programs that generate text.
"""

from verifier.plugin.command.program import GIVES, Command, CommandFailed
from verifier.plugin.command.template import PLACEHOLDERS, CommandTemplateError

__all__ = ["GIVES", "PLACEHOLDERS", "Command", "CommandFailed", "CommandTemplateError"]
