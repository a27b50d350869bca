"""Where models under test come from: registrations, `module.path:factory` specs, entry points.

Three ways in here, all ending as a `ModelSpec` (the fourth, a program on the command line, is
`verifier.plugin.command`):
1. a file in the suite's `fixtures/` that calls `register(name, factory)`;
2. `pytest --model module.path:factory` (repeatable), or the VERIFIER_MODEL environment variable
   with the same syntax (several separated by commas);
3. an installed package's entry point in the group `verifier.models` (name = factory); a run
   whose ini sets `verifier_installed_models = false` (the clone's own tests) leaves them out.

Any of these spec texts may end in `@FAMILY` (`onnxruntime@gemma2`, `my.mod:build@llama`): the same
factory, tested on that family only (its other families are refused as not selected, and its verdict
says so); `verifier matrix` names its cells so.

`select` applies the precedence: `--model` options, else the variable, else everything
registered (except models registered with `default=False`, run by name only) or installed.
`--model` and the variable also accept a registered or entry-point name. A model registered as
unavailable here (the built-in `transformers` without the `transformers` extra) is left out of
"everything", with its reason, and is a usage error when named.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import PureWindowsPath
from typing import Any

from verifier.messages import BoundedMessage
from verifier.model.config import FAMILIES
from verifier.plugin import isolation
from verifier.plugin.interface import Constraints, Deviation, Factory, declared_constraints, declared_deviations

ENV_VAR = "VERIFIER_MODEL"
ENTRY_POINT_GROUP = "verifier.models"
NOT_SELECTED = "not selected"  # how a family outside `NAME@FAMILY` is refused, in probes and reports


class PluginError(BoundedMessage, ValueError):
    """A model spec that cannot be turned into a factory; the message says which and why."""


@dataclass(frozen=True)
class ModelSpec:
    """A named factory and where it came from (for reports and error messages); a model that is not
    `default` is tested only when named (`--model NAME`); `unavailable` says why the factory cannot run
    here ("" when it can); `family`, when set (`NAME@FAMILY`), is the one family it is tested on."""

    name: str
    factory: Factory
    origin: str
    default: bool = True
    unavailable: str = field(default="", repr=False)
    family: str | None = None
    # The process-wide state importing its module changed (`isolation.imported`): its factory starts from it.
    imported: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            self.constraints  # noqa: B018 - a malformed declaration is the spec's error, found early
            self.deviations  # noqa: B018
        except TypeError as e:
            raise PluginError(f"model {self.name!r} ({self.origin}): {e}") from None

    @property
    def constraints(self) -> tuple[Constraints, ...] | None:
        """The configs its factory declares it runs (`factory.constraints`), or None; of `family` only, if set
        (a declaration without it is then empty: the model runs nothing selected)."""
        declared = declared_constraints(self.factory)
        if declared is None or self.family is None:
            return declared
        return tuple(dataclasses.replace(c, families=(self.family,)) for c in declared if self.family in c.families)

    @property
    def deviations(self) -> tuple[Deviation, ...]:
        """The differences its factory declares it computes knowingly (`factory.deviations`)."""
        return declared_deviations(self.factory)

    def unselected(self, family: str) -> str | None:
        """Why `family` is not tested on this model (`NAME@FAMILY` names another one), or None."""
        if self.family is None or family == self.family:
            return None
        return f"{NOT_SELECTED} ({self.name} is tested on {self.family} only)"


@dataclass(frozen=True)
class Selection:
    """The models a run tests, and the registered models it leaves out because they cannot run here."""

    models: list[ModelSpec]
    left_out: list[ModelSpec] = field(default_factory=list)


_REGISTERED: dict[str, ModelSpec] = {}


def register(
    name: str, factory: Factory, *, origin: str = "fixtures/", default: bool = True, unavailable: str | None = None
) -> Factory:
    """Register `factory` under `name` (an error if another factory has it) and return the factory.

    `default=False` keeps it out of runs that name no model: it is tested when `--model NAME` asks.
    `unavailable` is why it cannot run here (a missing optional dependency), if so.
    """
    if not callable(factory):
        raise PluginError(f"model {name!r}: the factory must be callable, found {type(factory).__name__}")
    previous = _REGISTERED.get(name)
    if previous is not None and previous.factory is not factory:
        raise PluginError(f"model {name!r} is registered twice: by {previous.origin} and by {origin}")
    _REGISTERED[name] = ModelSpec(name, factory, origin, default, unavailable or "")
    return factory


def registered() -> list[ModelSpec]:
    """Every model registered so far, in registration order."""
    return list(_REGISTERED.values())


def load_spec(text: str, *, origin: str = "--model") -> ModelSpec:
    """A registered name, an entry point's name, or `module.path:factory` imported.

    The name shown in test ids and reports is `text` itself; `text` may end in `@FAMILY`.
    """
    base, at, family = text.rpartition("@")
    if at:
        _check_family(text, family, origin)  # before importing anything
        return on_family(load_spec(base, origin=origin), family, origin=origin)
    if text in _REGISTERED:
        return _REGISTERED[text]
    module_name, sep, attr = text.partition(":")
    if not sep:
        for ep in installed_entry_points():
            if ep.name == text:
                return entry_point_specs([ep])[0]
    if not sep or not module_name or not attr:
        known = ", ".join([*_REGISTERED, *(ep.name for ep in installed_entry_points())]) or "none"
        raise PluginError(f"{origin} {text!r}: expected module.path:factory or a registered or installed name: {known}")
    if any(c in module_name for c in "/\\"):  # no module path has them
        raise _file_path(text, module_name, attr, origin)
    try:
        module, imported = isolation.imported(lambda: importlib.import_module(module_name))
    except ModuleNotFoundError as e:
        if module_name.endswith(".py"):  # a file name, unless a package `x` holds a module `py`
            raise _file_path(text, module_name, attr, origin) from e
        raise PluginError(
            f"{origin} {text!r}: cannot import module {module_name!r}: {type(e).__name__}: {e} "
            "(is its directory the current one, or on PYTHONPATH?)"
        ) from e
    except Exception as e:  # a user's module may fail in any way while importing
        raise PluginError(f"{origin} {text!r}: cannot import module {module_name!r}: {type(e).__name__}: {e}") from e
    factory: Any = module
    for part in attr.split("."):
        try:
            factory = getattr(factory, part)
        except AttributeError:
            raise PluginError(f"{origin} {text!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(factory):
        raise PluginError(f"{origin} {text!r}: {attr!r} is of type {type(factory).__name__}, not a callable factory")
    return ModelSpec(text, factory, origin, imported=imported)


def on_family(spec: ModelSpec, family: str, *, origin: str = "--model") -> ModelSpec:
    """`spec`'s factory tested on `family` only: the model `NAME@FAMILY` names."""
    text = f"{spec.name}@{family}"
    _check_family(text, family, origin)
    if spec.family is not None:
        raise PluginError(f"{origin} {text!r}: one '@FAMILY' a spec")
    return dataclasses.replace(spec, name=text, family=family, default=True)


