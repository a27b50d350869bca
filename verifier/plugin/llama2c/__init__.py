"""llama2.c's own C program as a black box: fetched, verified, built once, and run.

`build.binary()` gives the compiled `run.c` (raising `Llama2cUnavailable` with the reason when it
cannot: no compiler, sdist neither cached nor fetchable); `program.Llama2cProgram` runs it on a
model written in llama2.c's legacy format with a tokenizer made for each prompt (`vocab`).
"""

from verifier.plugin.llama2c.build import Llama2cUnavailable, binary

__all__ = ["Llama2cUnavailable", "binary"]
