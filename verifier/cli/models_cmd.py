"""`verifier models`: the models a run without --model tests, where each comes from, and what the probe found;
or, given `module.path:factory`, what a factory of your own runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from verifier.cli import arguments
from verifier.fixtures import plugin
from verifier.plugin import registry
from verifier.plugin.probes import probe as probe_model
from verifier.plugin.registry import ModelSpec, PluginError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "models",
        help="list the registered and installed models, or probe your factory (module.path:factory)",
        description="List the models `verifier check` tests when no --model is given: those registered by a file "
        "in fixtures/ (the built-in ones too) and those installed packages declare in the entry-point group "
        f"{registry.ENTRY_POINT_GROUP!r}; with what building each on the probe configs gave. Given "
        "module.path:factory (as for --model), build your own factory on the probe configs and say what it runs: "
        "per kind of config, its capabilities, the shape it accepted and its precision class, or why it refused.",
    )
    p.add_argument(
        "names",
        nargs="*",
        metavar="MODEL",
        help="probe only these: a listed name, or module.path:factory (default: every model listed)",
    )
    p.add_argument(
        "--no-probe",
        action="store_true",
        help="list the models without building them (probing builds each on 13 kinds of config: with every "
        "engine installed, about 12 s on 2 cores; each model's lines come as it is probed)",
    )
    p.set_defaults(func=run)


def _listed() -> tuple[list[ModelSpec], list[str]]:
    """The registered and installed models, and a line for each entry point that cannot load."""
    plugin.import_fixture_modules()
    specs, broken = registry.registered(), []
    for entry_point in registry.installed_entry_points():
        try:
            specs += registry.entry_point_specs([entry_point])
        except PluginError as e:
            broken.append(str(e))
    return specs, broken


def _where(spec: ModelSpec) -> str:
    """`from examples/numpy_gpt2.py`: the file a module.path:factory spec was imported from."""
    module = sys.modules.get(spec.name.partition(":")[0])
    file = getattr(module, "__file__", None)
    if file is None:
        return "module.path:factory"
    path = Path(file).resolve()
    return f"from {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}"


def _show_probes(spec: ModelSpec) -> None:
    """What building `spec` on each kind's probe configs (each family) gave: capabilities, the shape and
    precision class of the config it accepted, or why not, kinds with the same answer on one line; and
    the kinds it runs."""
    if spec.constraints:
        print(f"  declares: {' | '.join(c.describe() for c in spec.constraints)}")
    probes = probe_model(spec)
    kinds_by_line: dict[str, list[str]] = {}
    for probe in probes:
        line = probe.summary()
        if probe.error is None and probe.unsupported is None:
            line += f"; precision {probe.precision}{'' if probe.declared else ' (none declared: the default)'}"
        kinds_by_line.setdefault(line, []).append(probe.kind)
    for line, kinds in kinds_by_line.items():
        print(f"  {', '.join(kinds)}: {line}")
    runs = [p.kind for p in probes if p.error is None and p.unsupported is None]
    others = [p.kind for p in probes if p.kind not in runs]
    print(f"  runs: {', '.join(runs) or 'none of the probe configs'}{'; not ' + ', '.join(others) if others else ''}")


def run(args: argparse.Namespace) -> int:
    specs, broken = _listed()
    listed = {s.name for s in specs}
    unknown = sorted({n for n in args.names if n not in listed and ":" not in n})
    if unknown:
        known = ", ".join(s.name for s in specs)
        raise registry.PluginError(
            f"no model named {', '.join(map(repr, unknown))}; the models are: {known}; "
            "or probe your own factory: verifier models module.path:factory"
        )
    # Imported as `verifier check` imports them, before anything is printed: one that cannot is one line.
    arguments.import_from_the_current_directory()
    own = [registry.load_spec(n, origin="model") for n in dict.fromkeys(args.names) if n not in listed]
    for spec in specs:
        if args.names and spec.name not in args.names:  # asked about some: those only, not every model listed
            continue
        print(f"{spec.name}  ({spec.origin}{'' if spec.default else f', tested when named: --model {spec.name}'})")
        if spec.unavailable:
            print(f"  not available here (left out of runs): {spec.unavailable}")
            continue
        if not args.no_probe:
            _show_probes(spec)
    for spec in own:
        print(f"{spec.name}  ({_where(spec)}; test it with: verifier check --model {spec.name})")
        if not args.no_probe:
            _show_probes(spec)
    for line in broken:
        print(f"broken: {line}")
    return 1 if broken else 0
