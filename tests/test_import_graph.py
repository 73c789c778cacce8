"""The module-level import graph of our packages has no circles.

Every `import` and `from ... import` of every module counts, wherever it is written
(at the top, inside a function, under `if TYPE_CHECKING:`): a lazy or typing-only import
still means the two modules know each other, and a circle makes either one impossible to
read, test or move alone. Modules are read with `ast`, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = ["harness", "pyllm"]  # each checked alone: neither imports the other's circle


def modules(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of a package under ROOT."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules that module `name` (at path) imports."""

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:  # harness.x.Name -> harness.x
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {resolve(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from ..a import b
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            found |= {resolve(f"{base}.{a.name}") for a in node.names}
    found.discard(None)
    found.discard(name)
    return found  # type: ignore[return-value]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a path back to its start) per strongly connected part of the graph
    with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                part = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    part.append(w)
                    if w == v:
                        break
                if len(part) > 1:
                    parts.append(part)
    return [_cycle_in(graph, set(p)) for p in parts]


def _cycle_in(graph: dict[str, set[str]], part: set[str]) -> list[str]:
    """A shortest path from the part's first module back to itself, inside the part."""
    start = min(part)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & part):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return sorted(part)


def graph_of(packages: list[str]) -> dict[str, set[str]]:
    known: dict[str, Path] = {}
    for p in packages:
        known.update(modules(p))
    return {name: imports(name, path, known) for name, path in known.items()}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package: str) -> None:
    graph = graph_of([package])
    assert len(graph) > 10, f"{package}: too few modules found under {ROOT / package}"
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join("  " + " -> ".join(c) for c in found)


def test_a_circle_is_found() -> None:
    """The checker itself: a circle of three and one of two are reported, a chain is not."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"},
             "g": {"d"}}
    assert sorted(circles(graph)) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert circles({"a": {"b"}, "b": set()}) == []


# harness/guest/ reads the guest through these alone: never the machine, its devices or
# the debugger (so the reports, hang detection and the debugger can all use it)
GUEST_MAY_IMPORT = {"harness.cpu.registers", "harness.cpu.physmem", "harness.guest.elf", "harness.abi.cheader"}


def test_guest_readers_depend_only_on_hart_ram_elf_and_headers() -> None:
    graph = graph_of(["harness"])
    wrong = {name: sorted(d for d in deps if not d.startswith("harness.guest")
                          and d not in GUEST_MAY_IMPORT)
             for name, deps in graph.items() if name.startswith("harness.guest")}
    assert len(wrong) > 5, "harness/guest/ not found"
    assert not any(wrong.values()), {k: v for k, v in wrong.items() if v}


def test_pyllm_kernels_and_backend_do_not_import_models() -> None:
    """pyllm's layers (docs/ARCHITECTURE.md): kernels/ <- backend/ <- models/."""
    graph = graph_of(["pyllm"])
    assert "pyllm.backend.ops" in graph["pyllm.models.qwen35"]  # an import inside a function
    assert {"pyllm.kernels", "pyllm.kernels.qmat"} <= graph["pyllm.backend.linear"]
    for name, deps in graph.items():
        if name.startswith(("pyllm.kernels", "pyllm.backend")):
            assert not {d for d in deps if d.startswith("pyllm.models")}, name
