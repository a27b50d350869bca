"""llama2.c's own C programs as black boxes: found or fetched, verified, built once, and run.

`checkout.program("run")` / `("runq")` compiles llama2.c's current programs from a source tree
(run through `verifier.plugin.command`); `build.binary()` gives the pinned 2023 `run.c` from PyPI,
the fallback that needs no checkout, which `program.Llama2cProgram` runs with a tokenizer made for
each prompt (`vocab`). Both raise `Llama2cUnavailable` with the reason when they cannot.
"""

from verifier.plugin.llama2c.build import Llama2cUnavailable, binary

__all__ = ["Llama2cUnavailable", "binary"]
