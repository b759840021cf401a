"""The source tree is what it reads as: three packages whose imports resolve by reading the files.

``parasim`` (the library), ``envs`` (the Gymnasium environments) and ``training`` (the trainers) are three top-level
packages, each a plain folder: no symbolic links, no ``__path__`` extension and no ``sys.path`` edits in package
code, so an IDE, a type checker or a reader follows every import to one file. The library's root holds only the
package's entry points; every other module lives in the room of the part it belongs to (docs/architecture.md).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("parasim", "envs", "training")
ROOT_MODULES = {"__init__.py", "__main__.py", "cli.py", "lazy_exports.py"}


def _package_files() -> list[Path]:
    return [p for name in PACKAGES for p in (ROOT / name).rglob("*.py")]


def test_no_symbolic_links_in_the_tree() -> None:
    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:  # not a git checkout (an sdist): walk the folders instead
        links = [p for name in PACKAGES for p in (ROOT / name).rglob("*") if p.is_symlink()]
    else:
        links = [line.split("\t")[1] for line in tracked.stdout.splitlines() if line.startswith("120000")]
    assert links == []


def test_package_code_never_edits_the_import_path() -> None:
    edits = re.compile(r"__path__\s*=|extend_path|sys\.path\.(insert|append|extend)|sys\.path\s*(\[|=|\+=)")
    offenders = []
    for path in _package_files():
        # code written for another interpreter (the sandbox's runner) is a string, not an edit of this one's path
        source = path.read_text()
        strings = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        stripped = source
        for s in strings:
            stripped = stripped.replace(s.value, "")
        if edits.search(stripped):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_library_root_holds_only_entry_points() -> None:
    loose = sorted(p.name for p in (ROOT / "parasim").glob("*.py") if p.name not in ROOT_MODULES)
    assert loose == [], "a library module belongs in the room of its part (docs/architecture.md)"


def test_every_project_import_resolves_to_a_file() -> None:
    """Each ``import``/``from`` of a project module names a module or package that exists as a file here."""
    missing = []
    for path in _package_files() + list((ROOT / "tests").glob("*.py")) + list((ROOT / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
                names += [f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in PACKAGES and name != "parasim._core" and not _is_module(name):
                    missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []


def _is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def test_checkout_imports_with_its_built_core() -> None:
    """``import parasim`` then ``gym.make('ParaOrch-v0')`` from a fresh interpreter: every module from this tree."""
    code = ("import parasim, gymnasium as gym; env = gym.make('ParaOrch-v0'); env.reset(seed=0); "
            "import envs.paraorch as m, training.config as c, parasim.scoring.rewards as r; "
            "print(parasim.__file__, m.__file__, c.__file__, r.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    init, env_mod, cfg_mod, rew_mod = (Path(p) for p in out.stdout.split())
    assert init.parent == ROOT / "parasim"
    assert env_mod.parent == ROOT / "envs"
    assert cfg_mod.parent == ROOT / "training"
    assert rew_mod.parent == ROOT / "parasim" / "scoring"
