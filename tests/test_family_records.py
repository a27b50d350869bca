"""The family records (`verifier.model.families`) are where the per-family tables come from: the `Family`
type names exactly the records, each record's switches, keys and probe kinds are consistent with the
config they describe, an inherited family names its parent, and the tables the config reader, the GGUF
layout and the probes read are the records' own."""

from __future__ import annotations

import typing

import pytest

from verifier.model import config as config_module
from verifier.model.config import FAMILY_SWITCHES, HF_CLASSES, SWITCH_DEFAULTS, Family, ModelConfig
from verifier.model.families import RECORDS, FamilyRecord
from verifier.plugin.probes import PROBE_CONFIGS, PROBE_KINDS, probe_kind

FIELDS = {f.name for f in ModelConfig.__dataclass_fields__.values()}


def test_the_family_type_names_exactly_the_records_in_their_order() -> None:
    assert typing.get_args(Family) == tuple(RECORDS) == config_module.FAMILIES


@pytest.mark.parametrize("record", RECORDS.values(), ids=list(RECORDS))
def test_a_record_sets_and_frees_switches_of_the_config_and_probes_kinds_of_its_own(record: FamilyRecord) -> None:
    assert set(record.fixed) <= set(SWITCH_DEFAULTS) and set(record.free) <= set(SWITCH_DEFAULTS)
    assert not set(record.fixed) & set(record.free), "a switch is either fixed or free"
    assert all(record.fixed[s] != SWITCH_DEFAULTS[s] for s in record.fixed), "a fixed switch holds the default"
    # Its first probe kind is named after it, and each kind's config is of the family and of that kind.
    assert record.probes[0].name == record.name
    for kind in record.probes:
        assert PROBE_KINDS[kind.name][0] == record.name
        assert PROBE_CONFIGS[kind.name].family == record.name and probe_kind(PROBE_CONFIGS[kind.name]) == kind.name
        assert set(kind.switches) <= set(record.free), "a probe turns on what the family frees"
    assert record.parent is None or list(RECORDS).index(record.parent) < list(RECORDS).index(record.name)


@pytest.mark.parametrize("record", RECORDS.values(), ids=list(RECORDS))
def test_the_config_reads_its_tables_from_the_record(record: FamilyRecord) -> None:
    family = typing.cast(Family, record.name)
    assert FAMILY_SWITCHES[family] == (dict(record.fixed), record.free)
    assert HF_CLASSES[family] == (record.hf_config, record.hf_model)
    assert config_module.FAMILY_KEYS[family] == record.keys
    assert (family in config_module.MOE_FAMILIES) == ("n_experts" in record.free)
    # What a record writes with a fixed value, the reader understands.
    assert set(record.written) <= record.keys | config_module.METADATA_KEYS


def test_the_gguf_layout_reads_each_family_s_architecture_from_its_record() -> None:
    pytest.importorskip("gguf", reason="the gguf package (pip install 'lm-verifier[gguf]') reads the layout")
    from verifier.formats import gguf as gguf_format
    from verifier.formats.gguf_layout import ARCHITECTURES

    assert {name: record.gguf for name, record in RECORDS.items()} == ARCHITECTURES
    # A file's architecture is read as the first family stored in it: Mistral and Mixtral are `llama` files.
    for arch, family in gguf_format._FAMILY.items():
        assert RECORDS[family].gguf == arch
        assert family == next(name for name, record in RECORDS.items() if record.gguf == arch)
