"""pyllm's import graph has no circles: every `import` in every module (at module level or
inside a function, `if TYPE_CHECKING:` blocks included) is an edge to the pyllm module it
names; a module importing a package's submodule does not count the package's __init__."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pyllm"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of `package` it imports."""
    files = {module_name(p): p for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[:len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                # `from pkg import name` names a submodule when pkg.name is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                           for a in node.names]
            for t in targets:
                while t and t not in files:  # `import pyllm.x.y` of a name in pyllm.x
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph (a list of modules, first == last), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_graph_sees_imports():
    g = import_graph(PACKAGE)
    assert "pyllm.backend.ops" in g["pyllm.models.qwen35"]  # inside a function
    assert "pyllm.kernels" in g["pyllm.backend.linear"]  # `from pyllm.kernels import qmat`
    assert "pyllm.kernels.qmat" in g["pyllm.backend.linear"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_pyllm_has_no_import_circles():
    assert find_cycle(import_graph(PACKAGE)) is None


def test_kernels_and_backend_do_not_import_models():
    g = import_graph(PACKAGE)
    for mod, deps in g.items():
        if mod.startswith(("pyllm.kernels", "pyllm.backend")):
            assert not {d for d in deps if d.startswith("pyllm.models")}, mod
