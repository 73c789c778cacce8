"""The house by layer: every import of harness/ and pyllm/ goes down the layer table.

LAYERS below is the one table of the layers, bottom first; docs/ARCHITECTURE.md shows it
(a test here checks that it shows this table). A module may import modules of its own folder,
of a folder in its own layer and of lower layers; never of a higher one, and the folders
form no circle. harness/ sits above pyllm/, which never imports harness/.

Every import counts, wherever it is written (at the top, inside a function, under
`if TYPE_CHECKING:`), and so does a module named in a string ("harness.cli.cmd_run:run"
for a lazy click command, `importlib.import_module("pyllm.models.llama")`): a lazy import
still means the two modules know each other. Modules are read with `ast`, nothing is
imported. Also checked here: no module circles, no basename used for two different
things, no file over 600 lines and no function over 60 lines without a reason
("Long because ...") in its docstring.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (package, layer, folders or top-level modules of that layer, what the layer holds)
LAYERS: list[tuple[str, str, tuple[str, ...], str]] = [
    ("pyllm", "base", ("errors", "naming", "paths"), "exceptions, names, where files live"),
    ("pyllm", "formats", ("quants", "kquants"), "GGUF block layouts, numpy dequantizers"),
    ("pyllm", "kernels", ("kernels",), "C kernels through cffi, their numpy twins"),
    ("pyllm", "loaders", ("loaders",), "GGUF, safetensors, course asset files"),
    ("pyllm", "backend", ("backend",), "weights as the kernels want them, the ops"),
    ("pyllm", "tokenizers", ("tokenizers",), "BPE and Qwen tokenizers"),
    ("pyllm", "models", ("models",), "Llama, Qwen3.5, the course's formats"),
    ("pyllm", "catalogue", ("registry", "fetch", "synth"), "model names, fetching, synthesis"),
    ("pyllm", "engine", ("engine", "request", "sampling", "prefix_cache", "logprobs",
                        "speculate"),
     "requests, batching, sampling, the prefix cache"),
    ("pyllm", "tools", ("export", "gguf_summary", "gguf_tools", "enginebench", "matbench",
                        "specbench"),
     "export, file summaries, llama.cpp tools, engine benchmarks"),
    ("harness", "abi", ("abi",), "what the kernel's C headers define"),
    ("harness", "fastpath", ("fastpath",), "the machine's hot paths in C (one cffi extension)"),
    ("harness", "engines", ("engines",), "the AI device's inference backends"),
    ("harness", "cpu", ("cpu",), "a hart's registers, guest RAM, the clock"),
    ("harness", "det", ("det",), "deterministic mode: counter, schedules, timeline, journal"),
    ("harness", "devices", ("devices",), "UART, CLINT, PLIC, virtio disk and AI device, ..."),
    ("harness", "guest", ("guest",), "the guest read from outside: ELF, DWARF, processes"),
    ("harness", "machine", ("machine",), "the board: harts, traps, bus, run loop, time travel"),
    ("harness", "disk", ("disk",), "file-system image, disk boots, crash points, image fuzzing"),
    ("harness", "race", ("race",), "data-race and lock-order detectors"),
    ("harness", "run", ("run",), "launching a machine for a user: terminal, prompts, reports"),
    ("harness", "debug", ("debug",), "the debugger and the GDB stub"),
    ("harness", "monitor", ("monitor",), "`harness top`: the AI service live"),
    ("harness", "serve", ("serve",), "the OpenAI-compatible server"),
    ("harness", "bench", ("bench",), "benchmarks and their reports"),
    ("harness", "cli", ("cli", "__main__"), "click commands: options parsed, one call made"),
]
PACKAGES = ["harness", "pyllm"]
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60
# basenames each folder may have for its own thing of that kind
SHARED_BASENAMES = {"__init__.py", "base.py", "errors.py"}
NAMED_MODULE = re.compile(r"^((?:harness|pyllm)(?:\.\w+)+)(?::\w+)?$")


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
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = NAMED_MODULE.match(node.value)  # "pkg.mod:attr", import_module("pkg.mod")
            if m and m.group(1) in known:
                found.add(m.group(1))
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


def unit_of(module: str) -> tuple[str, str] | None:
    """(package, folder or top-level module) of a dotted module name; None for a package
    itself."""
    parts = module.split(".")
    return (parts[0], parts[1]) if len(parts) > 1 else None


def layer_of(unit: tuple[str, str]) -> int:
    """The index of a unit's layer in LAYERS (KeyError: a unit the table does not name)."""
    for i, (pkg, _, units, _) in enumerate(LAYERS):
        if pkg == unit[0] and unit[1] in units:
            return i
    raise KeyError(unit)


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up the table, or that names a unit LAYERS lacks."""
    bad = []
    for name, deps in sorted(graph.items()):
        here = unit_of(name)
        if here is None:
            continue
        for dep in sorted(deps):
            there = unit_of(dep)
            if there is None or there == here:
                continue
            try:
                if layer_of(there) > layer_of(here):
                    bad.append(f"{name} -> {dep} (layer {LAYERS[layer_of(there)][1]} is above "
                               f"{LAYERS[layer_of(here)][1]})")
            except KeyError as exc:
                bad.append(f"{name} -> {dep}: {exc.args[0]} is in no layer of LAYERS")
    return bad


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between units ("harness.machine"), from the module graph."""
    out: dict[str, set[str]] = {}
    for name, deps in graph.items():
        here = unit_of(name)
        if here is None:
            continue
        node = out.setdefault(".".join(here), set())
        for dep in deps:
            there = unit_of(dep)
            if there is not None and there != here:
                node.add(".".join(there))
                out.setdefault(".".join(there), set())
    return out


