"""Root conftest of the clone: tests never touch the network, and use the developers' llama2.c tree.

The model plugin and the suite's Hypothesis profiles come from the installed pytest plugin
(`verifier.fixtures.plugin`, the `pytest11` entry point of lm-verifier).
"""

import os
from pathlib import Path

# Set before anything imports transformers or huggingface_hub.
os.environ["HF_HUB_OFFLINE"] = "1"

from verifier.plugin.llama2c.checkout import SOURCE_ENV  # after HF_HUB_OFFLINE is set
from verifier.properties import profiles

# The product builds llama2.c's current run.c and runq.c only from the tree $VERIFIER_LLAMA2C_SRC
# names; the clone's tests name the shared one beside the clone when there is one (subprocesses
# inherit it), and the tests of those programs skip, saying so, where there is none.
_SHARED_LLAMA2C = Path(__file__).resolve().parent.parent / "shared" / "llama2c-src"
if (_SHARED_LLAMA2C / "run.c").is_file():
    os.environ.setdefault(SOURCE_ENV, str(_SHARED_LLAMA2C))

# The library's own tests run in the suite's default profile too, unless one is chosen.
profiles.use_suite_default()
