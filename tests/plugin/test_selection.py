"""The three ways a model gets in, each run for real: pytest in a throwaway copy of the suite,
with a user's file in `fixtures/`, an installed distribution's entry point, `--model` and
$VERIFIER_MODEL; and a broken model failing a property by the rule's name. (A spec that names
nothing is tested through `verifier check`, in test_check.py.)"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.plugin import broken
from tests.plugin.project import ROOT, junit_cases, make_project, run
from verifier import fixtures
from verifier.cli import main
from verifier.fixtures import plugin
from verifier.model.weights import init_weights
from verifier.plugin import registry
from verifier.plugin.contract import RULES, ContractViolation, build_checked
from verifier.plugin.interface import Constraints
from verifier.plugin.probes import PROBE_CONFIGS, PROBE_KINDS
from verifier.plugin.registry import ModelSpec, PluginError

THROWAWAY_PROPERTY = """
    import numpy as np
    from verifier.plugin.contract import build_checked
    from verifier.plugin.probes import PROBE_CONFIGS
    from verifier.model.weights import init_weights

    def test_selected(model_spec):
        assert callable(model_spec.factory)

    def test_logits_have_the_contract_shape(model_spec):
        config = PROBE_CONFIGS["gpt2"]
        model = build_checked(model_spec, config, init_weights(config))
        assert model.logits(np.arange(4)).shape == (4, config.vocab_size)

    def test_model_independent():
        pass
