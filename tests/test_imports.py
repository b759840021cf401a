"""The package's import graph: no cycles, and the library never imports its test oracle.

Read from the source with ``ast`` (module-level and function-level imports alike, since a lazy import is still a
dependency), so that a cycle is caught before it bites at import time. The root package is left out as a target:
every module imports it first anyway, as its parent, and its names resolve lazily (PEP 562) from their modules.
``parasim.scoring.reference`` is the plain NumPy oracle that the C++ core is tested against: if the library used it, a
bug there would be in both sides of a test.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ((ROOT / "parasim", "parasim"), (ROOT / "envs", "envs"), (ROOT / "training", "training"))


def _modules() -> dict[str, Path]:
    out = {}
    for base, package in PACKAGES:
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if package == "parasim" and parts[:1] in (["envs"], ["training"]):
                continue  # the links to the top-level folders, read under their own names
            out[".".join([package, *parts])] = path
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for n in names:
                # importing a.b.c runs a.b's __init__ first: an edge to every enclosing package but the root, except
                # the importer's own packages (already initializing when it runs)
                parts = n.split(".")
                for k in range(2, len(parts) + 1):
                    dep = ".".join(parts[:k])
                    if dep in mods and dep != name and not name.startswith(dep + "."):
                        deps.add(dep)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_library_never_imports_the_oracle() -> None:
    importers = sorted(m for m, deps in _graph().items() if "parasim.scoring.reference" in deps)
    assert importers == []
    code = ("import sys, parasim, gymnasium as gym; "
            "import parasim.scoring.rewards, parasim.scoring.advantages, parasim.scoring.masks; "
            "import training.grpo, envs.paraorch_vector; gym.make('ParaOrch-v0').reset(seed=0); "
            "print('parasim.scoring.reference' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
