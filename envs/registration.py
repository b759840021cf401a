"""Registers parasim's environments with Gymnasium.

Called when ``parasim`` is imported, so that ``import parasim`` then
``gym.make("ParaOrch-v0")`` works. Entry points are strings, so
registering costs nothing until an environment is made.
"""
from __future__ import annotations

import gymnasium as gym


def register_envs() -> None:
    """Register ParaOrch-v0 and ParaOrchText-v0 once (idempotent)."""
    if "ParaOrch-v0" in gym.registry:
        return
    gym.register(
        id="ParaOrch-v0",
        entry_point="envs.paraorch:ParaOrchEnv",
        vector_entry_point="envs.paraorch_vector:ParaOrchVectorEnv",
        max_episode_steps=None,
    )
    gym.register(
        id="ParaOrchText-v0",
        entry_point="envs.paraorch_text:ParaOrchTextEnv",
    )
