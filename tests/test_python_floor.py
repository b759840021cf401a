"""The documented python floor is true: no module needs a newer python than ``requires-python`` says.

Two checks, because either alone misses cases. ``ast.parse(..., feature_version=floor)`` rejects newer syntax
(``type X = ...``, PEP 695 generics, ``except*`` below 3.11) when this suite runs on a newer python; on the floor
itself every module is parsed by the floor's own parser. Newer standard-library names (``itertools.batched``,
``typing.override``) parse fine everywhere and fail only when called, so every ``from M import N`` and ``M.N`` on a
standard module is checked against the names added after the floor, listed below with the version that added them.
"""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("parasim", "envs", "training", "scripts")

# Standard-library names added after 3.11, by the version that added them (from the "What's New" pages).
NEWER_STDLIB: dict[str, tuple[int, int]] = {
    "itertools.batched": (3, 12), "typing.override": (3, 12), "typing.TypeAliasType": (3, 12),
    "typing.get_protocol_members": (3, 13), "typing.is_protocol": (3, 13), "typing.TypeIs": (3, 13),
    "typing.ReadOnly": (3, 13), "typing.NoDefault": (3, 13), "warnings.deprecated": (3, 13),
    "copy.replace": (3, 13), "math.sumprod": (3, 12), "math.fma": (3, 13), "os.path.splitroot": (3, 12),
    "os.process_cpu_count": (3, 13), "pathlib.UnsupportedOperation": (3, 13), "sys.monitoring": (3, 12),
    "calendar.Month": (3, 12), "calendar.Day": (3, 12), "statistics.kde": (3, 13), "queue.ShutDown": (3, 13),
    "asyncio.eager_task_factory": (3, 12), "asyncio.QueueShutDown": (3, 13), "inspect.markcoroutinefunction": (3, 12),
    "inspect.BufferFlags": (3, 12), "collections.abc.Buffer": (3, 12), "types.get_original_bases": (3, 12),
    "string.templatelib": (3, 14), "annotationlib": (3, 14),
    "compression": (3, 14), "concurrent.interpreters": (3, 14),
}


def _floor() -> tuple[int, int]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r"\s*>=\s*3\.(\d+)\s*", spec)
    assert match, f"requires-python = {spec!r}: expected '>=3.N', which these checks read"
    return 3, int(match.group(1))


def _sources() -> list[Path]:
    seen: dict[Path, Path] = {}
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            seen.setdefault(path.resolve(), path)  # parasim/envs and parasim/training link to the top-level folders
    return sorted(seen.values())


def _used_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Dotted standard-library names a module uses: ``from M import N`` as M.N, ``import M`` and ``alias.N``."""
    aliases: dict[str, str] = {}
    used: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                used.append((node.lineno, name.name))
                top = name.name.split(".")[0]
                aliases[name.asname or top] = name.name if name.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            used.extend((node.lineno, f"{node.module}.{name.name}") for name in node.names)
            used.append((node.lineno, node.module))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in aliases:
                parts = [aliases[inner.id], *reversed(chain)]
                used.extend((node.lineno, ".".join(parts[:k])) for k in range(2, len(parts) + 1))
    return used


def _problems(path: Path, floor: tuple[int, int]) -> list[str]:
    where = path.relative_to(ROOT)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=floor)
    except SyntaxError as err:
        return [f"{where}:{err.lineno}: syntax newer than requires-python >={floor[0]}.{floor[1]}: {err.msg}"]
    newer = sorted({(line, name) for line, name in _used_names(tree) if NEWER_STDLIB.get(name, (0, 0)) > floor})
    return [f"{where}:{line}: {name} needs python >= {'.'.join(map(str, NEWER_STDLIB[name]))}, above "
            f"requires-python >={floor[0]}.{floor[1]}" for line, name in newer]


def test_no_module_needs_a_newer_python_than_requires_python() -> None:
    floor, sources = _floor(), _sources()
    assert len(sources) > 50, [str(p) for p in sources]  # the folders are read, not missed
    problems = [line for path in sources for line in _problems(path, floor)]
    assert not problems, "\n".join(problems)


def test_the_checks_catch_newer_code() -> None:
    with pytest.raises(SyntaxError):
        ast.parse("type Vector = list[float]\n", feature_version=(3, 11))
    with pytest.raises(SyntaxError):
        ast.parse("def first[T](xs: list[T]) -> T:\n    return xs[0]\n", feature_version=(3, 11))
    tree = ast.parse("import itertools as it\nfrom typing import override\nprint(it.batched([1, 2], 1))\n")
    names = {name for _, name in _used_names(tree)}
    assert {"itertools.batched", "typing.override"} <= names


def test_the_floor_is_the_one_ruff_targets() -> None:
    floor = _floor()
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["target-version"]
    assert target == f"py{floor[0]}{floor[1]}", f"[tool.ruff] target-version = {target!r}, floor 3.{floor[1]}"
