"""Where models come from: specs, the environment variable, entry points, and the precedence."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

from examples import numpy_gpt2
from tests.plugin import broken
from verifier.plugin import registry
from verifier.plugin.adapters import reference
from verifier.plugin.registry import ModelSpec, PluginError


def test_a_module_spec_imports_the_factory_and_keeps_the_text_as_name() -> None:
    spec = registry.load_spec("examples.numpy_gpt2:build")
    assert spec == ModelSpec("examples.numpy_gpt2:build", numpy_gpt2.build, "--model")


def test_a_registered_name_is_the_registered_spec() -> None:
    assert registry.load_spec("numpy").factory is reference.build


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nonexistent", "expected module.path:factory or a registered or installed name: numpy, transformers"),
        ("examples.numpy_gpt2:", "expected module.path:factory"),
        (":build", "expected module.path:factory"),
        ("no_such_module_xyz:build", "cannot import module 'no_such_module_xyz': ModuleNotFoundError"),
        ("examples.numpy_gpt2:buld", "module 'examples.numpy_gpt2' has no attribute 'buld'"),
        ("examples.numpy_gpt2:np", "'np' is of type module, not a callable factory"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(PluginError) as excinfo:
        registry.load_spec(text)
    assert str(excinfo.value).startswith(f"--model {text!r}: ")
    assert message in str(excinfo.value)


def test_a_missing_module_suggests_where_to_run_from() -> None:
    with pytest.raises(PluginError, match=r"is its directory the current one, or on PYTHONPATH\?"):
        registry.load_spec("no_such_module_xyz:build")


def test_a_module_that_fails_while_importing_is_reported(tmp_path, monkeypatch) -> None:
    (tmp_path / "half_written_model.py").write_text("def build(config, weights):\n    return None\n1 / 0\n")
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(PluginError, match="cannot import module 'half_written_model': ZeroDivisionError"):
        registry.load_spec("half_written_model:build")


def test_the_variable_takes_several_specs_separated_by_commas() -> None:
    specs = registry.env_specs({registry.ENV_VAR: " numpy , examples.numpy_gpt2:build,"})
    expected = [("numpy", "built-in"), ("examples.numpy_gpt2:build", "$VERIFIER_MODEL")]
    assert [(s.name, s.origin) for s in specs] == expected


def test_options_win_over_the_variable_which_wins_over_the_registry() -> None:
    env = {registry.ENV_VAR: "examples.numpy_gpt2:build"}
    assert [s.name for s in registry.select(["numpy"], env).models] == ["numpy"]
    assert [s.name for s in registry.select([], env).models] == ["examples.numpy_gpt2:build"]
    everything = registry.select([], {})
    assert {"numpy", "transformers", "llama2c"} <= {s.name for s in everything.models + everything.left_out}


def test_a_model_that_cannot_run_here_is_left_out_with_its_reason_and_refused_by_name(monkeypatch) -> None:
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    registry.register("needs-x", reference.build, origin="built-in", unavailable="it needs x (pip install x)")
    everything = registry.select([], {})
    assert "needs-x" not in [s.name for s in everything.models] and "numpy" in [s.name for s in everything.models]
    assert [(s.name, s.unavailable) for s in everything.left_out if s.name == "needs-x"] == [
        ("needs-x", "it needs x (pip install x)")
    ]
    message = "model 'needs-x' (built-in) cannot run here: it needs x (pip install x)"
    with pytest.raises(PluginError, match=re.escape(message)):
        registry.select(["needs-x"], {})
    with pytest.raises(PluginError, match=re.escape(message)):
        registry.select([], {registry.ENV_VAR: "numpy,needs-x"})
    assert registry.select(["numpy"], {}).left_out == []  # a run that names its models mentions no other


def test_a_model_selected_twice_is_an_error() -> None:
    with pytest.raises(PluginError, match="model 'numpy' is selected twice: from built-in and built-in"):
        registry.select(["numpy", "numpy"], {})


def test_registering_another_factory_under_a_taken_name_is_an_error() -> None:
    with pytest.raises(PluginError, match="model 'numpy' is registered twice: by built-in and by fixtures/"):
        registry.register("numpy", broken.wrong_shape)


def _entry_point(name: str, value: str) -> metadata.EntryPoint:
    return metadata.EntryPoint(name=name, value=value, group=registry.ENTRY_POINT_GROUP)


def test_entry_points_load_as_named_specs() -> None:
    specs = registry.entry_point_specs([_entry_point("example-gpt2", "examples.numpy_gpt2:build")])
    assert specs == [ModelSpec("example-gpt2", numpy_gpt2.build, "entry point examples.numpy_gpt2:build")]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("no_such_module_xyz:build", "cannot load: ModuleNotFoundError"),
        ("examples.numpy_gpt2:np", "module is not a callable factory"),
    ],
)
def test_a_broken_entry_point_names_itself(value: str, message: str) -> None:
    with pytest.raises(PluginError) as excinfo:
        registry.entry_point_specs([_entry_point("mine", value)])
    assert f"entry point 'mine' = {value!r} in group 'verifier.models'" in str(excinfo.value)
    assert message in str(excinfo.value)