def test_imports_go_down_the_layers() -> None:
    graph = graph_of(PACKAGES)
    assert "harness.cli.cmd_run" in graph["harness.cli.main"]  # a lazy command's string
    bad = upward(graph)
    assert not bad, "imports up the layer table (tests/test_layers.py LAYERS):\n  " + \
        "\n  ".join(bad)


def test_no_circles_between_folders() -> None:
    found = circles(folder_graph(graph_of(PACKAGES)))
    assert not found, "circles between folders:\n" + "\n".join(
        "  " + " -> ".join(c) for c in found)


def test_the_checker_finds_a_layer_broken() -> None:
    """An import up the table and a circle of folders are both reported."""
    graph = {"harness.abi.cheader": {"harness.machine.board"}, "harness.machine.board": set(),
             "harness.run.launch": {"harness.debug.repl"}, "harness.debug.repl": {"harness.run.x"},
             "harness.run.x": set()}
    bad = upward(graph)
    assert any(b.startswith("harness.abi.cheader -> harness.machine.board") for b in bad)
    assert any(b.startswith("harness.run.launch -> harness.debug.repl") for b in bad)
    assert circles(folder_graph(graph)) == [["harness.debug", "harness.run", "harness.debug"]]
    assert upward({"harness.nowhere.x": {"harness.abi.cheader"}})  # a folder not in the table


def test_every_folder_is_in_the_table() -> None:
    """A new folder or top-level module needs its row in LAYERS."""
    missing = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).iterdir():
            unit = path.stem if path.suffix == ".py" else path.name
            if (path.suffix == ".py" or (path / "__init__.py").exists()) and unit != "__init__":
                try:
                    layer_of((pkg, unit))
                except KeyError:
                    missing.add(f"{pkg}/{path.name}")
    assert not missing, sorted(missing)


def layer_table_markdown() -> str:
    """LAYERS as the table docs/ARCHITECTURE.md shows (top first, as one reads a house)."""
    rows = ["| layer | folders / modules | holds |", "|---|---|---|"]
    for pkg, layer, units, holds in reversed(LAYERS):
        names = ", ".join(f"`{pkg}/{u}/`" if (ROOT / pkg / u).is_dir() else f"`{pkg}/{u}.py`"
                          for u in units if (ROOT / pkg / u).is_dir()
                          or (ROOT / pkg / f"{u}.py").exists())
        rows.append(f"| {pkg} {layer} | {names} | {holds} |")
    return "\n".join(rows)


def test_architecture_doc_shows_the_table() -> None:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert layer_table_markdown() in doc, \
        "docs/ARCHITECTURE.md's layer table differs from LAYERS; it should read:\n" + \
        layer_table_markdown()


def test_basenames_say_one_thing() -> None:
    """No basename names two different things (SHARED_BASENAMES excepted)."""
    seen: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    twice = {k: v for k, v in seen.items() if len(v) > 1 and k not in SHARED_BASENAMES}
    assert not twice, twice


def test_files_and_functions_stay_short() -> None:
    """Files of at most MAX_FILE_LINES lines; functions of at most MAX_FUNCTION_LINES
    unless their docstring says why ("Long because ...")."""
    long_files, long_functions = [], []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            text = path.read_text()
            where = path.relative_to(ROOT)
            if text.count("\n") > MAX_FILE_LINES:
                long_files.append(f"{where} ({text.count(chr(10))} lines)")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = (node.end_lineno or node.lineno) - node.lineno + 1
                    doc = ast.get_docstring(node) or ""
                    if n > MAX_FUNCTION_LINES and "Long because" not in doc:
                        long_functions.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    assert not long_files, long_files
    assert not long_functions, long_functions
