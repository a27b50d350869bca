"""Built-in factories: each turns (config, canonical weights) into a model under test.

Adapters are thin: no property logic lives here. See `verifier.plugin.interface` for the contract.
"""
