"""The batched, compiled simulator of orchestration episodes.

``Simulator`` owns the preallocated arrays of N lanes and calls the compiled kernels; both
``ParaOrch-v0`` (N = 1) and its vector env (N lanes) run on it, which is why a single env seeded
with ``s + i`` and lane ``i`` of a vector env seeded with ``s`` produce identical trajectories.
Single calls with the same per-call model, for calibration logs and statistics, come from
``parasim.calibration.simulate.simulated_calls``.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numba
import numpy as np

from parasim.config.env_options import (
    LANE_LIMIT,
    check_episode_options,
    check_int,
    check_task_option_mode,
)
from parasim.pools.harness import with_harness
from parasim.pools.pool import PoolSpec, load_pool
from parasim.sim.gather import lane_selection_fields, trajectory_fields
from parasim.sim.kernel import (
    I_ANSWER,
    I_BENCH,
    I_EPISODE,
    I_ROW,
    NUM_TARGETS,
    TARGET_CARRY,
    TARGET_QUESTION,
    TARGET_VERIFY,
    TASK_KEYED,
    TASK_ROW,
)
from parasim.sim.rng import seed_states
from parasim.sim.state import (
    EpisodeTools,
    ObsBuffers,
    SimState,
    action_nvec,
    allocate_lanes,
    allocate_obs,
    episode_tools,
    lane_views,
    slot_records,
)
from parasim.sim.step import cut_lanes, reset_lanes, step_lanes, step_lanes_parallel
from parasim.sim.tables import (
    SimTables,
    build_tables,
    episode_params,
    kernel_params,
)
from parasim.sim.task_options import OPT_TAG, set_lane_options
from parasim.tasks.suites import TaskSuite, load_suite

PARALLEL_MIN_LANES = 1024

__all__ = ["NUM_TARGETS", "TARGET_CARRY", "TARGET_QUESTION", "TARGET_VERIFY", "ObsBuffers", "SimState", "SimTables",
           "Simulator", "action_nvec", "build_tables"]


@contextmanager
def numba_threads(n: int) -> Iterator[None]:
    """numba's parallel regions on ``n`` threads for the calls inside, restored after: numba's thread count is per
    calling thread, so a threaded call sets it for itself only (the vector env's step, its benchmarks)."""
    before = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(before)


class Simulator:
    """N lanes of episodes on one pool and task suite, stepped by one compiled call.

    ``task_options``: None, or "random" to draw each episode's tool subset, tool prices and preference vector
    (``parasim.sim.task_options``); ``reset`` also takes them per lane, and ``episode_tools`` shows them."""

    def __init__(self, pool: str | PoolSpec = "paramanager", suite: str | TaskSuite = "paramanager",
                 num_lanes: int = 1, *, max_rounds: int = 12, max_parallel: int = 4, serial: bool = False,
                 token_budget: float | None = None, num_threads: int = 1,
                 harness: dict[str, Any] | None = None, task_options: str | None = None) -> None:
        max_rounds, max_parallel, serial, token_budget = check_episode_options(max_rounds, max_parallel, serial,
                                                                               token_budget)
        num_lanes = check_int("num_lanes", num_lanes, 1, LANE_LIMIT)
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
        self.env = episode_params(max_rounds, serial, token_budget)
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
        self.num_threads = check_int("num_threads", num_threads, 1, numba.config.NUMBA_NUM_THREADS)
        self._threaded = self.num_threads > 1 and self.num_lanes >= PARALLEL_MIN_LANES

    def seed(self, seeds: np.ndarray | list[int], lanes: np.ndarray | None = None) -> None:
        """Start the random streams of each lane (all lanes, or ``lanes``) from its seed: its calls' and its drawn task
        options' (``task_options="random"``); episodes count from 1."""
        idx = np.arange(self.num_lanes) if lanes is None else np.asarray(lanes)
        n = min(len(idx), len(seeds))
        idx = idx[:n]
        states = seed_states(seeds[:n])
        self.state.rng[idx] = states
        self._lanes.lanes["opt_rng"][idx] = states ^ np.uint64(OPT_TAG)  # ``option_stream`` of each seed
        self.state.st_i[idx, I_EPISODE] = 0

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
            reset = np.flatnonzero(m)
            self.state.task_rng[reset] = seed_states(np.asarray(task_seeds)[reset])
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
        if self._threaded:
            with numba_threads(self.num_threads):  # lane blocks split over them
                step_lanes_parallel(actions, reset_first, self.done, *self._kernel_args)
        else:
            step_lanes(actions, reset_first, self.done, *self._kernel_args)
        return self.done

    def cut(self, mask: np.ndarray) -> np.ndarray:
        """End the running episodes of the lanes in ``mask`` (uint8[N]) now, as episodes that never answered
        (``parasim.sim.step.cut_lanes``); returns ``done``."""
        mask = np.ascontiguousarray(mask, dtype=np.uint8)
        if mask.shape != self.done.shape:
            raise ValueError(f"Simulator.cut: expected a mask of shape {self.done.shape}, got {mask.shape}")
        cut_lanes(mask, self.done, *self._kernel_args)
        return self.done

    def observation(self, lanes: Any = slice(None)) -> dict[str, np.ndarray]:
        """Copies of the observation arrays of ``lanes``."""
        return {k: v[lanes].copy() for k, v in self._obs_items}

    def trajectory(self, lanes: Any = slice(None)) -> dict[str, np.ndarray]:
        """The TrajectoryBatch fields of the episodes in ``lanes`` (as they stand; any NumPy selection of lanes), read
        by the one compiled gather the envs use (``parasim.sim.gather``)."""
        if isinstance(lanes, np.ndarray) and lanes.ndim == 1 and lanes.dtype.kind in "iu":  # the envs' case
            return trajectory_fields(np.ascontiguousarray(lanes, np.int64), self._lanes.lanes)
        return lane_selection_fields(lanes, self.num_lanes, self._lanes.lanes)

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
        return slot_records(self.state.last_status, self.state.call_i, self.state.call_f, lane)

    def final_answers(self) -> np.ndarray:
        """The termination model's answer id per lane (-1 while running; 0 is the gold answer)."""
        return self.state.st_i[:, I_ANSWER].copy()
