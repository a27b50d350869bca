"""What a model is, without its files or its math: config and presets, the canonical weight set,
the parameter formula, the stage names of a trace, and published configs of well-known models.
No I/O here; `hf` (in `verifier.formats`) is the bridge to `transformers`."""
