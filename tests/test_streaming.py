"""The streaming oracle: checkpoints mapped, not loaded, and a reference that holds about one layer at a time.

`map_checkpoint` must give exactly `load_checkpoint`'s weights in every format; a streamed
`NumpyModel` must give bit for bit the resident one's logits, cached decoding and trace; a streamed
trace compared group by group must localize as the whole one does. Full-size checkpoints are
checked the same way in the slow tier (`tests/test_full_size.py`).
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from verifier.analysis import tolerance
from verifier.analysis.divergence import localize
from verifier.formats import CheckpointError, load_checkpoint, map_checkpoint, save_checkpoint
from verifier.formats.fileio import open_bounded
from verifier.formats.hf import build_model
from verifier.formats.hf_dir import write_hf_dir, write_hf_shards
from verifier.formats.safetensors_file import byte_range, read_header
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.presets import preset
from verifier.model.weights import LazyWeights, Weights, init_weights, iter_init_weights, weight_shapes
from verifier.reference import NumpyModel

GPT2 = preset("gpt2").replace(vocab_size=97, n_ctx=32, d_model=48, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=80)
LLAMA = preset("llama2c-stories260K").replace(n_layers=2, vocab_size=90, n_ctx=32)  # GQA: 8 heads over 4
LLAMA_UNTIED = LLAMA.replace(tie_embeddings=False)


def _files(tmp_path: Path) -> list[tuple[Path, ModelConfig, Weights]]:
    """The same weights written in every format the suite maps."""
    written = []
    for config in (GPT2, LLAMA, LLAMA_UNTIED):
        weights = init_weights(config, seed=7, scale=0.3)
        name = f"{config.family}-{'tied' if config.tie_embeddings else 'untied'}"
        write_hf_dir(tmp_path / f"{name}-hf", config, weights)
        written.append((tmp_path / f"{name}-hf", config, weights))
        write_hf_dir(tmp_path / f"{name}-sharded", config, weights, max_shard_bytes=20_000)
        written.append((tmp_path / f"{name}-sharded" / "model.safetensors.index.json", config, weights))
        if config.family == "llama":
            for version in (0, 1, 2):
                path = tmp_path / f"{name}-v{version}.bin"
                save_checkpoint(path, config, weights, format="llama2c", version=version)
                written.append((path, config, weights))
    return written


def test_a_mapped_checkpoint_reads_what_loading_reads_in_every_format(tmp_path: Path) -> None:
    for path, _, _ in _files(tmp_path):
        loaded, mapped = load_checkpoint(path), map_checkpoint(path)
        assert isinstance(mapped.weights, LazyWeights), path
        assert (mapped.config, mapped.format, mapped.version) == (loaded.config, loaded.format, loaded.version)
        assert (mapped.tensors, mapped.findings, mapped.parameter_total) == (
            loaded.tensors,
            loaded.findings,
            loaded.parameter_total,
        )
        assert list(mapped.weights) == list(weight_shapes(loaded.config))
        for name, expected in loaded.weights.items():
            got = mapped.weights[name]
            assert got.dtype == np.float32 and got.shape == expected.shape, (path, name)
            np.testing.assert_array_equal(got, expected, err_msg=f"{path}: {name}")


def test_bfloat16_and_openai_layout_files_map_as_they_load(tmp_path: Path) -> None:
    import torch
    from safetensors.numpy import save_file

    build_model(LLAMA, init_weights(LLAMA, seed=3)).to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    weights = init_weights(GPT2, seed=5)
    stored = {name.removeprefix("transformer."): w for name, w in weights.items()}
    stored |= {f"h.{i}.attn.bias": np.ones((1, 1, 4, 4), np.float32) for i in range(GPT2.n_layers)}
    stored["lm_head.weight"] = weights["transformer.wte.weight"]  # tied, stored anyway
    (tmp_path / "openai").mkdir()
    save_file(stored, tmp_path / "openai" / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "openai" / "config.json").write_text(json.dumps(GPT2.to_hf_dict()))
    for directory in (tmp_path / "bf16", tmp_path / "openai"):
        loaded, mapped = load_checkpoint(directory), map_checkpoint(directory)
        assert mapped.findings == loaded.findings and mapped.tensors == loaded.tensors
        for name, expected in loaded.weights.items():
            np.testing.assert_array_equal(mapped.weights[name], expected, err_msg=f"{directory}: {name}")


def _tokens(config: ModelConfig, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, config.vocab_size, shape)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_streamed_reference_is_bit_for_bit_the_resident_one(tmp_path: Path, dtype: type) -> None:
    """From the same file: logits of a batch (with a mask), cached decoding in chunks, the trace."""
    for path, config, _ in _files(tmp_path):
        resident = NumpyModel(config, load_checkpoint(path).weights, dtype)
        streamed = NumpyModel(config, map_checkpoint(path).weights, dtype, stream=True)
        batch = _tokens(config, (2, 12))
        mask = np.ones_like(batch)
        mask[1, :5] = 0
        np.testing.assert_array_equal(streamed.logits(batch), resident.logits(batch), err_msg=str(path))
        np.testing.assert_array_equal(
            streamed.logits(batch, attention_mask=mask), resident.logits(batch, attention_mask=mask), err_msg=str(path)
        )
        cache_r = cache_s = None
        for chunk in np.split(batch[0], [5, 6]):
            logits_r, cache_r = resident.decode(chunk, cache_r)
            logits_s, cache_s = streamed.decode(chunk, cache_s)
            np.testing.assert_array_equal(logits_s, logits_r, err_msg=str(path))
        trace_r, trace_s = resident.trace(batch[0]), streamed.trace(batch[0])
        assert list(trace_s) == list(trace_r)
        for stage, value in trace_r.items():
            np.testing.assert_array_equal(trace_s[stage], value, err_msg=f"{path}: {stage}")


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("stream", [True, False])
def test_a_streamed_pass_holds_about_one_layer_in_float64(family: str, stream: bool) -> None:
    """NumPy reports its allocations to tracemalloc: a streamed float64 pass over 16 layers must peak
    at about one layer's weights in float64 (each converted into the memory of the last weight of its
    shape, plus small activations), twice over at most; a resident model at all of them."""
    config = (GPT2 if family == "gpt2" else LLAMA_UNTIED).replace(
        d_model=128, n_heads=4, n_kv_heads=4, n_layers=16, d_ff=512
    )
    weights = init_weights(config, seed=1)
    layer = 8 * sum(w.size for name, w in weights.items() if ".0." in name)  # transformer.h.0., model.layers.0.
    total = 8 * sum(w.size for w in weights.values())
    tracemalloc.start()
    try:
        model = NumpyModel(config, LazyWeights(weight_shapes(config), weights.__getitem__), np.float64, stream=stream)
        model.logits(_tokens(config, (4,)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if stream:
        assert peak < 2 * layer < total / 4, f"peak {peak:,} bytes; one layer {layer:,}, all {total:,}"
    else:  # what the bound above is a bound against
        assert peak > total, f"peak {peak:,} bytes; all weights {total:,}"


def test_a_streamed_pass_converts_into_the_memory_of_the_weights_it_dropped() -> None:
    """A second pass converts every weight into memory the first one left (no new arrays), gives the
    same logits, and never converts over a weight a caller still holds."""
    weights = init_weights(LLAMA_UNTIED, seed=2)
    model = NumpyModel(
        LLAMA_UNTIED, LazyWeights(weight_shapes(LLAMA_UNTIED), weights.__getitem__), np.float64, stream=True
    )
    held = model.weights["model.layers.0.self_attn.q_proj.weight"]
    kept = held.copy()
    tokens = _tokens(LLAMA_UNTIED, (2, 6))
    first = model.logits(tokens)
    spare = model.weights._spare  # type: ignore[attr-defined]  # the converted weights' memory, by shape
    made = {id(b) for buffers in spare.values() for b in buffers}
    second = model.logits(tokens)
    assert {id(b) for buffers in spare.values() for b in buffers} == made
    np.testing.assert_array_equal(second, first)
    np.testing.assert_array_equal(held, kept)  # its shape's layers converted into other memory
    resident = NumpyModel(LLAMA_UNTIED, weights, np.float64)
    np.testing.assert_array_equal(first, resident.logits(tokens))


def test_a_trace_streams_one_layer_at_a_time_and_localizes_as_the_whole_trace() -> None:
    config = LLAMA_UNTIED
    weights = init_weights(config, seed=2, scale=0.3)
    tokens = _tokens(config, (9,))
    oracle = NumpyModel(config, weights, np.float64)
    groups = list(oracle.trace_layers(tokens))
    assert [list(g) for g in groups] == [
        [stages.EMBED],
        *([stages.layer_stage(i, op) for op in stages.layer_ops(config, i)] for i in range(config.n_layers)),
        [stages.FINAL_NORM, stages.LOGITS],
    ]
    broken = dict(NumpyModel(config, weights).trace(tokens))
    broken["layers.1.mlp_act"] = broken["layers.1.mlp_act"] * 1.01
    neighbours = [NumpyModel(config, tolerance.perturbed(weights, seed=s), np.float64) for s in (0, 1)]
    whole = localize(broken, oracle.trace(tokens), [m.trace(tokens) for m in neighbours], rope_positions=8)
    streamed = localize(
        broken, oracle.trace_layers(tokens), [m.trace_layers(tokens) for m in neighbours], rope_positions=8
    )
    assert streamed == whole
    assert whole.first is not None and whole.first.stage == "layers.1.mlp_act"


def test_perturbed_weights_are_the_same_held_or_streamed() -> None:
    weights = init_weights(GPT2, seed=4)
    lazy = LazyWeights(weight_shapes(GPT2), weights.__getitem__)
    held, streamed = tolerance.perturbed(weights, seed=1), tolerance.perturbed(lazy, seed=1)
    assert isinstance(streamed, LazyWeights)
    for name, w in held.items():
        np.testing.assert_array_equal(streamed[name], w)
        assert not np.array_equal(w, weights[name]), name  # nudged
    other_seed = tolerance.perturbed(weights, seed=2)
    assert not np.array_equal(held["transformer.h.0.ln_1.weight"], other_seed["transformer.h.0.ln_1.weight"])


def test_sharded_writing_one_tensor_at_a_time_writes_what_write_hf_dir_writes(tmp_path: Path) -> None:
    write_hf_dir(tmp_path / "whole", LLAMA_UNTIED, init_weights(LLAMA_UNTIED, seed=3), max_shard_bytes=30_000)
    write_hf_shards(
        tmp_path / "streamed", LLAMA_UNTIED, iter_init_weights(LLAMA_UNTIED, seed=3), max_shard_bytes=30_000
    )
    names = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "streamed").iterdir()) and len(names) > 3
    for name in names:
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "streamed" / name).read_bytes(), name


def test_sharded_writing_refuses_tensors_out_of_order_or_extra(tmp_path: Path) -> None:
    tensors = list(iter_init_weights(GPT2, seed=0))
    with pytest.raises(CheckpointError, match=r"tensor transformer\.wte\.weight: missing, or not in state-dict order"):
        write_hf_shards(tmp_path / "a", GPT2, tensors[::-1], max_shard_bytes=10_000)
    with pytest.raises(CheckpointError, match=r"tensor extra: not a weight of this config"):
        write_hf_shards(tmp_path / "b", GPT2, [*tensors, ("extra", np.zeros(3))], max_shard_bytes=10_000)
    wrong = [(n, w[:1] if n.endswith("ln_f.bias") else w) for n, w in tensors]
    with pytest.raises(CheckpointError, match=r"tensor transformer\.ln_f\.bias: wrong shape"):
        write_hf_shards(tmp_path / "c", GPT2, wrong, max_shard_bytes=10_000)


def test_a_mapped_weight_is_checked_when_it_is_read(tmp_path: Path) -> None:
    """Mapping checks the layout up front; a non-finite value is found, and named, when its weight is read."""
    weights = init_weights(LLAMA_UNTIED, seed=0)
    path = tmp_path / "model.bin"
    save_checkpoint(path, LLAMA_UNTIED, weights, format="llama2c", version=1)
    data = bytearray(path.read_bytes())
    offset = len(data) - 4 * LLAMA_UNTIED.vocab_size * LLAMA_UNTIED.d_model  # the classifier, last
    data[offset : offset + 4] = np.float32(np.nan).tobytes()
    path.write_bytes(bytes(data))
    mapped = map_checkpoint(path)  # nothing read yet
    with pytest.raises(
        CheckpointError, match=r"tensor lm_head\.weight: holds 1 non-finite values, the first at \[0, 0\]"
    ):
        NumpyModel(mapped.config, mapped.weights, np.float64, stream=True).logits(np.arange(3))
    path.write_bytes(bytes(data[:-4]))
    with pytest.raises(CheckpointError, match="file is truncated"):
        map_checkpoint(path)


def test_transformers_builds_from_mapped_weights_in_its_dtype(tmp_path: Path) -> None:
    import torch

    weights = init_weights(LLAMA_UNTIED, seed=6)
    write_hf_dir(tmp_path, LLAMA_UNTIED, weights)
    mapped = map_checkpoint(tmp_path).weights
    model = build_model(LLAMA_UNTIED, mapped, dtype=torch.bfloat16)
    for name, parameter in model.named_parameters():
        assert parameter.dtype == torch.bfloat16, name
        expected = torch.from_numpy(weights[name]).to(torch.bfloat16)
        assert torch.equal(parameter, expected), name
    tied = build_model(GPT2, init_weights(GPT2, seed=6))
    assert torch.equal(tied.lm_head.weight, tied.transformer.wte.weight)


MIXTRAL = ModelConfig(
    family="mixtral", vocab_size=90, n_ctx=32, d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=512,
    norm_eps=1e-5, tie_embeddings=False, n_experts=8, top_k=2, norm_topk=True,
)  # fmt: skip


def test_a_streamed_moe_pass_holds_about_one_expert_in_float64() -> None:
    """Experts are read one at a time (`llama.moe`): a streamed float64 pass over 4 layers of 8 experts
    peaks near one expert (three [512, 128] matrices) plus activations, not a layer's 24 matrices."""
    weights = init_weights(MIXTRAL, seed=1)
    matrix = 8 * MIXTRAL.d_ff * MIXTRAL.d_model
    tracemalloc.start()
    try:
        model = NumpyModel(MIXTRAL, LazyWeights(weight_shapes(MIXTRAL), weights.__getitem__), np.float64, stream=True)
        model.logits(_tokens(MIXTRAL, (12,)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4.5 * matrix, f"peak {peak:,} bytes; one expert matrix {matrix:,}"


def test_a_streamed_moe_pass_reads_each_chosen_expert_once_whole_and_in_order() -> None:
    """Each layer reads its router, then each expert some token chose, its gate, up and down together, in
    expert order; an expert no token chose is never read; and the pass equals the resident one bit for bit."""
    config = MIXTRAL.replace(d_model=32, d_ff=48, n_layers=2)
    weights = init_weights(config, seed=2, scale=0.3)
    tokens = _tokens(config, (3,))
    reads: list[str] = []
    lazy = LazyWeights(weight_shapes(config), lambda name: reads.append(name) or weights[name])
    for dtype in (np.float32, np.float64):
        reads.clear()
        streamed = NumpyModel(config, lazy, dtype, stream=True).logits(tokens)
        np.testing.assert_array_equal(streamed, NumpyModel(config, weights, dtype).logits(tokens))
        resident = NumpyModel(config, weights, np.float64)
        for layer, probs in resident.router_probs(tokens).items():
            prefix = f"model.layers.{layer}.block_sparse_moe."
            chosen = sorted({int(e) for e in np.argsort(-probs, axis=-1)[:, :2].ravel()})
            assert len(chosen) < config.n_experts, "the case leaves an expert unchosen"
            expected = [prefix + "gate.weight"] + [
                f"{prefix}experts.{e}.{x}.weight" for e in chosen for x in ("w1", "w3", "w2")
            ]
            assert [name for name in reads if name.startswith(prefix)] == expected


def test_a_streamed_pass_reads_a_float32_checkpoint_into_memory_it_holds(tmp_path: Path) -> None:
    """A mapped float32 safetensors checkpoint is read into the pass's own memory (`read_into`): a second
    pass makes no new arrays and gives the resident logits bit for bit; a non-finite value read that way
    is still found and named. A BF16 checkpoint, converted on reading, is looked up as before."""
    weights = init_weights(LLAMA_UNTIED, seed=4)
    write_hf_dir(tmp_path / "f32", LLAMA_UNTIED, weights)
    mapped = map_checkpoint(tmp_path / "f32")
    assert mapped.weights.reads_into
    model = NumpyModel(mapped.config, mapped.weights, np.float64, stream=True)
    tokens = _tokens(LLAMA_UNTIED, (2, 5))
    first = model.logits(tokens)
    spare = model.weights._spare  # type: ignore[attr-defined]  # the pass's memory, by (shape, dtype)
    made = {id(b) for buffers in spare.values() for b in buffers}
    assert any(dtype == np.float32 for _, dtype in spare)  # read into, then converted
    np.testing.assert_array_equal(model.logits(tokens), first)
    assert {id(b) for buffers in spare.values() for b in buffers} == made
    np.testing.assert_array_equal(first, NumpyModel(LLAMA_UNTIED, weights, np.float64).logits(tokens))

    file = tmp_path / "f32" / "model.safetensors"  # one value overwritten with inf (writers refuse one)
    with open_bounded(file) as reader:
        header = read_header(reader)
    entry = next(e for e in header.entries if e.name == "model.layers.1.mlp.down_proj.weight")
    data = bytearray(file.read_bytes())
    at = byte_range(header, entry)[0] + 4 * (3 * entry.shape[1] + 7)
    data[at : at + 4] = np.float32(np.inf).tobytes()
    file.write_bytes(bytes(data))
    broken = map_checkpoint(tmp_path / "f32")
    with pytest.raises(
        CheckpointError,
        match=r"tensor model\.layers\.1\.mlp\.down_proj\.weight: holds 1 non-finite values, the first at \[3, 7\]",
    ):
        NumpyModel(broken.config, broken.weights, np.float64, stream=True).logits(tokens)

    import torch

    build_model(LLAMA_UNTIED, weights).to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    assert not map_checkpoint(tmp_path / "bf16").weights.reads_into
