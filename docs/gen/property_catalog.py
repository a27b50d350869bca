"""The property catalog, written from the code at build time: each property of `properties/test_*.py`
with its docstring, its tolerance rule (which of the suite's comparisons its body makes, read from
its syntax tree), and the mutants that fail it, parsed from the mutation report's lists in
benchmarks/RESULTS.md. Nothing here is copied by hand, so the page cannot drift from the suite."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROPERTIES = ROOT / "properties"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"

# The comparisons a property can make, by the function it calls (properties/checks.py, oracle.py),
# each with the rule it applies. A property that calls none of them states an exact fact (a shape,
# a count, a condition checked by `checks.fail`).
RULES = {
    "agree": "within the bound of the model's precision class from the float64 oracle (the tolerance policy)",
    "agree/against": "the model's own two outputs (chunked and whole, a row and its batch...) within the oracle's "
    "bound times the slack",
    "exact": "an exact law: the class's identity floor, relative to the largest expected value",
    "top_token": "the expected token is the argmax up to a tie within the class's bound",
    "trace_agrees": "every stage of a localized trace within its bound",
    "identity_relative": "the class's identity floor (an exact law), scaled to how well the measured quantity is known",
    "bound": "an effect compared with a multiple of the oracle's bound (it must stand clear of it, or stay within it)",
}
EXACT = "exact: no tolerance (a shape, a count, or a condition that holds or not)"
SUMMARY = "Every property that failed, per mutant"


@dataclass
class Property:
    module: str  # the file's name without `test_` and `.py`, as the mutation report names it
    name: str  # the test function
    doc: str
    rules: list[str]
    killed_by: list[str] = field(default_factory=list)  # mutants that fail it (free code)
    killed_constrained: list[str] = field(default_factory=list)  # ... as constrained code runs them


def _calls(function: ast.FunctionDef, helpers: dict[str, ast.FunctionDef], seen: set[str]) -> list[ast.Call]:
    """Calls made in `function` and, transitively, in the module's helpers it calls."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            found.append(node)
            callee = node.func.id if isinstance(node.func, ast.Name) else None
            if callee in helpers and callee not in seen:
                seen.add(callee)
                found += _calls(helpers[callee], helpers, seen)
    return found


def _rules(function: ast.FunctionDef, helpers: dict[str, ast.FunctionDef]) -> list[str]:
    rules: dict[str, None] = {}
    for call in _calls(function, helpers, {function.name}):
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        keywords = {k.arg: k.value for k in call.keywords}
        if name == "agree":
            expected = call.args[1] if len(call.args) > 1 else keywords.get("expected")
            if isinstance(expected, ast.Call) and getattr(expected.func, "id", None) == "exact":
                continue  # an exact law through `agree`: the `exact` call below names the rule
            key = "agree/against" if "against" in keywords else "agree"
            slack = keywords.get("slack")
            extra = f" (slack {ast.unparse(slack)})" if slack is not None else ""
            rules[RULES[key] + extra] = None
        elif name in RULES:
            rules[RULES[name]] = None
    return list(rules) or [EXACT]


def properties() -> list[Property]:
    """Every property, in file order."""
    found = []
    for path in sorted(PROPERTIES.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
        helpers = {f.name: f for f in functions if not f.name.startswith("test_")}
        module = path.stem.removeprefix("test_")
        for f in functions:
            if f.name.startswith("test_"):
                found.append(Property(module, f.name, ast.get_docstring(f) or "", _rules(f, helpers)))
    return found


def mutation_kills(text: str) -> dict[str, tuple[list[str], list[str]]]:
    """{mutant: (properties it fails as free code, as constrained code)} from every "Every property that
    failed, per mutant" list of the report; a property is named `module: name_without_test_`."""
    kills: dict[str, tuple[list[str], list[str]]] = {}
    for block in text.split(f"<summary>{SUMMARY}</summary>")[1:]:
        for line in block.split("</details>")[0].splitlines():
            match = re.match(r"- (\w+): (.*)$", line)
            if not match:
                continue
            free, _, constrained = match.group(2).partition("; constrained: ")
            kills[match.group(1)] = (free.split(", "), constrained.split(", ") if constrained else [])
    return kills


def catalog() -> list[Property]:
    """The properties, each with the mutants the report says fail it."""
    props = properties()
    by_key = {f"{p.module}: {p.name.removeprefix('test_')}": p for p in props}
    for mutant, (free, constrained) in mutation_kills(RESULTS.read_text(encoding="utf-8")).items():
        for key in free:
            if key in by_key:
                by_key[key].killed_by.append(mutant)
        for key in constrained:
            if key in by_key:
                by_key[key].killed_constrained.append(mutant)
    return props


def render() -> str:
    props = catalog()
    out = [
        "# Property catalog",
        "",
        f"Generated from the code when the site is built: the {len(props)} properties of `properties/test_*.py`,",
        "each with its docstring, the comparisons its body makes (its tolerance rule: see",
        "[the oracle and its tolerances](../explanation/oracle-and-tolerances.md)), and the mutants of the catalog",
        f'(`tests/meta/mutants/`) that fail it, from the lists headed "{SUMMARY}" in the mutation report',
        "([benchmarks/RESULTS.md](../benchmarks/results.md)). A mutant measured without that list (the runs per",
        "precision class, and runs that recorded only each mutant's first failure) is not named here; a property",
        "no listed mutant fails says so.",
        "",
    ]
    module = None
    for p in props:
        if p.module != module:
            module = p.module
            out += [f"## test_{module}.py", ""]
        out += [f"### `{p.name}`", "", p.doc, "", "**Tolerance:** " + "; ".join(p.rules) + ".", ""]
        if p.killed_by:
            out.append(f"**Mutants that fail it** ({len(p.killed_by)}): " + ", ".join(p.killed_by) + ".")
        else:
            out.append("**Mutants that fail it:** none in the report's lists.")
        if p.killed_constrained:
            names = ", ".join(p.killed_constrained)
            out.append(f"As constrained code runs them ({len(p.killed_constrained)}): {names}.")
        out.append("")
    return "\n".join(out)
