"""What every engine's own tests check first, in one place: a built engine model's logits of one
sequence and of a batch agree with the float64 oracle within its declared class's bound."""

from __future__ import annotations

from typing import Any

import numpy as np

from verifier.properties.oracle import Oracle


def assert_sequence_and_batch_agree(model: Any, oracle: Oracle, tokens: np.ndarray, precision: str = "float32") -> None:
    """`model.logits` of `tokens` [T], and of the batch [tokens, tokens reversed], against `oracle`'s."""
    assert model.precision == precision
    expected = oracle.logits(tokens)
    comparison = expected.compare(model.logits(tokens))
    assert comparison.ok, f"logits: error / tolerance {comparison.ratio:.3g}"
    batch = model.logits(np.stack([tokens, tokens[::-1]]))
    assert batch.shape == (2, len(tokens), oracle.config.vocab_size)
    assert expected.compare(batch[0]).ok
    assert oracle.logits(tokens[::-1]).compare(batch[1]).ok