def _check_family(text: str, family: str, origin: str) -> None:
    if family not in FAMILIES:
        raise PluginError(f"{origin} {text!r}: {family!r} after '@' is not a family: expected one of {FAMILIES}")


def _file_path(text: str, module_name: str, attr: str, origin: str) -> PluginError:
    """The error for a spec that names a file (`./model.py:build`) where a module path belongs."""
    file = PureWindowsPath(module_name)  # splits at both kinds of separator
    return PluginError(
        f"{origin} {text!r}: give a module path like {file.stem}:{attr}, not a file path; run from the "
        f"directory that holds {file.name} (or put that directory on PYTHONPATH)"
    )


def env_specs(environ: Mapping[str, str] | None = None) -> list[ModelSpec]:
    """The specs named by the VERIFIER_MODEL environment variable (comma-separated)."""
    value = (environ if environ is not None else os.environ).get(ENV_VAR, "")
    return [load_spec(part.strip(), origin=f"${ENV_VAR}") for part in value.split(",") if part.strip()]


def installed_entry_points() -> Iterable[metadata.EntryPoint]:
    """The entry points installed packages declare in the `verifier.models` group, not loaded yet."""
    return metadata.entry_points(group=ENTRY_POINT_GROUP)


def entry_point_specs(entry_points: Iterable[metadata.EntryPoint] | None = None) -> list[ModelSpec]:
    """The factories installed packages declare in the `verifier.models` entry-point group."""
    specs = []
    for ep in installed_entry_points() if entry_points is None else entry_points:
        try:
            factory, imported = isolation.imported(ep.load)
        except Exception as e:  # an installed package may fail in any way while importing
            raise PluginError(
                f"entry point {ep.name!r} = {ep.value!r} in group {ENTRY_POINT_GROUP!r}: cannot load: "
                f"{type(e).__name__}: {e}"
            ) from e
        if not callable(factory):
            raise PluginError(
                f"entry point {ep.name!r} = {ep.value!r} in group {ENTRY_POINT_GROUP!r}: "
                f"{type(factory).__name__} is not a callable factory"
            )
        specs.append(ModelSpec(ep.name, factory, f"entry point {ep.value}", imported=imported))
    return specs


