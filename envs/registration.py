"""Registers parasim's environments with Gymnasium.

Called when ``parasim`` is imported, so that ``import parasim`` then
``gym.make("ParaOrch-v0")`` works. Entry points are strings, so
registering costs nothing until an environment is made.

``gym.make_vec("ParaOrch-v0", vector_kwargs={"autoreset_mode": ...})`` reaches the compiled vector env: Gymnasium's
``make_vec`` refuses ``vector_kwargs`` for an env with a ``vector_entry_point`` (it wants the vector env's own options
as keywords), so the option that Gymnasium users pass to ``SyncVectorEnv`` / ``AsyncVectorEnv`` there
(``autoreset_mode``) would fail with the default vectorization. ParaOrch-v0's registered keyword arguments are a
``VectorKwargsDict``, which moves that option from ``vector_kwargs`` into the vector env's keywords when
``make_vec`` reads its arguments off them; with ``vectorization_mode="sync"`` or ``"async"`` it leaves
``vector_kwargs`` to the Gymnasium vectorizer, as before (tests/test_env_vector.py covers both).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import VectorizeMode

# the compiled vector env's options that Gymnasium's own vectorizers take as ``vector_kwargs``
VECTOR_KWARGS = ("autoreset_mode",)


class VectorKwargsDict(dict):
    """ParaOrch-v0's registered (empty) keyword arguments: a dict whose ``pop`` of ``"vector_kwargs"``, which
    ``gym.make_vec`` calls with the caller's ``vector_kwargs`` as the default, moves ``VECTOR_KWARGS`` into the
    keywords of the compiled vector env (``make_vec`` passes them to it) when the vectorization is the vector entry
    point (``make_vec`` pops ``"vectorization_mode"`` just before, with the caller's mode as its default)."""

    def pop(self, key: Any, *default: Any) -> Any:
        if key == "vectorization_mode" and default:
            self._mode = default[0]
        if key == "vector_kwargs" and default and isinstance(default[0], Mapping) and not self.get(key):
            if _is_vector_entry_point(getattr(self, "_mode", None)):
                rest = dict(default[0])
                for name in VECTOR_KWARGS:
                    if name in rest:
                        self[name] = rest.pop(name)
                return super().pop(key, rest)
        return super().pop(key, *default)


def _is_vector_entry_point(mode: Any) -> bool:
    """Whether ``make_vec``'s ``vectorization_mode`` builds ParaOrch-v0's vector entry point (None does: it has one);
    an invalid mode is left to ``make_vec``'s own error."""
    try:
        return mode is None or VectorizeMode(mode) == VectorizeMode.VECTOR_ENTRY_POINT
    except ValueError:
        return False


def register_envs() -> None:
    """Register ParaOrch-v0 and ParaOrchText-v0 once (idempotent)."""
    if "ParaOrch-v0" in gym.registry:
        return
    gym.register(
        id="ParaOrch-v0",
        entry_point="envs.paraorch:ParaOrchEnv",
        vector_entry_point="envs.paraorch_vector:ParaOrchVectorEnv",
        max_episode_steps=None,
        kwargs=VectorKwargsDict(),
    )
    gym.register(
        id="ParaOrchText-v0",
        entry_point="envs.paraorch_text:ParaOrchTextEnv",
    )
