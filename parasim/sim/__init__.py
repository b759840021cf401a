"""The batched, compiled simulator of orchestration episodes.

``Simulator`` owns the preallocated arrays of N lanes and calls the compiled kernels; both
``ParaOrch-v0`` (N = 1) and its vector env (N lanes) run on it, which is why a single env seeded
with ``s + i`` and lane ``i`` of a vector env seeded with ``s`` produce identical trajectories.
Single calls with the same per-call model, for calibration logs and statistics, come from
``parasim.calibration.simulate.simulated_calls``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from parasim.config.env_options import (
    LANE_LIMIT,
    check_bool,
    check_episode_options,
    check_int,
    check_task_option_mode,
)
from parasim.pools.harness import with_harness
from parasim.pools.pool import PoolSpec, load_pool
from parasim.protocol.schema import Status
from parasim.sim.gather import trajectory_fields
from parasim.sim.kernel import (
    C_ANSWER,
    C_COST,
    C_KIND,
    C_LAT,
    C_TOK_IN,
    C_TOK_OUT,
    C_USD,
    F_COST,
    F_LAT,
    F_OUTCOME,
    F_TOKENS,
    F_USD,
    I_ANSWER,
    I_BENCH,
    I_CALLS,
    I_EPISODE,
    I_FINAL,
    I_FMT,
    I_ROUND,
    I_ROW,
    NO_CALL,
    NUM_TARGETS,
    OUT_ANSWER,
    OUT_CONFIRM,
    OUT_FLAG,
    TARGET_CARRY,
    TARGET_QUESTION,
    TARGET_VERIFY,
    TASK_KEYED,
    TASK_ROW,
)
from parasim.sim.rng import seed_state
from parasim.sim.state import (
    EpisodeTools,
    ObsBuffers,
    SimState,
    action_nvec,
    allocate_lanes,
    allocate_obs,
    episode_tools,
    lane_views,
)
from parasim.sim.step import reset_lanes, step_lanes, step_lanes_parallel
from parasim.sim.tables import (
    E_MAX_ROUNDS,
    E_SERIAL,
    E_SLOTS,
    E_TOKEN_BUDGET,
    NUM_ENV_PARAMS,
    SimTables,
    build_tables,
    kernel_params,
)
from parasim.sim.task_options import option_stream, preference_fields, set_lane_options
from parasim.tasks.suites import TaskSuite, load_suite

PARALLEL_MIN_LANES = 1024

__all__ = ["NUM_TARGETS", "TARGET_CARRY", "TARGET_QUESTION", "TARGET_VERIFY", "ObsBuffers", "SimState", "SimTables",
           "Simulator", "action_nvec", "build_tables"]


class Simulator:
    """N lanes of episodes on one pool and task suite, stepped by one compiled call.

    ``task_options``: None, or "random" to draw each episode's tool subset, tool prices and preference vector
    (``parasim.sim.task_options``); ``reset`` also takes them per lane, and ``episode_tools`` shows them."""

    def __init__(self, pool: str | PoolSpec = "paramanager", suite: str | TaskSuite = "paramanager",
                 num_lanes: int = 1, *, max_rounds: int = 12, max_parallel: int = 4, serial: bool = False,
                 token_budget: float | None = None, threads: bool = False,
                 harness: dict[str, Any] | None = None, task_options: str | None = None) -> None:
        max_rounds, max_parallel, serial, token_budget = check_episode_options(max_rounds, max_parallel, serial,
                                                                               token_budget)
        num_lanes = check_int("num_lanes", num_lanes, 1, LANE_LIMIT)
        threads = check_bool("threads", threads)  # threads=1 was taken as True where serial=1 is refused
        opts_mode = check_task_option_mode(task_options)
        self.pool = with_harness(load_pool(pool), harness)  # the generation cap and sampling setting of the env
        self.suite = load_suite(suite)
        self.num_lanes = int(num_lanes)
        self.slots = int(max_parallel)
        self.tables = build_tables(self.pool, self.suite)
        # the lanes' state records (``lane_dtype(T)``) and per-slot arrays; ``state`` shows them as one array per
        # field
        self.num_tools = self.pool.tools.num_tools
        self._lanes = allocate_lanes(self.num_lanes, self.slots, self.num_tools)
        self.state = lane_views(self._lanes, self.pool.num_models)
        self.obs = allocate_obs(self.num_lanes, self.slots, self.pool.num_models, self.pool.tools)
        self._obs_items = tuple(self.obs._asdict().items())
        self.env = np.zeros(NUM_ENV_PARAMS)
        self.env[E_MAX_ROUNDS], self.env[E_SLOTS] = max_rounds, max_parallel
        self.env[E_SERIAL] = float(bool(serial))
        self.env[E_TOKEN_BUDGET] = np.inf if token_budget is None else float(token_budget)
        self.env.flags.writeable = False  # the kernels read a copy in their parameter record (``kernel_params``)
        self.nvec = action_nvec(self.slots, self.pool.num_models, self.num_tools)
        self.done = np.zeros(self.num_lanes, np.uint8)
        self._action_shape = (self.num_lanes, len(self.nvec))
        # the kernels' trailing arguments, built once: the arrays are allocated here and only ever written in
        # place, and re-unpacking named tuples per step was a visible share of a one-lane step
        params, rows = kernel_params(self.tables, self.env, self.slots)
        params[0]["task_opts"] = opts_mode  # "random": every episode draws its task options (docs/task_options.md)
        self.params = params  # the kernels' parameter record (read-only by convention: they read it every step)
        self._kernel_args = (*self._lanes, rows, self.tables.row_cdf, params, *self.obs)
        self._all_lanes = np.ones(self.num_lanes, np.uint8)
        # threads (results identical) pay off only with enough lanes and idle cores; opt-in, since sweeps
        # that already run one process per core would oversubscribe them
        self._step = step_lanes_parallel if threads and self.num_lanes >= PARALLEL_MIN_LANES else step_lanes

    def seed(self, seeds: np.ndarray | list[int], lanes: np.ndarray | None = None) -> None:
        """Start the random streams of each lane (all lanes, or ``lanes``) from its seed: its calls' and its drawn task
        options' (``task_options="random"``); episodes count from 1."""
        idx = np.arange(self.num_lanes) if lanes is None else np.asarray(lanes)
        records = self._lanes.lanes
        for i, s in zip(idx, seeds, strict=False):
            self.state.rng[i] = seed_state(int(s))
            records["opt_rng"][i] = option_stream(int(s))
            self.state.st_i[i, I_EPISODE] = 0

    @property
    def lane_records(self) -> np.ndarray:
        """The lane records (``lane_dtype(T)[num_lanes]``, written in place by every kernel call): what
        ``parasim.sim.gather.trajectory_fields`` reads."""
        return self._lanes.lanes

    @property
    def num_tasks(self) -> int:
        """Rows of the task suite: the valid task indices are ``0 .. num_tasks - 1``."""
        return len(self.suite)

    def task_weights(self) -> np.ndarray:
        """Each task's probability when a lane draws its task by the suite's weights (float64[num_tasks])."""
        return np.diff(self.suite.weight_cdf, prepend=0.0)

    def tasks(self, lanes: Any = slice(None)) -> dict[str, np.ndarray]:
        """The current episodes' task index (suite row) and benchmark (index into
        ``parasim.tasks.suites.BENCHMARKS``)."""
        st_i = self.state.st_i
        return {"task_index": st_i[lanes, I_ROW].copy(), "benchmark": st_i[lanes, I_BENCH].copy()}

    def reset(self, mask: np.ndarray | None = None, task_index: np.ndarray | None = None,
              task_seeds: np.ndarray | None = None, preference: np.ndarray | None = None,
              tools_available: np.ndarray | None = None, tool_prices: np.ndarray | None = None) -> None:
        """Draw new tasks for the lanes in ``mask`` (all lanes by default).

        ``task_index`` (int[N], suite rows) fixes each reset lane's task; None draws it
        by the suite's weights. ``task_seeds`` (int[N]) starts a task stream per lane for the task's own draws
        (the row when not fixed, a drawn difficulty, the preferred wrong answers), so lanes with equal entries
        play the identical task while their tool calls still draw from their own streams; None takes them from
        the lane's stream. Entries of lanes outside ``mask`` are ignored; both apply to this reset only (later
        resets, autoresets included, draw by weight from the lane's stream).

        ``preference`` (float64[N, T + 3]), ``tools_available`` (bool[N, T]) and ``tool_prices`` (float64[N, T], USD
        per call, NaN: the pool's figure) are the episodes' task options (``parasim.sim.task_options``; validated by
        ``parasim.config.env_options.check_task_options``), for this reset only like the task; each None leaves that
        option to the simulator's ``task_options`` (drawn with "random", else none).
        """
        m = self._all_lanes if mask is None else np.asarray(mask, np.uint8)
        task = self.state.task
        if task_index is not None:
            rows = np.asarray(task_index)
            if rows.shape != (self.num_lanes,) or rows.dtype.kind not in "iu" or not (
                    (rows >= 0) & (rows < self.num_tasks) | (m == 0)).all():
                raise ValueError(f"task_index: expected {self.num_lanes} integers in [0, {self.num_tasks}) (lanes "
                                 f"outside the mask ignored), got {task_index!r}")
            task[:, TASK_ROW] = np.where(m != 0, rows, -1)
        if task_seeds is not None:
            if np.shape(task_seeds) != (self.num_lanes,):
                raise ValueError(f"task_seeds: expected {self.num_lanes} integers, got shape {np.shape(task_seeds)}")
            task[:, TASK_KEYED] = 1
            for i in np.flatnonzero(m):
                self.state.task_rng[i] = seed_state(int(task_seeds[i]))
        if preference is not None or tools_available is not None or tool_prices is not None:
            t = self.num_tools
            for name, value, width in (("preference", preference, t + 3), ("tools_available", tools_available, t),
                                       ("tool_prices", tool_prices, t)):
                if value is not None and np.shape(value) != (self.num_lanes, width):
                    raise ValueError(f"{name}: expected shape ({self.num_lanes}, {width}), got {np.shape(value)} "
                                     "(parasim.config.env_options.check_task_options builds it from a reset option)")
            set_lane_options(self._lanes.lanes, self.params, np.flatnonzero(m), preference, tools_available,
                             tool_prices)
        reset_lanes(m, *self._kernel_args)
        task[:, TASK_ROW], task[:, TASK_KEYED] = -1, 0
        self.done[m != 0] = 0

    def step(self, actions: np.ndarray, reset_first: np.ndarray) -> np.ndarray:
        """Step all lanes (``actions`` int64[N, D]); lanes flagged in ``reset_first`` reset instead.

        Inputs are made C-contiguous int64 / uint8 first: any other layout or dtype would make numba
        compile (and cache) another specialization of the kernel.
        """
        actions = np.ascontiguousarray(actions, dtype=np.int64)
        reset_first = np.ascontiguousarray(reset_first, dtype=np.uint8)
        if actions.shape != self._action_shape or reset_first.shape != self.done.shape:
            raise ValueError(f"Simulator.step: expected actions of shape {self._action_shape} and reset_first of "
                             f"shape {self.done.shape}, got {actions.shape} and {reset_first.shape}")
        self._step(actions, reset_first, self.done, *self._kernel_args)
        return self.done

    def observation(self, lanes: Any = slice(None)) -> dict[str, np.ndarray]:
        """Copies of the observation arrays of ``lanes``."""
        return {k: v[lanes].copy() for k, v in self._obs_items}

    def trajectory(self, lanes: Any = slice(None)) -> dict[str, np.ndarray]:
        """The TrajectoryBatch fields of the episodes in ``lanes`` (as they stand)."""
        if isinstance(lanes, np.ndarray) and lanes.ndim == 1 and lanes.dtype.kind in "iu":  # the envs' case
            return trajectory_fields(np.ascontiguousarray(lanes, np.int64), self._lanes.lanes)
        st_i, st_f, counts_t = self.state.st_i[lanes], self.state.st_f[lanes], self.state.counts_t[lanes]
        return {
            "outcome": st_f[..., F_OUTCOME].copy(), "format_violations": st_i[..., I_FMT].astype(np.int32),
            "ended_with_final": st_i[..., I_FINAL].astype(np.uint8), "rounds": st_i[..., I_ROUND].astype(np.int32),
            "tool_calls": st_i[..., I_CALLS].astype(np.int32),
            "distinct_tools": (counts_t > 0).sum(-1).astype(np.int32), "tool_counts": counts_t.copy(),
            "tokens": st_f[..., F_TOKENS].copy(), "cost_units": st_f[..., F_COST].copy(),
            "usd": st_f[..., F_USD].copy(), "latency_s": st_f[..., F_LAT].copy(),
            "group_id": st_i[..., I_EPISODE].copy(),  # the lane's episode number since it was seeded
            **preference_fields(self._lanes.lanes["preference"][lanes]),
            "role_id": np.zeros(np.shape(st_i[..., 0]), np.int32),
        }

    def episode_tools(self, lanes: Any = slice(None)) -> EpisodeTools:
        """The current episodes' task options per lane (copies): the tools each offers (``available`` bool[n, T]),
        their USD per call (``price_usd`` float64[n, T], NaN: the pool's figure) and the preference vector
        (``preference`` float64[n, T + 3], NaN: none), for a manager's prompt or observation (docs/task_options.md)."""
        return episode_tools(np.atleast_1d(self._lanes.lanes[lanes]), self.num_tools)

    def last_round(self, lane: int = 0) -> list[dict[str, Any]]:
        """Per-call results of the lane's last round, one dict per slot that held a call (slot order).

        ``kind`` is "answer" (``answer`` is an answer id, 0 = gold), "flag" / "confirm" (a review of the
        leading answer ``answer``) or None (the call failed or was malformed: see ``status``).
        """
        kinds = {OUT_ANSWER: "answer", OUT_FLAG: "flag", OUT_CONFIRM: "confirm"}
        out = []
        for k, status in enumerate(self.state.last_status[lane]):
            if status == NO_CALL:
                continue
            ci, cf = self.state.call_i[lane, k], self.state.call_f[lane, k]
            out.append({"slot": k, "status": Status(int(status)), "kind": kinds.get(int(ci[C_KIND])),
                        "answer": int(ci[C_ANSWER]), "tokens_in": float(cf[C_TOK_IN]),
                        "tokens_out": float(cf[C_TOK_OUT]), "latency_s": float(cf[C_LAT]), "usd": float(cf[C_USD]),
                        "cost_units": float(cf[C_COST])})
        return out

    def final_answers(self) -> np.ndarray:
        """The termination model's answer id per lane (-1 while running; 0 is the gold answer)."""
        return self.state.st_i[:, I_ANSWER].copy()