"""

USERS_FIXTURE = """
    from verifier.plugin.adapters.reference import build
    from verifier.plugin.registry import register

    register("mine", build)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(
        tmp_path_factory.mktemp("suite"),
        {"properties/test_throwaway.py": THROWAWAY_PROPERTY},
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site directory holding an installed distribution that declares a `verifier.models` entry point."""
    site = tmp_path_factory.mktemp("site")
    info = site / "my_models-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-models\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[verifier.models]\nmy-installed = verifier.plugin.adapters.reference:build\n"
    )
    return site


def models_tested(project: Path, *args: str, **kwargs) -> dict[str, str]:
    """{model name: outcome} of `test_selected` in a pytest run (which builds no model, so that
    transformers, slow to import, is not imported)."""
    junit = project / "junit.xml"
    done = run(project, "-m", "pytest", "properties", "-k", "selected", f"--junitxml={junit}", *args, **kwargs)
    assert done.returncode == 0, done
    cases = junit_cases(junit)
    return {case["model"]: case["outcome"] for name, case in cases.items() if name.startswith("test_selected")}


@pytest.mark.slow  # a pytest run that probes the default models, transformers' among them: 6 to 7 s here
def test_the_projects_own_run_never_tests_an_installed_model(project: Path, installed: Path) -> None:
    # The case: a user's model installed beside a clone turned the clone's own pytest red.
    # Its pyproject.toml sets verifier_installed_models = false.
    tested = models_tested(project, pythonpath=(installed,))
    # What fixtures/builtin.py registers for runs that name no model (llamacpp is tested when named),
    # but those that cannot run here (transformers without its extra).
    assert tested == dict.fromkeys([s.name for s in registry.registered() if s.default and not s.unavailable], "passed")


@pytest.mark.slow  # a pytest run that probes the default models, transformers' among them: 6 to 7 s here
def test_without_a_choice_every_registered_and_installed_model_is_tested(project: Path, installed: Path) -> None:
    # What the installed suite does (no ini file of ours): `verifier check`, `pytest --pyargs verifier.properties`.
    tested = models_tested(project, "-o", "verifier_installed_models=true", pythonpath=(installed,))
    # fixtures/builtin.py registers these six.
    by_name_built_ins = {"llamacpp", "onnxruntime", "ctranslate2", "ctranslate2-int8", "litgpt", "transformer-lens"}
    assert {"numpy", "transformers", *by_name_built_ins} <= {spec.name for spec in registry.registered()}
    # All but the engines and the precision built-ins (tested when named) and those that cannot run here
    # (transformers without its extra).
    built_in = [spec.name for spec in registry.registered() if spec.default and not spec.unavailable]
    assert not by_name_built_ins & set(built_in)
    by_name = [spec.name for spec in registry.registered() if not spec.default]
    assert "transformers-bfloat16" in by_name and not set(by_name) & set(tested)
    # Models a user installed into this environment are tested too: expected, and not this test's to fail.
    already_installed = [ep.name for ep in registry.installed_entry_points()]
    assert tested == dict.fromkeys([*built_in, "my-installed", *already_installed], "passed")


@pytest.mark.slow  # two pytest runs, one probing the default models: 7 s here
def test_an_installed_model_that_cannot_load_fails_its_own_tests_and_stops_nothing(
    project: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    info = site / "broken_models-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-models\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[verifier.models]\nunloadable = no_such_module_xyz:build\nnumpy = os:sep\n")
    junit = tmp_path / "junit.xml"
    done = run(project, "-m", "pytest", "properties", "-k", "contract_shape and (numpy or unloadable)", "-o",
               "verifier_installed_models=true",
               f"--junitxml={junit}", pythonpath=(site,))  # fmt: skip
    assert done.returncode == 1, done  # it ran, and failed on the broken models
    outcomes = {c["model"]: c["outcome"] for n, c in junit_cases(junit).items() if n.startswith("test_logits")}
    assert outcomes["numpy"] == "passed" and outcomes["unloadable"] == outcomes["numpy [os:sep]"] == "failure", outcomes
    assert "cannot load: ModuleNotFoundError: No module named 'no_such_module_xyz'" in done.stdout
    assert "the name 'numpy' is taken by built-in; name it with --model os:sep" in done.stdout
    # An unrelated run in the same environment is not stopped by them either.
    assert (
        run(project, "-m", "pytest", "--co", "-q", "properties/test_throwaway.py", pythonpath=(site,)).returncode == 0
    )


def test_a_file_in_the_fixtures_folder_registers_its_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Way 1: in a clone installed with `pip install -e`, `verifier.fixtures` is the clone's fixtures/.
    (tmp_path / "my_model.py").write_text(textwrap.dedent(USERS_FIXTURE))
    monkeypatch.setattr(fixtures, "__path__", [str(tmp_path), *fixtures.__path__])
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    monkeypatch.delitem(sys.modules, "verifier.fixtures.my_model", raising=False)
    plugin.import_fixture_modules()
    assert registry.load_spec("mine").origin == "fixtures/"


def test_model_options_choose_by_name_or_spec_and_win_over_the_variable(project: Path, installed: Path) -> None:
    args = ("--model", "my-installed", "--model", "tests.plugin.broken:wrong_shape")
    env = {"VERIFIER_MODEL": "numpy"}
    tested = models_tested(project, *args, pythonpath=(installed,), env=env)
    assert tested == {"my-installed": "passed", "tests.plugin.broken:wrong_shape": "passed"}


def test_the_variable_chooses_and_a_broken_model_fails_by_the_rule_name(project: Path) -> None:
    env = {"VERIFIER_MODEL": "numpy, tests.plugin.broken:nan_logits"}
    done = run(project, "-m", "pytest", "properties", "-q", env=env)
    assert done.returncode == 1, done
    assert "1 failed, 4 passed" in done.stdout, done
    assert (
        "ContractViolation: model 'tests.plugin.broken:nan_logits' broke the contract rule 'finite' "
        "(logits hold no NaN or Inf for finite weights, at every position that is not padding) "
        "in logits(tokens int64 [4]): first non-finite entry at [3, 0]"
    ) in done.stdout, done


# The rules that take more than one call, and the property of the suite that checks each.
MULTI_CALL_RULES = {
    "deterministic": ("test_agreement.py::test_the_same_input_gives_the_same_output", "nondeterministic"),
    "cache-reusable": ("test_kv_cache.py::test_a_cache_stays_usable_after_decoding_from_it", "mutating_cache"),
}


def test_the_properties_checking_multi_call_rules_fail_broken_factories_by_the_rule(tmp_path: Path) -> None:
    suite = ROOT / "properties"
    if not all((suite / test.split("::")[0]).exists() for test, _ in MULTI_CALL_RULES.values()):
        pytest.skip("the property suite's test_agreement.py and test_kv_cache.py are not in this checkout")
    junit = tmp_path / "junit.xml"
    tests = [f"properties/{test}" for test, _ in MULTI_CALL_RULES.values()]
    models = [f"--model=tests.plugin.broken:{factory}" for _, factory in MULTI_CALL_RULES.values()]
    done = run(ROOT, "-m", "pytest", *tests, *models, "-p", "no:cacheprovider", f"--junitxml={junit}")
    assert done.returncode == 1, done
    cases = junit_cases(junit)
    for rule, (test, factory) in MULTI_CALL_RULES.items():
        case = cases[f"{test.split('::')[1]}[tests.plugin.broken:{factory}]"]
        assert case["outcome"] == "failure", (rule, case)
        assert f"contract rule {rule!r} ({RULES[rule]})" in done.stdout, done


# `verifier models MODULE:FACTORY`: a factory of the user's, probed as `verifier check --model` would test it.
# Every probe kind but GPT-2's, as `verifier models` lists them.
OTHER_KINDS = ", ".join(kind for kind in PROBE_KINDS if kind != "gpt2")
OWN_FACTORY = """
    from examples.numpy_gpt2 import build
    from verifier.plugin.interface import Constraints

    def build_bfloat16(config, weights):
        return build(config, weights)

    build_bfloat16.precision = "bfloat16"
    build_bfloat16.constraints = Constraints(families=("gpt2",), max_n_ctx=8)
"""


def test_models_probes_a_factory_of_your_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "examples.numpy_gpt2:build"]) == 0
    out = capsys.readouterr().out
    assert out.endswith(
        "examples.numpy_gpt2:build  (from examples/numpy_gpt2.py; test it with: verifier check --model "
        "examples.numpy_gpt2:build)\n"
        "  gpt2: logits; precision float32 (none declared: the default)\n"
        + "  llama, llama-gqa, llama3: unsupported (this example implements GPT-2 only, not 'llama')\n"
        + "".join(
            f"  {kind}: unsupported (this example implements GPT-2 only, not {kind!r})\n"
            for kind, (family, _, _) in PROBE_KINDS.items()
            if family not in ("gpt2", "llama")
        )
        + f"  runs: gpt2; not {OTHER_KINDS}\n"
    ), out


def test_models_imports_a_factory_from_the_current_directory_as_check_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "own_factory_in_cwd.py").write_text(textwrap.dedent(OWN_FACTORY))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "own_factory_in_cwd", raising=False)
    assert main(["models", "own_factory_in_cwd:build_bfloat16"]) == 0
    out = capsys.readouterr().out
    shape = Constraints(families=("gpt2",), max_n_ctx=8).describe()
    assert out.endswith(
        "own_factory_in_cwd:build_bfloat16  (from own_factory_in_cwd.py; test it with: verifier check --model "
        "own_factory_in_cwd:build_bfloat16)\n"
        f"  declares: {shape}\n"
        f"  gpt2: logits (on {shape}); precision bfloat16\n" + f"  {OTHER_KINDS}: "
        f"unsupported (not among its declared "
        f"constraints ({shape}))\n" + f"  runs: gpt2; not {OTHER_KINDS}\n"
    ), out


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            "no_such_module_xyz:build",
            "model 'no_such_module_xyz:build': cannot import module 'no_such_module_xyz': ModuleNotFoundError: No "
            "module named 'no_such_module_xyz' (is its directory the current one, or on PYTHONPATH?)",
        ),
        ("nope", "no model named 'nope'; the models are: numpy, "),
    ],
)
def test_models_with_a_spec_that_names_nothing_is_one_line_and_a_usage_error(
    spec: str, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "numpy", spec]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith(f"verifier models: error: {error}"), captured.err


@pytest.mark.parametrize(
    ("spec", "file", "module"),
    [
        ("bad.py:f", "bad.py", "bad"),
        ("./bad.py:f", "bad.py", "bad"),
        ("models/my_gpt.py:build", "my_gpt.py", "my_gpt"),
        ("src\\m.py:f", "m.py", "m"),
    ],
)
def test_a_file_path_given_as_a_model_says_to_give_a_module_path(spec: str, file: str, module: str) -> None:
    attr = spec.rpartition(":")[2]
    with pytest.raises(PluginError) as excinfo:
        registry.load_spec(spec)
    assert str(excinfo.value) == (
        f"--model {spec!r}: give a module path like {module}:{attr}, not a file path; run from the directory that "
        f"holds {file} (or put that directory on PYTHONPATH)"
    )


def test_a_spec_naming_no_callable_says_its_type_in_grammatical_english() -> None:
    with pytest.raises(PluginError, match=r"^--model 'sys:maxsize': 'maxsize' is of type int, not a callable factory$"):
        registry.load_spec("sys:maxsize")
    config = PROBE_CONFIGS["gpt2"]
    model = build_checked(ModelSpec("list", broken.list_logits, "test"), config, init_weights(config))
    with pytest.raises(
        ContractViolation, match=r"in logits\(tokens int64 \[2\]\): the logits came back as type list, not an array$"
    ):
        model.logits(np.array([1, 2]))
