"""ParaOrch-v0 as a batched VectorEnv: every lane stepped by one compiled call.

Created by ``gym.make_vec("ParaOrch-v0", num_envs=N)`` (the registration's ``vector_entry_point``).
Observation, action and reward are those of ``ParaOrchEnv`` (see ``envs.paraorch``), batched.

Seeding contract: ``reset(seed=s)`` starts lane ``i`` from seed ``s + i`` (a list of seeds gives each
lane its own), exactly as ``SyncVectorEnv`` seeds its sub-envs; each lane has its own random stream, and
autoresets continue it. So lane ``i`` replays ``ParaOrchEnv`` reset with seed ``s + i`` step for step,
and this env is trajectory-for-trajectory equal to ``SyncVectorEnv`` over ``gym.make("ParaOrch-v0")``.

Autoreset (``autoreset_mode``): NEXT_STEP (default) resets a finished lane on the following step (its action is ignored,
reward 0, not terminated); SAME_STEP resets it in the step where it finished and puts the terminal observation and info
in ``info["final_obs"]`` / ``info["final_info"]``. ``num_threads=n`` steps blocks of lanes on ``n`` of numba's threads
(from 1,024 lanes; bit-identical to one thread: each lane has its own record and random stream), worth it only when
cores are idle: a sweep's workers already take a core each (``training.rollout.env_threads``).
``reset(options={"reset_mask": bool[N]})`` resets only the masked lanes (the others keep running and return their
current observation). Infos follow Gymnasium's vector convention (``_key`` masks); a terminal step's info holds
``reward_components``, ``trajectory``, ``task_index`` and ``benchmark`` per finished lane (see ``ParaOrchEnv``).

Task assignment (GRPO groups): ``reset(options={"task_index": int[N], "task_seed": int[N]})``, either or both,
gives lane ``i`` the single env's options ``task_index[i]`` / ``task_seed[i]`` (see ``ParaOrchEnv``): lanes with
equal entries play the identical task, each with its own tool randomness from its own stream (lane ``i`` still
replays the single env reset with seed ``s + i`` and the same options). With ``reset_mask`` only the masked lanes
take their entries. The options apply to this reset's episodes only: autoresets draw tasks by the suite's
weights, exactly as ``SyncVectorEnv``'s autoresets call the single env's ``reset()`` without options, which keeps
this env equal to it; a GRPO collection plays one episode per lane and resets with new options per batch.
``num_tasks`` and ``task_weights()`` give the valid indices and the weights the env itself samples them with.

Render and masks: with ``render_mode`` ``"ansi"`` or ``"rgb_array"``, ``render()`` returns a tuple with each lane's
board (``envs.render``), as Gymnasium's vector envs return one frame per sub-env; the lanes' calls are
recorded only then (a Python loop over the lanes per step: for watching a few lanes, not for training at scale).
``action_masks()`` returns every lane's ``action_mask`` as bool[N, sum(nvec)]. ``action_encoding="joint"`` (see
``ParaOrchEnv``, ``parasim.sim.joint_actions``) takes joint action rows [N, K] and shows each lane's joint mask,
computed by the compiled rule over all lanes in one call.

Descriptors: ``descriptors=True`` adds ``models`` [N, M, F_m] and ``tools`` [N, T, F_t]
(``parasim.pools.descriptors``): one read-only broadcast of the pool's rows over the lanes, the same arrays every
step, so they cost no copy per step at any number of lanes (read-only, so no caller can change what another step
holds); ``descriptors`` (the attribute) holds the rows whether or not the observation carries them.

Router signal: ``router_signal`` (as ``ParaOrchEnv``'s) adds ``router`` float32[N, M], each lane's per-model signal
of its task's per-model effects (``parasim.sim.router_signal``), computed from the lane records every step.
"""
from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from envs.call_source import RESET_OPTIONS, reset_task
from envs.paraorch import (
    make_simulator,
    observation_space,
    resolve_reward,
    sim_ending,
    terminal_info,
)
from envs.render import (
    Board,
    SimRound,
    check_render_mode,
    new_history,
    render_board,
    sim_round,
)
from envs.render_modes import RENDER_FPS, RENDER_MODES
from parasim.config.env_options import (
    LANE_LIMIT,
    check_bool,
    check_int,
    check_lane_seeds,
    check_option_keys,
    check_seed,
)
from parasim.pools.descriptors import episode_tool_rows, pool_descriptors
from parasim.sim.joint_actions import JointEncoding, check_action_encoding
from parasim.sim.router_signal import ROUTER_KEY, RouterSetting, router_setting


