"""Root conftest: loads the model fixtures plugin and the Hypothesis profiles for every test."""

import os

# Tests never touch the network: set before anything imports transformers or huggingface_hub.
os.environ["HF_HUB_OFFLINE"] = "1"

from properties.profiles import register_profiles

pytest_plugins = ["fixtures.plugin"]

register_profiles()
