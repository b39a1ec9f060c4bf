"""The package's layers: every import in ``distmc/`` points down, there is no import cycle, no module is too long.

Every ``import`` and ``from ... import`` of every module counts, also those inside functions and under
``if TYPE_CHECKING:``: a function-level import is still a dependency, only a later one. A module belongs to the
layer of the longest prefix of its name in :data:`LAYERS`; it may import its own layer and the layers below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "distmc"

#: The layers, lowest first. A module may import only modules of its own layer or of a layer below.
LAYERS: list[tuple[str, ...]] = [
    ("distmc.errors", "distmc._internal", "distmc.progress"),  # plumbing: errors, compiled helpers, logging
    ("distmc.model",),  # the PRISM front end and the kernel
    ("distmc.policy",),  # policies
    ("distmc.gym",),  # the Gymnasium environment on the kernel
    ("distmc.explore",),  # what both drivers stand on: limits, visited set, partition, expander, local driver
    ("distmc.assemble",),  # the reducer and the Storm hand-off
    ("distmc.check",),  # properties and checkers (in-process and the distributed checker's parts)
    ("distmc.options", "distmc.pipeline"),  # a run's options and its job
    ("distmc.explain",),  # traces, values, plots
    ("distmc.distributed",),  # the Ray runtime: coordinator, actors, exchange, policy servers, checkpoints
    (
        "distmc.report",
        "distmc.rounds",
        "distmc.api",
        "distmc.run",
        "distmc.region",
    ),  # verify, Report, Session, sweep; --width's rounds; --region
    ("distmc.abstract", "distmc.curve", "distmc.shield"),  # the front ends over them
    ("distmc.integrations",),  # training-loop callbacks
    ("distmc._internal.subcommand",),  # what the subcommands share
    ("distmc.abstract.cli", "distmc.curve.cli", "distmc.shield.cli", "distmc.scale"),  # the subcommands
    ("distmc.cli",),  # the command line
    ("distmc",),  # the package: its lazily loaded public names
]

#: No module in ``distmc/`` is longer than this (one job per module).
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The ``distmc`` modules (or packages) that module ``name`` imports, anywhere in its body."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "distmc")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "distmc":
                continue
            for alias in node.names:  # ``from distmc.explore import limits`` imports the module distmc.explore.limits
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    found.discard(name)
    return found


def layer_of(name: str) -> int:
    best, depth = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = i, prefix.count(".")
    assert best >= 0, f"{name} is in no layer: add it to LAYERS"
    return best


GRAPH = {name: imports_of(name) for name in MODULES}


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        layer_of(name)


def test_no_module_imports_upward() -> None:
    upward = [
        f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
        for a, targets in GRAPH.items()
        for b in sorted(targets)
        if layer_of(b) > layer_of(a)
    ]
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_no_import_cycle() -> None:
    found = cycles(GRAPH)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_length(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]}: {lines} lines (at most {MAX_LINES}: split it by responsibility)"


#: At most this many ``type: ignore`` in ``distmc/``, each with a comment that gives its reason.
MAX_TYPE_IGNORES = 5


def lines_with(text: str) -> list[str]:
    """``path:line`` of every line of ``distmc/`` that holds ``text``."""
    return [
        f"{path}:{i}"
        for path in MODULES.values()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if text in line
    ]


def test_type_ignores_are_few() -> None:
    found = lines_with("type: " + "ignore")
    assert len(found) <= MAX_TYPE_IGNORES, f"{len(found)} `type: ignore` (at most {MAX_TYPE_IGNORES}): {found}"


def test_no_bare_distmc_error_is_raised() -> None:
    """Every error raised is a subclass of DistmcError that names what went wrong."""
    found = lines_with("raise " + "DistmcError(")
    assert not found, f"bare `raise DistmcError(`, raise a subclass instead: {found}"


def test_the_line_finder_finds_lines() -> None:
    assert any(p.endswith("errors.py:" + p.rsplit(":", 1)[1]) for p in lines_with("class DistmcError("))
