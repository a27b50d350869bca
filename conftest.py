"""Root conftest of the clone: tests never touch the network.

The model plugin and the suite's Hypothesis profiles come from the installed pytest plugin
(`verifier.fixtures.plugin`, the `pytest11` entry point of lm-verifier).
"""

import os

# Set before anything imports transformers or huggingface_hub.
os.environ["HF_HUB_OFFLINE"] = "1"

from verifier.properties import profiles  # after HF_HUB_OFFLINE is set

# The library's own tests run in the suite's default profile too, unless one is chosen.
profiles.use_suite_default()
