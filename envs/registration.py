"""Registers parasim's environments with Gymnasium.

Called when ``parasim`` is imported, so that ``import parasim`` then
``gym.make("ParaOrch-v0")`` works. Entry points are strings, so
registering costs nothing until an environment is made.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym

from parasim.envs.render_modes import RENDER_FPS, RENDER_MODES


def make_paraorch(*, tools: str = "sim", **options: Any) -> gym.Env:
    """ParaOrch-v0's entry point: the simulated env, or with ``tools="real"`` the real-tools env (same spaces)."""
    if tools == "real":
        from parasim.envs.paraorch_real import ParaOrchRealEnv

        return ParaOrchRealEnv(tools="real", **options)
    from parasim.envs.paraorch import ParaOrchEnv

    return ParaOrchEnv(tools=tools, **options)


# gym.make reads the entry point's render modes before building the env (to add its render wrappers)
make_paraorch.metadata = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}  # type: ignore[attr-defined]


def register_envs() -> None:
    """Register ParaOrch-v0 and ParaOrchText-v0 once (idempotent)."""
    if "ParaOrch-v0" in gym.registry:
        return
    gym.register(
        id="ParaOrch-v0",
        entry_point="parasim.envs.registration:make_paraorch",
        vector_entry_point="parasim.envs.paraorch_vector:ParaOrchVectorEnv",
        max_episode_steps=None,
    )
    gym.register(
        id="ParaOrchText-v0",
        entry_point="parasim.envs.paraorch_text:ParaOrchTextEnv",
    )
