"""Stable-Baselines3 over the compiled vector env: ``ParaOrchSB3VecEnv``, an SB3 ``VecEnv`` of ParaOrch-v0 lanes.

``make_vec_env("ParaOrch-v0", n_envs=N)`` gives SB3 a ``DummyVecEnv`` of N single envs, each stepped from Python. This
class gives SB3 one ``ParaOrchVectorEnv`` instead (``envs.paraorch_vector``: every lane in one compiled call), with
SB3's conventions: ``step_async`` / ``step_wait``; a finished lane is reset in the step that finished it, its last
observation in ``infos[i]["terminal_observation"]`` beside its terminal info (``reward_components``, ``trajectory``,
``task_index``, ``benchmark``) and ``"TimeLimit.truncated"``; ``seed()`` and ``set_options()`` apply at the next
``reset()`` (lane ``i`` seeded ``seed + i``, as ``DummyVecEnv`` seeds its envs, so lane ``i`` plays the single env
seeded ``seed + i``); Dict observations of arrays [N, ...].

The lanes are not separate env objects: ``get_attr`` returns the vector env's attribute once per requested index,
``set_attr`` sets it for all lanes (a subset is refused: the lanes share it), ``env_method`` calls the per-lane
methods (``action_masks``, which sb3-contrib's ``get_action_masks`` calls through ``env_method``, and ``render``)
and returns each requested lane's result, and calls any other method of the vector env once, returning its result
per index; ``env_is_wrapped`` is False for every lane (no Gymnasium wrapper sits on a lane; wrap the whole env with
SB3's ``VecMonitor`` / ``VecNormalize``).

Observation scales (``OBSERVATION_SCALES``; docs/sb3.md): the bounded keys are already in [0, 1] or small integer
ranges; ``budget`` (tokens, cost units, USD, seconds), ``candidates`` (vote scores in log-odds, counts),
``evidence``, ``tool_counts`` and ``status_counts`` are counts and sums with no fixed bound, so normalize them:
``VecNormalize(venv, norm_obs_keys=list(NORMALIZE_KEYS), norm_reward=False)`` (the mask and ``last_status`` stay
as they are).
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

try:
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(f"parasim.integrations.sb3 needs stable-baselines3 (pip install stable-baselines3): "
                      f"{exc}") from exc
from gymnasium.vector import AutoresetMode

from envs.paraorch_vector import ParaOrchVectorEnv

# what each observation key holds and its range: the unbounded ones are those ``NORMALIZE_KEYS`` names
OBSERVATION_SCALES: dict[str, str] = {
    "task": "[0, 1], except question tokens / 1000 (about 0.05 to 2)",
    "round": "[0, max_rounds]: rounds used, rounds left",
    "budget": "unbounded: tokens used (10^3 to 10^5), cost units, USD, latency seconds",
    "candidates": "unbounded: present (0/1), vote score (log-odds, may be negative), support, flags, confirmations",
    "evidence": "unbounded counts: OK answers, distinct answers; fallback flag (0/1)",
    "tool_counts": "unbounded counts: calls per tool (at most max_rounds * K)",
    "status_counts": "unbounded counts: calls per status (at most max_rounds * K)",
    "last_status": "[0, S]: status per slot of the last round (S = no call)",
    "action_mask": "{0, 1}",
    "router": "standard normal per model (with router_signal only): a signal of the model's per-task effect",
}
NORMALIZE_KEYS = ("budget", "candidates", "evidence", "tool_counts", "status_counts", "round", "task")
_PER_LANE_METHODS = ("action_masks", "render")
_INT_OPTIONS = ("task_index", "task_seed")


class ParaOrchSB3VecEnv(VecEnv):
    """``num_envs`` ParaOrch-v0 lanes as one SB3 ``VecEnv`` (see the module docstring); ``env_options`` are the
    vector env's (``pool``, ``reward``, ``action_encoding``, ``render_mode``, ...), except ``autoreset_mode``: SB3
    resets a finished env within its step, so the lanes run SAME_STEP."""

    def __init__(self, num_envs: int = 1, seed: int | None = None, **env_options: Any) -> None:
        if "autoreset_mode" in env_options:
            raise ValueError("autoreset_mode: fixed to SAME_STEP, SB3's convention (a finished env is reset in the "
                             "step that finished it, its last observation in infos[i]['terminal_observation'])")
        self.venv = ParaOrchVectorEnv(num_envs, seed=seed, autoreset_mode=AutoresetMode.SAME_STEP, **env_options)
        self._actions: np.ndarray | None = None
        super().__init__(self.venv.num_envs, self.venv.single_observation_space, self.venv.single_action_space)

    def reset(self) -> VecEnvObs:
        seeds = self._seeds
        if any(s is None for s in seeds) and not all(s is None for s in seeds):
            raise ValueError(f"seed: every lane needs a seed or none does (the lanes reset together), got {seeds}")
        obs, _ = self.venv.reset(seed=None if seeds[0] is None else [int(s) for s in seeds],
                                 options=_lane_options(self._options))
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("step_wait: call step_async(actions) first")
        actions, self._actions = self._actions, None
        obs, rewards, terminated, truncated, info = self.venv.step(actions)
        infos: list[dict[str, Any]] = [{"TimeLimit.truncated": bool(truncated[i] and not terminated[i])}
                                       for i in range(self.num_envs)]
        if "final_obs" in info:
            lanes = np.flatnonzero(info["_final_obs"])
            for i, lane_info in zip(lanes, _lane_infos(info["final_info"], lanes), strict=True):
                infos[i].update(lane_info)
                infos[i]["terminal_observation"] = info["final_obs"][i]
        return obs, rewards.astype(np.float32), terminated | truncated, infos

    def close(self) -> None:
        self.venv.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(f"get_images: the render mode is {self.render_mode!r}; make the env with "
                          "render_mode='rgb_array' for images", stacklevel=2)
            return [None] * self.num_envs
        return list(self.venv.render())

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self.venv, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError(f"set_attr({attr_name!r}): the lanes share one compiled env, so an attribute is set for "
                             f"all {self.num_envs} lanes or none (indices=None)")
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        lanes = list(self._get_indices(indices))
        result = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        if method_name in _PER_LANE_METHODS:
            return [None if result is None else result[i] for i in lanes]
        return [result for _ in lanes]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]


def _lane_infos(final: dict[str, Any], lanes: np.ndarray) -> list[dict[str, Any]]:
    """Each of ``lanes``' terminal info from the vector env's batched ``final_info`` (its ``_key`` masks dropped)."""
    groups = {k: [(name, v) for name, v in value.items() if not name.startswith("_")]
              for k, value in final.items() if isinstance(value, dict)}
    scalars = [(k, v) for k, v in final.items() if not k.startswith("_") and not isinstance(v, dict)]
    return [{**{k: {name: v[i] for name, v in items} for k, items in groups.items()},
             **{k: int(v[i]) for k, v in scalars}} for i in lanes]


def _lane_options(options: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """SB3's per-env reset options (``set_options``: one dict per lane) as the vector env's: one value per lane for
    each key (the vector env checks them); every lane must give the same keys, since the lanes reset together."""
    options = list(options)
    keys = {frozenset(o) for o in options}
    if keys == {frozenset()}:
        return None
    if len(keys) != 1:
        raise ValueError(f"set_options: every lane must give the same option keys (the lanes reset together), got "
                         f"{sorted(sorted(k) for k in keys)}")
    return {k: np.asarray([o[k] for o in options]) if k in _INT_OPTIONS else [o[k] for o in options]
            for k in options[0]}
