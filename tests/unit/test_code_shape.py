"""The package's shape: no import cycle among fastpipe's modules, nothing imports the app module, no
import climbs the layers of docs/architecture.md, and modules and functions stay within what a reader
takes in as one idea."""
from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "fastpipe"
PLUGINS = REPO / "hydra_plugins" / "fastpipe_sweeps"
ARCHITECTURE = REPO / "docs" / "architecture.md"


def module_name(path: Path, repo: Path = REPO) -> str:
    rel = path.relative_to(repo).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def import_edges(roots=(PACKAGE,), repo: Path = REPO):
    """(module, imported module, line) for each import among the modules under ``roots``, at module
    level or inside functions."""
    modules = {module_name(p, repo): p for root in roots for p in root.rglob("*.py")}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    yield name, target, node.lineno


def import_graph() -> dict:
    """module -> the fastpipe modules it imports (at module level or inside functions)."""
    graph = {module_name(p): set() for p in PACKAGE.rglob("*.py")}
    for name, target, _ in import_edges():
        graph[name].add(target)
    return graph


def layer_table() -> dict:
    """docs/architecture.md's layer table: file or folder (repository-relative) -> its layer."""
    section = ARCHITECTURE.read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for number, files in re.findall(r"^\| (\d+) \| ([^|]+) \|", section, flags=re.M):
        for path in re.findall(r"`([^`]+)`", files):
            layers[path] = int(number)
    return layers


def layer_of(path: Path, layers: dict, repo: Path = REPO):
    """The layer of a module's file: its own row, else the row of the nearest folder above it."""
    rel = path.relative_to(repo).as_posix()
    if rel in layers:
        return layers[rel]
    folders = [f for f in layers if f.endswith("/") and rel.startswith(f)]
    return layers[max(folders, key=len)] if folders else None


def test_no_import_cycle_among_fastpipes_modules():
    graph, state, cycles = import_graph(), {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, " | ".join(" -> ".join(c) for c in cycles)
    assert not [m for m, deps in graph.items() if "fastpipe.__main__" in deps], "nothing imports the app module"


def layer_problems(layers: dict, roots=(PACKAGE, PLUGINS), repo: Path = REPO) -> list:
    """The modules no row places, then each import from a lower layer to a higher one."""
    files = {module_name(p, repo): p for root in roots for p in root.rglob("*.py")}
    where = {m: layer_of(p, layers, repo) for m, p in files.items()}
    problems = [f"{p.relative_to(repo)} has no row in docs/architecture.md's layer table"
                for m, p in sorted(files.items()) if where[m] is None]
    return problems + [f"{files[a].relative_to(repo)}:{line} imports {b} (layer {where[a]} -> {where[b]})"
                       for a, b, line in import_edges(roots, repo)
                       if None not in (where[a], where[b]) and where[a] < where[b]]


def test_no_import_climbs_the_layers_of_the_architecture_page():
    """Each module sits in a layer of docs/architecture.md's table, and imports only its own package
    and lower layers, at module level and inside functions alike."""
    layers = layer_table()
    assert layers.get("fastpipe/errors.py") == 0 and layers.get("fastpipe/__main__.py"), "the table was not read"
    problems = layer_problems(layers)
    assert not problems, "; ".join(problems)


def test_the_layer_check_finds_a_climbing_import_inside_a_function_and_an_unplaced_module(tmp_path):
    package = tmp_path / "fastpipe"
    package.mkdir()
    (package / "low.py").write_text("import os\n\n\ndef f():\n    from fastpipe import high\n")
    (package / "high.py").write_text("import fastpipe.low\n")
    (package / "stray.py").write_text("")
    layers = {"fastpipe/low.py": 0, "fastpipe/high.py": 1}
    assert layer_problems(layers, (package,), tmp_path) == [
        "fastpipe/stray.py has no row in docs/architecture.md's layer table",
        "fastpipe/low.py:5 imports fastpipe.high (layer 0 -> 1)"]


# Guidance, not a cut: a module is cut where its meaning splits, not to fit a number. Above
# MODULE_WARN lines a module is worth a second look (a warning); above MODULE_LINES or FUNCTION_LINES
# no reader takes it in as one idea (an error).
MODULE_WARN, MODULE_LINES, FUNCTION_LINES = 300, 500, 80


def _functions(node, prefix=""):
    """(qualified name, lines from ``def`` to the last line) of each function under ``node``, nested ones too."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield name, child.end_lineno - child.lineno + 1
            yield from _functions(child, f"{name}.")
        else:
            yield from _functions(child, prefix)


def too_long(roots=(PACKAGE, PLUGINS), repo: Path = REPO, module_lines: int = MODULE_LINES) -> dict:
    """``path`` -> lines for each module over ``module_lines``, ``path::function`` -> lines for each function
    over FUNCTION_LINES (methods as ``Class.method``), under ``roots``."""
    found = {}
    for path in sorted(p for root in roots for p in root.rglob("*.py")):
        rel, text = path.relative_to(repo).as_posix(), path.read_text()
        if len(text.splitlines()) > module_lines:
            found[rel] = len(text.splitlines())
        found.update({f"{rel}::{name}": lines for name, lines in _functions(ast.parse(text)) if lines > FUNCTION_LINES})
    return found


def test_modules_and_functions_stay_within_their_lengths():
    """Every module over 500 lines and every function over 80 fails, naming it; a module over 300 is a warning."""
    found = [f"{where} ({lines} lines)" for where, lines in too_long().items()]
    assert not found, (f"over {MODULE_LINES} lines a module or {FUNCTION_LINES} a function: " + "; ".join(found)
                       + ": split it where its meaning splits")
    long = [f"{where} ({lines} lines)" for where, lines in too_long(module_lines=MODULE_WARN).items() if "::" not in where]
    if long:
        warnings.warn(f"over {MODULE_WARN} lines: {'; '.join(long)}: one idea each, or split where the meaning splits")


def test_the_length_check_finds_a_long_module_and_a_long_method(tmp_path):
    package = tmp_path / "fastpipe"
    package.mkdir()
    body = [f"        x{i} = {i}" for i in range(FUNCTION_LINES)]
    (package / "short.py").write_text("def f():\n" + "\n".join(body[1:]) + "\n")  # 80 lines: at the limit
    long = "class C:\n    def m(self):\n" + "\n".join(body) + "\n" * MODULE_LINES  # m: 81 lines
    (package / "long.py").write_text(long)
    assert too_long((package,), tmp_path) == {"fastpipe/long.py": len(long.splitlines()),
                                              "fastpipe/long.py::C.m": FUNCTION_LINES + 1}