def _masked(values: dict[str, np.ndarray], lanes: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Per-lane values of the ``lanes`` scattered into [n]-arrays with their ``_key`` masks."""
    out: dict[str, np.ndarray] = {}
    mask = np.zeros(n, bool)
    mask[lanes] = True
    for k, v in values.items():
        full = np.zeros((n, *v.shape[1:]), v.dtype)
        full[lanes] = v
        out[k] = full
        out[f"_{k}"] = mask.copy()
    return out


class ParaOrchVectorEnv(VectorEnv):
    """N ParaOrch-v0 episodes on one compiled simulator."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}

    def __init__(self, num_envs: int = 1, pool: Any = "paramanager", suite: Any = "paramanager",
                 max_rounds: int = 12, max_parallel: int = 4, serial: bool = False, reward: Any = "paramanager",
                 tools: str = "sim", token_budget: float | None = None, seed: int | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, render_mode: str | None = None,
                 num_threads: int = 1, harness: dict[str, Any] | None = None, descriptors: bool = False,
                 task_options: str | None = None, action_encoding: str = "factored",
                 router_signal: Any = None) -> None:
        num_envs = check_int("num_envs", num_envs, 1, LANE_LIMIT)  # bools refused, as for every integer option
        self.render_mode = check_render_mode(render_mode)
        with_descriptors = check_bool("descriptors", descriptors)
        encoding = check_action_encoding(action_encoding)
        mode = AutoresetMode(autoreset_mode)
        if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode: expected NEXT_STEP or SAME_STEP, got {mode}")
        self.num_envs = int(num_envs)
        self.sim = make_simulator(tools, self.num_envs, pool=pool, suite=suite, max_rounds=max_rounds,
                                  max_parallel=max_parallel, serial=serial, token_budget=token_budget,
                                  num_threads=num_threads, harness=harness, task_options=task_options)
        self.reward_config = resolve_reward(reward)
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self.autoreset_mode = mode
        # the joint encoding's call table and masks (None: the factored layout), ``parasim.sim.joint_actions``
        self.joint = JointEncoding(self.sim.params) if encoding == "joint" else None
        # the router signal's setting (None: no ``router`` key), ``parasim.sim.router_signal``
        self.router: RouterSetting | None = router_setting(router_signal, self.sim, pool, suite, harness)
        self.single_observation_space = observation_space(self.sim, with_descriptors, self.joint,
                                                          self.router is not None)
        self.single_action_space = spaces.MultiDiscrete(self.sim.nvec if self.joint is None else self.joint.nvec)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.num_tasks = self.sim.num_tasks
        self.model_names: tuple[str, ...] = tuple(self.sim.pool.model_names[:-1])
        self.descriptors = pool_descriptors(self.sim.pool, self.sim.suite)
        # per-lane tool rows once episodes can have their own prices (drawn, or given at a reset): until then the
        # pool's rows, one broadcast every step
        self._episode_prices = task_options == "random"
        self._constant_obs: dict[str, np.ndarray] = {} if not with_descriptors else {
            k: np.broadcast_to(v, (self.num_envs, *v.shape))
            for k, v in (("models", self.descriptors.models), ("tools", self.descriptors.tools))}
        self._initial_seed = check_seed(seed)
        self._seeded = False
        self._autoreset = np.zeros(self.num_envs, np.uint8)
        self._no_reset = np.zeros(self.num_envs, np.uint8)
        # each lane's board records, kept only with a render mode
        self._histories: list[deque[SimRound]] | None = (
            None if render_mode is None else [new_history() for _ in range(self.num_envs)])
        self._endings: list[str | None] = [None] * self.num_envs

    def reset(self, *, seed: int | list[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict]:
        seeds = check_lane_seeds(seed, self.num_envs)
        options = check_option_keys(options, ("reset_mask", *RESET_OPTIONS), "ParaOrch-v0 (vector)")
        super().reset(seed=int(seeds[0]) if isinstance(seed, int | np.integer) else None)
        mask = np.ones(self.num_envs, bool)
        if "reset_mask" in options:
            mask = np.asarray(options["reset_mask"])
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
                raise ValueError(f"options['reset_mask']: expected a bool array of shape ({self.num_envs},), "
                                 f"got dtype {mask.dtype} shape {mask.shape}")
        task = reset_task(options, self.num_tasks, self.num_envs, self.sim.pool.tools.names)
        self._episode_prices = self._episode_prices or "tool_prices" in options
        if seeds is None and not self._seeded:
            first = self._initial_seed if self._initial_seed is not None else int(self.np_random.integers(2**62))
            seeds = np.arange(self.num_envs, dtype=np.int64) + first
        lanes = np.flatnonzero(mask)
        if seeds is not None:
            self.sim.seed(seeds[lanes], lanes)
            self._seeded = True
        self.sim.reset(mask.astype(np.uint8), *task)
        self._autoreset[mask] = 0
        self._clear_boards(lanes)
        return self._observation(), {}

    def step(self, actions: Any) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict]:
        a = np.asarray(actions)
        want = (self.num_envs, len(self.single_action_space.nvec))
        if a.shape != want or a.dtype.kind not in "iu":
            raise ValueError(f"actions: expected an integer array of shape {want}, got dtype {a.dtype} shape "
                             f"{a.shape}")
        if self.joint is not None:
            a = self.joint.decode(a)
        reset_first = self._autoreset.copy()
        done = self.sim.step(a, reset_first)
        if self._histories is not None:
            self._record_rounds(a, reset_first)
        terminated = done.astype(bool) & (reset_first == 0)
        rewards = np.zeros(self.num_envs)
        infos: dict[str, Any] = {}
        lanes = np.flatnonzero(terminated)
        if len(lanes):
            total, comps, traj = terminal_info(self.sim, lanes, self.reward_config)
            rewards[lanes] = total
            if self._histories is not None:
                answers = self.sim.final_answers()
                for j, i in enumerate(lanes):
                    self._endings[i] = sim_ending(traj, j, int(answers[i]), float(total[j]))
            final = {"reward_components": _masked(comps, lanes, self.num_envs),
                     "trajectory": _masked(traj, lanes, self.num_envs),
                     **_masked(self.sim.tasks(lanes), lanes, self.num_envs)}
            for key in ("reward_components", "trajectory"):
                final[f"_{key}"] = terminated.copy()
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                final_obs = np.full(self.num_envs, None, dtype=object)
                for i in lanes:
                    final_obs[i] = self._observation(i)
                self.sim.reset(terminated.astype(np.uint8))
                self._clear_boards(lanes)
                infos = {"final_obs": final_obs, "_final_obs": terminated.copy(), "final_info": final,
                         "_final_info": terminated.copy()}
            else:
                infos = final
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            self._autoreset = terminated.astype(np.uint8)
        return self._observation(), rewards, terminated, np.zeros(self.num_envs, bool), infos

    def _observation(self, lane: int | None = None) -> dict[str, np.ndarray]:
        """Every lane's observation (or lane ``lane``'s), the descriptor keys added when the env has them."""
        obs = self.sim.observation() if lane is None else self.sim.observation(lane)
        if self.router is not None:
            records = self.sim.lane_records
            obs[ROUTER_KEY] = self.router.signal(records if lane is None else records[lane:lane + 1])
            if lane is not None:
                obs[ROUTER_KEY] = obs[ROUTER_KEY][0]
        if self.joint is not None:
            records = self.sim.lane_records
            obs["action_mask"] = self.joint.masks(records if lane is None else records[lane:lane + 1])
            if lane is not None:
                obs["action_mask"] = obs["action_mask"][0]
        if self._constant_obs:
            obs.update({k: v if lane is None else v[lane] for k, v in self._constant_obs.items()})
            if self._episode_prices:  # episodes may have their own tool prices: the tool rows are per lane
                rows = slice(None) if lane is None else lane
                tools = episode_tool_rows(self.descriptors.tools, self.sim.episode_tools(rows).price_usd)
                obs["tools"] = tools if lane is None else tools[0]
        return obs

    def task_weights(self) -> np.ndarray:
        """Each task index's probability when the env draws tasks itself (float64[num_tasks], sums to 1)."""
        return self.sim.task_weights()

    def action_masks(self) -> np.ndarray:
        """Every lane's current ``action_mask`` as bool[N, sum(nvec)] (sb3-contrib's convention, batched)."""
        if self.joint is not None:
            return self.joint.masks(self.sim.lane_records).astype(bool)
        return self.sim.obs.action_mask.astype(bool)

    def render(self) -> tuple[str | np.ndarray, ...] | None:
        """Each lane's episode board in ``render_mode``; None, with a warning, without a render mode."""
        if self.render_mode is None:
            gym.logger.warn("ParaOrch-v0 (vector): render() without a render_mode; make the env with "
                            "render_mode='ansi' or 'rgb_array'")
            return None
        if not self._seeded:
            raise RuntimeError("ParaOrch-v0 (vector): call reset() before render()")
        return tuple(render_board(self._board(i), self.render_mode) for i in range(self.num_envs))

    def _board(self, lane: int) -> Board:
        """What lane ``lane``'s board shows of its current episode."""
        rounds = tuple(sim_round(*r, self.model_names, self.sim.pool.tools) for r in self._histories[lane])
        return Board("sim", self.sim.observation(lane), rounds, ending=self._endings[lane],
                     tool_spec=self.sim.pool.tools)

    def _record_rounds(self, actions: np.ndarray, reset_first: np.ndarray) -> None:
        """The boards' part of a step: lanes reset in it start empty, lanes that ran a round record its calls."""
        used = self.sim.obs.round[:, 0]
        for i in range(self.num_envs):
            if reset_first[i]:
                self._clear_boards([i])
            elif actions[i, 0] != 1:
                self._histories[i].append((int(used[i]), actions[i].copy(), self.sim.last_round(i)))

    def _clear_boards(self, lanes: Any) -> None:
        """Empty the boards of ``lanes``, whose new episodes just began (nothing without a render mode)."""
        if self._histories is None:
            return
        for i in lanes:
            self._histories[i].clear()
            self._endings[i] = None
