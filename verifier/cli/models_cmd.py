"""`verifier models`: the models a run without --model tests, where each comes from, and what the probe found."""

from __future__ import annotations

import argparse
from typing import Any

from verifier.fixtures import plugin
from verifier.plugin import contract, registry
from verifier.plugin.registry import ModelSpec, PluginError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "models",
        help="list the registered and installed models, with what each offers",
        description="List the models `verifier check` tests when no --model is given: those registered by a file "
        "in fixtures/ (the built-in ones too) and those installed packages declare in the entry-point group "
        f"{registry.ENTRY_POINT_GROUP!r}; with what building each on the probe configs gave.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="probe only these models (default: every one listed)")
    p.add_argument("--no-probe", action="store_true", help="list the models without building them")
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


def run(args: argparse.Namespace) -> int:
    specs, broken = _listed()
    unknown = sorted(set(args.names) - {s.name for s in specs})
    if unknown:
        known = ", ".join(s.name for s in specs)
        raise registry.PluginError(f"no model named {', '.join(map(repr, unknown))}; the models are: {known}")
    for spec in specs:
        print(f"{spec.name}  ({spec.origin}{'' if spec.default else f', tested when named: --model {spec.name}'})")
        if spec.unavailable:
            print(f"  not available here (left out of runs): {spec.unavailable}")
            continue
        if args.no_probe or (args.names and spec.name not in args.names):
            continue
        for probe in contract.probe(spec):
            print(f"  {probe.kind}: {probe.summary()}")
    for line in broken:
        print(f"broken: {line}")
    return 1 if broken else 0
