"""A KV-cache failure says where the decode departs: the first divergent chunk and position, and
whether the full pass agrees (then the bug is in the cached path and no trace stage is blamed).

Each case runs a catalog mutant in process, decoded in chunks as the KV-cache properties decode
it, through the check those properties make (`checks.agree` with `checks.decode_localizer`).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.meta.mutants import catalog, constrained
from tests.meta.mutants.base import Transformer, factory
from verifier.plugin.contract import CheckedModel, build_checked
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks
from verifier.properties.cases import Case
from verifier.properties.oracle import oracle
from verifier.properties.pinned_cases import PUBLISHED_LLAMA, RICH_LLAMA

TRACE_BLAMED = "logits() and trace() do not compute the same thing"
CHUNKS = (3, 9, 1, 11)


def _failure(model: CheckedModel, case: Case) -> tuple[str, checks.Record]:
    """The failure message of `model`'s logits decoded in CHUNKS against the oracle's, and its record."""
    tokens = case.token_array()
    with checks.recording("kv") as record:
        checks.judge_at(model, case)
        pieces, cache, start = [], None, 0
        for n in CHUNKS:
            logits, cache = model.decode(tokens[start : start + n], cache)
            pieces.append(logits)
            start += n
        found = np.concatenate(pieces, axis=-2)
        positions = [p for _, p in checks.decode_positions(model, CHUNKS)]
        expected = oracle(case).logits(tokens)[positions]
        localize = checks.decode_localizer(model, oracle(case), tokens, CHUNKS, found, expected)
        with pytest.raises(checks.PropertyFailure) as failure:
            checks.agree(found, expected, what="logits decoded in chunks", model=model, localize=localize)
        checks.record_failure(record, failure.value)
    return str(failure.value), record


def _model(cls: type[Transformer], case: Case) -> CheckedModel:
    return build_checked(ModelSpec(cls.__name__, factory(cls), "test"), case.config, case.weights())


def test_a_mask_bug_in_chunks_after_a_cache_names_the_chunk_and_position_not_the_trace() -> None:
    """The chunk of 9 after a cache of 3: its first position (3) sees key 0 only, not keys 0..3."""
    message, record = _failure(_model(catalog.CacheChunkMaskNotOffset, RICH_LLAMA), RICH_LLAMA)
    assert "first divergent chunk: chunk 2 of [3, 9, 1, 11] (positions 3 to 11, decoded after a cache of 3 tokens)" in (
        message
    ), message
    assert "; first divergent position 3: max |diff| " in message and "x the bound); 9 of the 9 positions" in message
    assert "the full pass logits(tokens) agrees with the oracle" in message and "decode's cached path" in message
    assert TRACE_BLAMED not in message and "first divergent stage" not in message
    assert record.first_divergent_stage is None


def test_a_model_giving_each_chunk_s_last_position_is_told_that_position() -> None:
    spec = ModelSpec("last", constrained.constrained.CacheChunkMaskNotOffset, "test")
    model = build_checked(spec, PUBLISHED_LLAMA.config, PUBLISHED_LLAMA.weights())
    message, _ = _failure(model, PUBLISHED_LLAMA)
    assert "first divergent chunk: chunk 2 of [3, 9, 1, 11]" in message and "first divergent position 11:" in message
    assert "decode's cached path" in message and TRACE_BLAMED not in message


def test_a_bug_the_full_pass_shows_too_is_localized_by_the_trace() -> None:
    message, record = _failure(_model(catalog.ScaleByDHead, RICH_LLAMA), RICH_LLAMA)
    assert "\nfirst divergent stage: layer 0 scores: " in message
    assert "the full pass logits(tokens) departs from the oracle too" in message
    assert message.endswith(
        "the bug is not the cache's alone (decoded in chunks, it first departs in chunk 1 of [3, 9, 1, 11], "
        "at position 1)"
    )
    assert record.first_divergent_stage == "layers.0.scores"
