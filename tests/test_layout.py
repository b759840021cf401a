"""The source tree imports as the installed package does.

A checkout's ``parasim/`` shadows the installed package when python runs from the checkout root, so the tree
itself must hold every subpackage (``parasim/envs`` and ``parasim/training`` are links to the top-level
``envs/`` and ``training/``) and must reach the compiled core that only the installed copy has.
"""
from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_subpackages_live_in_the_tree() -> None:
    for name in ("envs", "training"):
        path = ROOT / "parasim" / name
        assert path.is_dir() and path.resolve() == (ROOT / name).resolve(), path


def test_checkout_root_imports_with_an_installed_core() -> None:
    """``python -c "import parasim, gymnasium as gym; gym.make('ParaOrch-v0')"`` from the checkout root, with only
    the checkout and site-packages on the path (``-S``: no editable-install hooks), as after ``pip install .``."""
    purelib = sysconfig.get_paths()["purelib"]
    code = (f"import sys; sys.path[:0] = ['', {purelib!r}]; import parasim, gymnasium as gym; "
            "env = gym.make('ParaOrch-v0'); env.reset(seed=0); "
            "import parasim.envs.paraorch as m, parasim.training.config as c; "
            "print(parasim.__file__, m.__file__, c.__file__)")
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    init, env_mod, cfg_mod = out.stdout.split()
    assert Path(init).parent == ROOT / "parasim"
    assert Path(env_mod).parent == ROOT / "parasim" / "envs"
    assert Path(cfg_mod).parent == ROOT / "parasim" / "training"
