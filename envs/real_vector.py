"""Real-tools ParaOrch-v0 lanes stepped concurrently: one episode per lane, as trainers and evaluations collect them.

``RealVectorEnv`` holds one ``ParaOrchEnv(tools="real")`` per lane, each over its own ``RealEpisodeEngine``, all
engines over one ``RealToolBackend``. Its interface is the compiled vector env's where collection reads it
(``training.rollout.collect_blocks``): ``reset(seed=[...], options={"task_index": int[N], "task_seed": int[N]})``,
``step(actions[N, D])``, ``num_tasks``, ``task_weights()``, ``model_names``, ``descriptors``, and a terminal step's info
with ``reward_components``, ``trajectory``, ``task_index`` and ``benchmark`` per finished lane (``_key`` masks). So a
policy trained on the simulator is evaluated on real tools by the same code that evaluated it in simulation.

Why not Gymnasium's ``SyncVectorEnv``: it steps its envs one after another, and a real round waits on model servers,
so N lanes would take N rounds' time; here every live lane's step runs in a thread of its own, and the backend's
event loop sends all their calls at once (its per-endpoint limits still hold). And its autoreset plays a finished lane
again, which with real tools means calls that cost and that enter the call log as episodes nobody reads: here a
finished lane is frozen until the next ``reset`` (its action ignored, reward 0, terminated and truncated False, its
observation the terminal one), which is Gymnasium's ``AutoresetMode.DISABLED``.

Lanes are independent: lane ``i`` reset with seed ``s_i`` and options ``o_i`` plays what a single env reset that way
plays, whatever the other lanes do (each engine's sampling seeds come from its own episode seed).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from envs.paraorch import ParaOrchEnv

TERMINAL_KEYS = ("reward_components", "trajectory")  # per-episode dicts of a terminal step's info
TERMINAL_SCALARS = ("task_index", "benchmark", "correct")  # per-episode numbers of a terminal step's info


class RealVectorEnv(VectorEnv):
    """N real-tools ParaOrch-v0 envs whose live lanes step at once (see the module docstring)."""

    metadata = {"autoreset_mode": AutoresetMode.DISABLED}

    def __init__(self, envs: Sequence[ParaOrchEnv], max_workers: int | None = None,
                 on_episodes: Callable[[int], None] | None = None) -> None:
        if not envs:
            raise ValueError("envs: expected at least one ParaOrch-v0 env with tools='real'")
        for i, env in enumerate(envs):
            if not isinstance(env, ParaOrchEnv) or env.tools != "real":
                raise ValueError(f"envs[{i}]: expected a ParaOrchEnv with tools='real', got {env!r}")
            if env.model_names != envs[0].model_names or env.action_space != envs[0].action_space:
                raise ValueError(f"envs[{i}]: its models {env.model_names} / action space {env.action_space} differ "
                                 f"from envs[0]'s {envs[0].model_names} / {envs[0].action_space}")
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.single_observation_space: spaces.Dict = self.envs[0].observation_space
        self.single_action_space: spaces.MultiDiscrete = self.envs[0].action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.autoreset_mode = AutoresetMode.DISABLED
        self._pool = ThreadPoolExecutor(max_workers=max_workers or self.num_envs, thread_name_prefix="real-lane")
        self._live = np.zeros(self.num_envs, bool)
        self._obs: list[dict[str, np.ndarray]] = [{} for _ in self.envs]
        self.on_episodes = on_episodes  # told how many episodes each step finished (a progress bar's update)

    @classmethod
    def from_engines(cls, engines: Sequence[Any], max_workers: int | None = None,
                     on_episodes: Callable[[int], None] | None = None, **env_kwargs: Any) -> RealVectorEnv:
        """One ``ParaOrchEnv(tools="real", engine=e, **env_kwargs)`` per engine (engines usually share a backend)."""
        return cls([ParaOrchEnv(tools="real", engine=e, **env_kwargs) for e in engines], max_workers, on_episodes)

    @property
    def model_names(self) -> tuple[str, ...]:
        return self.envs[0].model_names

    @property
    def num_tasks(self) -> int:
        return self.envs[0].source.num_tasks

    def task_weights(self) -> np.ndarray:
        return self.envs[0].task_weights()

    @property
    def descriptors(self) -> Any:
        return self.envs[0].descriptors

    def reset(self, *, seed: int | Sequence[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset every lane: ``seed`` an int (lane ``i`` gets ``seed + i``) or one per lane; array entries of
        ``options`` give lane ``i`` its ``[i]``, other entries go to every lane."""
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds = [None if seed is None else int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = [int(s) for s in seed]
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed: expected {self.num_envs} seeds (one per lane), got {len(seeds)}")
        per_lane = [{} for _ in range(self.num_envs)]
        for key, value in (options or {}).items():
            if isinstance(value, np.ndarray) or isinstance(value, (list, tuple)):
                if len(value) != self.num_envs:
                    raise ValueError(f"options[{key!r}]: expected {self.num_envs} entries (one per lane), got "
                                     f"{len(value)}")
                for i in range(self.num_envs):
                    per_lane[i][key] = value[i]
            else:
                for opts in per_lane:
                    opts[key] = value
        for i, env in enumerate(self.envs):
            self._obs[i], _ = env.reset(seed=seeds[i], options=per_lane[i])
        self._live[:] = True
        return self._batch(), {}

    def step(self, actions: Any) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = np.asarray(actions)
        if a.shape != (self.num_envs, len(self.single_action_space.nvec)) or a.dtype.kind not in "iu":
            raise ValueError(f"actions: expected an integer array of shape "
                             f"{(self.num_envs, len(self.single_action_space.nvec))}, got dtype {a.dtype} shape "
                             f"{a.shape}")
        live = np.flatnonzero(self._live)
        steps: list[Callable[[], Any]] = [lambda i=i: self.envs[i].step(a[i]) for i in live]
        results = list(self._pool.map(lambda f: f(), steps))  # an exception in a lane surfaces here
        rewards = np.zeros(self.num_envs)
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        finished: dict[int, dict[str, Any]] = {}
        for i, (obs, reward, term, trunc, info) in zip(live, results):
            self._obs[i] = obs
            rewards[i], terminated[i], truncated[i] = reward, term, trunc
            if term or trunc:
                self._live[i] = False
                finished[int(i)] = info
        if finished and self.on_episodes is not None:
            self.on_episodes(len(finished))
        return self._batch(), rewards, terminated, truncated, self._terminal_info(finished)

    def _batch(self) -> dict[str, np.ndarray]:
        return {k: np.stack([o[k] for o in self._obs]) for k in self._obs[0]}

    def _terminal_info(self, finished: dict[int, dict[str, Any]]) -> dict[str, Any]:
        """The finished lanes' terminal infos as arrays over all lanes (zeros elsewhere), each with its ``_key``
        mask, as the compiled vector env gives them."""
        if not finished:
            return {}
        mask = np.zeros(self.num_envs, bool)
        mask[list(finished)] = True
        first = next(iter(finished.values()))
        info: dict[str, Any] = {}
        for key in TERMINAL_KEYS:
            fields = {}
            for name, value in first[key].items():
                column = np.zeros((self.num_envs, *np.shape(value)), np.asarray(value).dtype)
                for i, lane_info in finished.items():
                    column[i] = lane_info[key][name]
                fields[name] = column
            info[key], info[f"_{key}"] = fields, mask.copy()
        for key in TERMINAL_SCALARS:
            column = np.zeros(self.num_envs, np.asarray(first[key]).dtype)
            for i, lane_info in finished.items():
                column[i] = lane_info[key]
            info[key], info[f"_{key}"] = column, mask.copy()
        return info

    def close_extras(self, **kwargs: Any) -> None:
        self._pool.shutdown(wait=True)
        for env in self.envs:
            env.close()
