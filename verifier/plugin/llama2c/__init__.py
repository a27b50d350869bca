"""llama2.c's own C programs as black boxes: found or fetched, verified, built once, and run.

`checkout.program("run")` / `("runq")` compiles llama2.c's current programs from a source tree
and `build.binary()` gives the pinned 2023 `run.c` from PyPI, the fallback that needs no checkout;
both run through `verifier.plugin.command` (`verifier.plugin.adapters.llama2c`). Both raise
`Llama2cUnavailable` with the reason when they cannot.
"""

from verifier.plugin.llama2c.build import Llama2cUnavailable, binary

__all__ = ["Llama2cUnavailable", "binary"]