def _fails_to_build(message: str) -> Factory:
    """A factory that raises `message`: a model that could not be loaded fails its run, saying why."""

    def factory(config: Any, weights: Any) -> Any:
        raise PluginError(message)

    return factory


def _everything(installed: bool) -> list[ModelSpec]:
    """Every registered model and, if `installed`, every installed entry point. An entry point that
    cannot load, or whose name is taken, is a model whose factory raises why: a run of everything
    fails on it rather than not starting, or not testing it."""
    specs = registered()
    for ep in installed_entry_points() if installed else ():
        origin = f"entry point {ep.value}"
        taken = next((s for s in specs if s.name == ep.name), None)
        if taken is not None:
            message = f"{origin}: the name {ep.name!r} is taken by {taken.origin}; name it with --model {ep.value}"
            specs.append(ModelSpec(f"{ep.name} [{ep.value}]", _fails_to_build(message), origin))
            continue
        try:
            specs += entry_point_specs([ep])
        except PluginError as e:
            specs.append(ModelSpec(ep.name, _fails_to_build(str(e)), origin))
    return specs


def select(
    options: Sequence[str],
    environ: Mapping[str, str] | None = None,
    extra: Sequence[ModelSpec] = (),
    *,
    installed: bool = True,
) -> Selection:
    """The models a run tests: the `--model` options and `extra` (a `--command` program); else
    $VERIFIER_MODEL; else every registered model (but those registered with default=False) and (if
    `installed`) every installed entry point, but those that cannot run here, which are left out.
    Raises PluginError for a spec that names nothing or a model that cannot run here, or for two
    chosen models with the same name (their test ids would collide); choosing nothing never raises."""
    chosen = [load_spec(text) for text in options] + list(extra) or env_specs(environ)
    if not chosen:
        everything = [s for s in _everything(installed) if s.default]
        return Selection([s for s in everything if not s.unavailable], [s for s in everything if s.unavailable])
    seen: dict[str, ModelSpec] = {}
    for spec in chosen:
        if spec.unavailable:
            raise PluginError(f"model {spec.name!r} ({spec.origin}) cannot run here: {spec.unavailable}")
        if spec.name in seen:
            raise PluginError(f"model {spec.name!r} is selected twice: from {seen[spec.name].origin} and {spec.origin}")
        seen[spec.name] = spec
    return Selection(chosen)
