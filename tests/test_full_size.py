"""At real scale (slow tier): full-size GPT-2 124M and stories15M-shaped checkpoints written in each
format the suite reads, the streamed oracle bit for bit the resident one on each, and the property
suite run on each through `--checkpoint` as a user runs it: the reference conforms on every one,
`transformers` on one of each family, and a broken model fails at full size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.meta.suite_runs import mutant_spec, run_suite
from verifier.formats import load_checkpoint, map_checkpoint, save_checkpoint
from verifier.formats.hf_dir import write_hf_dir
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.reference import NumpyModel

pytestmark = pytest.mark.slow

# (name, preset, format, llama2.c version or shard size)
FILES = [
    ("gpt2-hf", "gpt2", "hf", None),
    ("gpt2-sharded", "gpt2", "hf", 100 * 2**20),
    ("stories15M-hf", "llama2c-stories15M", "hf", None),
    ("stories15M-sharded", "llama2c-stories15M", "hf", 20 * 2**20),
    ("stories15M-v0.bin", "llama2c-stories15M", "llama2c", 0),
    ("stories15M-v1.bin", "llama2c-stories15M", "llama2c", 1),
    ("stories15M-v2.bin", "llama2c-stories15M", "llama2c", 2),
]


def write(directory: Path, name: str, preset_name: str, fmt: str, option: int | None) -> Path:
    """The preset's seeded weights written as `name` in `directory`."""
    config = preset(preset_name)
    weights = init_weights(config, seed=0)
    path = directory / name
    if fmt == "hf":
        write_hf_dir(path, config, weights, max_shard_bytes=option)
    else:
        save_checkpoint(path, config, weights, format="llama2c", version=option or 0)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("full-size")
    return {name: write(directory, name, *spec) for name, *spec in FILES}


@pytest.mark.parametrize("name", [name for name, *_ in FILES])
def test_the_streamed_oracle_is_bit_for_bit_the_resident_one_at_full_size(
    checkpoints: dict[str, Path], name: str
) -> None:
    path = checkpoints[name]
    loaded, mapped = load_checkpoint(path), map_checkpoint(path)
    config = loaded.config
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, 48))
    resident = NumpyModel(config, loaded.weights, np.float64)
    streamed = NumpyModel(config, mapped.weights, np.float64, stream=True)
    np.testing.assert_array_equal(streamed.logits(tokens), resident.logits(tokens))
    _, cache = resident.decode(tokens[0, :40])
    _, streamed_cache = streamed.decode(tokens[0, :40])
    np.testing.assert_array_equal(streamed.decode(tokens[0, 40:], streamed_cache)[0],
                                  resident.decode(tokens[0, 40:], cache)[0])  # fmt: skip
    for group, expected in zip(
        streamed.trace_layers(tokens[0, :16]), resident.trace_layers(tokens[0, :16]), strict=True
    ):
        assert list(group) == list(expected)
        for stage, value in expected.items():
            np.testing.assert_array_equal(group[stage], value, err_msg=f"{name}: {stage}")


# Properties that run on a model of each family at full size (of the 25): GPT-2 runs no RoPE property
# and its 124M runs the articles' table; neither runs the large-scale weights or the quantized one.
RUN = {"gpt2": 17, "llama": 22}


def _conforms(model: str, path: Path, reports: Path, properties_run: int, *pytest_args: str) -> None:
    report = run_suite(model, reports, "--checkpoint", str(path), *pytest_args, profile="checkpoint")
    verdict = next(v for v in report.verdicts() if v.model == model)
    failed = [(r.property, r.detail[:500]) for r in report.results if r.outcome == "fail"]
    assert verdict.verdict == "conforms" and not failed, failed
    assert verdict.passed == properties_run, [(r.property, r.outcome, r.detail[:100]) for r in report.results]
    assert report.header.checkpoint is not None and report.header.checkpoint.startswith(str(path))


@pytest.mark.parametrize("name", [name for name, *_ in FILES])
def test_the_reference_conforms_on_each_full_size_checkpoint_through_the_checkpoint_option(
    checkpoints: dict[str, Path], name: str, tmp_path: Path
) -> None:
    if name.endswith("-sharded"):
        # The unsharded file's seeded weights, which run the whole suite; that shards read back exactly is
        # tests/formats/test_hf_dir.py's. One property shows --checkpoint reads them (the whole suite: 105 s).
        _conforms("numpy", checkpoints[name], tmp_path, 1, "-k", "logits_agree")
        return
    _conforms("numpy", checkpoints[name], tmp_path, RUN["gpt2" if name.startswith("gpt2") else "llama"])


@pytest.mark.parametrize("name", ["gpt2-hf", "stories15M-v0.bin"])
def test_transformers_conforms_at_full_size_through_the_checkpoint_option(
    checkpoints: dict[str, Path], name: str, tmp_path: Path
) -> None:
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    _conforms("transformers", checkpoints[name], tmp_path, RUN["gpt2" if name.startswith("gpt2") else "llama"])


@pytest.mark.parametrize("model", ["llamacpp-q8_0", "llamacpp-q4_0"])
def test_llamacpp_quantized_runs_the_whole_suite_on_a_full_size_checkpoint(
    checkpoints: dict[str, Path], model: str, tmp_path: Path
) -> None:
    """Its Q8_0 and Q4_0 rows must be multiples of 32, which no drawn config has: only a real size
    runs it. It runs 20 properties (it takes no attention mask, and its trace has no q, k or scores),
    the quantized one among them (next-token distributions against the original weights)."""
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    _conforms(model, checkpoints["stories15M-v0.bin"], tmp_path, 20)


@pytest.mark.parametrize(("mutant", "name"), [("ScaleByDHead", "gpt2-sharded"), ("RopeTheta1000", "stories15M-v1.bin")])
def test_a_broken_model_fails_at_full_size_through_the_checkpoint_option(
    checkpoints: dict[str, Path], mutant: str, name: str, tmp_path: Path
) -> None:
    # Two properties: on a failure each localizes with the oracle's neighbours, four passes of 1,024 tokens.
    report = run_suite(mutant_spec(mutant), tmp_path, "--checkpoint", str(checkpoints[name]),
                       "-k", "logits_agree or decoding_in_chunks_gives", profile="checkpoint")  # fmt: skip
    assert next(v.verdict for v in report.verdicts() if v.model == mutant_spec(mutant)) == "fails"
