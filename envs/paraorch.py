"""ParaOrch-v0: a manager orchestrating parallel tool calls, as a structured Gymnasium environment.

One episode is one task. Each step the manager either stops (``final_answer``) or
issues one round of up to K parallel calls; the simulated tools (``parasim.sim``) answer, the round's
latency is its slowest call (the sum in serial mode), and on stop or after ``max_rounds`` rounds the
termination model answers and the verifier scores it. The reward, paid on the terminal step, is
``parasim.compute_rewards`` of the episode's TrajectoryBatch row under a ``RewardConfig`` or preset.

Options (``gym.make("ParaOrch-v0", **options)``): ``pool`` (shipped name, JSON path or PoolSpec;
"paramanager"), ``suite`` (named suite, benchmark name, JSONL task file or TaskSuite; "paramanager"),
``max_rounds`` (12), ``max_parallel`` (K, 4), ``serial`` (False), ``reward`` (preset name or RewardConfig;
"paramanager"), ``token_budget`` (None: calls made once the trajectory holds this many tokens get
BUDGET_EXCEEDED), ``seed`` (None: seed used by the first ``reset()`` without a seed), ``tools`` ("sim" or "real"),
``engine`` (with ``tools="real"`` only: a ``parasim.real.engine.RealEpisodeEngine``; the episodes then run
on real tools with the same spaces, see ``parasim.envs.paraorch_real``).

Action, ``MultiDiscrete(nvec)`` with ``nvec = [2] + [NUM_TOOLS + 1, M, 3] * K`` (M = pool models):
  - ``a[0]``: stop flag, 1 = ``final_answer`` (the slots are then ignored), 0 = run a round.
  - slot k (``a[1 + 3k : 4 + 3k]``): tool (``Tool`` value 0..6; 7 = empty slot), model (pool model index;
    ignored by the basic tools python and search, which the manager runs itself), target (0 = the
    question, fresh context; 1 = carry the trajectory and its leading answer, which the call may copy;
    2 = verify the leading answer, critical_reviewer only, which must use it).
  Masked or out-of-range parts become call statuses, never exceptions: an unknown tool or model or a
  reviewer with nothing to review is INVALID_TOOL; a bad or inapplicable target is FORMAT_ERR; a round with
  no call, or a stop flag other than 0/1, is a format violation (counted in the trajectory's
  ``format_violations``). The per-dimension mask cannot express the one cross-dimension rule (the
  critical_reviewer takes target 2 and only it does), so a factorized policy should condition the target
  on the tool. An action of the wrong shape or a non-integer dtype raises ValueError (a caller bug, not
  model output).

Observation, a Dict of arrays (C = 4 candidates, S = 6 statuses):
  - ``task`` float32[8]: domain one-hot (math, science, knowledge, code), free-form flag, multiple-choice
    flag, answer options / 16 (1 for free-form), question tokens / 1000.
  - ``round`` float32[2]: rounds used, rounds left.
  - ``budget`` float32[4]: tokens (trajectory length), cost units, USD, latency seconds used so far.
  - ``candidates`` float32[C, 5]: candidate answers ranked by the termination model's score, each row
    (present, score, supporting calls, reviewer flags, reviewer confirmations); answer ids are hidden.
  - ``evidence`` float32[3]: OK answers so far, distinct answers, 1 if the termination model would fall
    back to the manager's own answer (no evidence yet).
  - ``tool_counts`` float32[7]: calls per tool so far; ``status_counts`` float32[6]: calls per status.
  - ``last_status`` int8[K]: status of each slot's call in the last round (6 = no call).
  - ``action_mask`` int8[sum(nvec)]: the per-dimension masks of the action, concatenated in ``nvec``
    order (stop 2, then per slot tool T+1, model M, target 3); 1 = allowed.

Reset options (``reset(options={...})``), for trainers that play one task several times (GRPO groups):
  - ``task_index`` (int in ``[0, num_tasks)``): play the suite's task at that index (row of the suite: a
    benchmark, whose items' difficulty is drawn, or a fixed task of a task file) instead of drawing one by the
    suite's weights.
  - ``task_seed`` (int >= 0): draw the task's own randomness (its row when ``task_index`` is absent, a drawn
    difficulty, the models' preferred wrong answers) from a stream started from this seed instead of the
    episode's stream, so equal ``task_index`` / ``task_seed`` give the identical task (same question features,
    same hidden difficulty) while the tool calls keep drawing from the env's own stream (seeded as usual).
  Like any reset option they apply to this reset's episode only (a later ``reset()`` without them draws by
  weight again, as Gymnasium's vector envs' autoresets do). ``env.unwrapped.num_tasks`` (the suite's rows) and
  ``env.unwrapped.task_weights()`` (their sampling probabilities) let trainers sample task indices as the env
  would; ``env.unwrapped.model_names`` names the action's model indices.

Render (``render_mode``, ``parasim.envs.render``): ``"ansi"`` returns the episode board as text (task, rounds
used and left, the calls of the last rounds with tool, model, target, status and result, the candidates, the
evidence, the budgets used), ``"rgb_array"`` the same board as a uint8[H, W, 3] image of a fixed size per env. The
env records the calls only with a render mode set. ``action_masks()`` returns the current ``action_mask`` as bool,
sb3-contrib's MaskablePPO convention; ``parasim.envs.action_masks.tuple_mask`` gives Gymnasium's per-dimension
masks for ``action_space.sample(mask=...)``.

Info: on the terminal step ``reward_components`` (every component of the reward result, including
``total``), ``trajectory`` (the TrajectoryBatch fields of the episode; ``group_id`` is the episode's
number since the env was seeded), ``task_index`` (the suite row played) and ``benchmark`` (its benchmark,
an index into ``parasim.tasks.BENCHMARKS``); empty otherwise.
"""
from __future__ import annotations

from collections import deque
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from parasim.env_options import check_option_keys, check_seed
from parasim.envs.render import (
    Board,
    SimRound,
    check_render_mode,
    ending_text,
    new_history,
    render_board,
    sim_round,
)
from parasim.envs.render_modes import RENDER_FPS, RENDER_MODES
from parasim.protocol.schema import NUM_STATUSES, NUM_TOOLS
from parasim.sim import Simulator
from parasim.sim.kernel import CAND_FEATURES, NUM_CANDIDATES
from parasim.sim.state import TASK_FEATURES

RESET_OPTIONS = ("task_index", "task_seed")  # the single env's reset options (the vector env adds reset_mask)

REAL_TOOLS_HINT = (
    "build the engine over an OpenAI-compatible endpoint per pool model, e.g. engine = "
    "parasim.real.engine.RealEpisodeEngine(parasim.real.backend.RealToolBackend.from_config('endpoints.yaml'), "
    "parasim.real.tasks.load_real_tasks('tasks.jsonl')), then gym.make('ParaOrch-v0', tools='real', engine=engine)")


def make_simulator(tools: str, num_lanes: int, *, pool: Any, suite: Any, max_rounds: int, max_parallel: int,
                   serial: bool, token_budget: float | None, threads: bool = False) -> Simulator:
    """The compiled simulator behind the structured envs (real tools run through ``paraorch_real`` instead)."""
    if tools == "real":
        raise ValueError("tools='real': the compiled simulator runs simulated tools only; real tools need one "
                         f"engine per env ({REAL_TOOLS_HINT}; several such envs vectorize with "
                         "gym.vector.AsyncVectorEnv)")
    if tools != "sim":
        raise ValueError(f"tools: expected 'sim' or 'real', got {tools!r}")
    return Simulator(pool, suite, num_lanes, max_rounds=max_rounds, max_parallel=max_parallel, serial=serial,
                     token_budget=token_budget, threads=threads)


def observation_space(sim: Simulator) -> spaces.Dict:
    """The single-episode Dict observation space of a simulator's envs (see the module docstring)."""
    return dict_observation_space(sim.slots, float(sim.env[0]), sim.nvec)


def dict_observation_space(slots: int, max_rounds: float, nvec: np.ndarray) -> spaces.Dict:
    """The Dict observation space for K = ``slots`` call slots, R rounds and the action sizes ``nvec``;
    the simulated and the real-tools env share it, so a policy trained on one runs on the other."""
    inf = np.inf
    f32 = np.float32
    task_high = np.array([1, 1, 1, 1, 1, 1, 1, inf], f32)
    return spaces.Dict({
        "task": spaces.Box(0, task_high, (TASK_FEATURES,), f32),
        "round": spaces.Box(0, max_rounds, (2,), f32),
        "budget": spaces.Box(0, inf, (4,), f32),
        "candidates": spaces.Box(-inf, inf, (NUM_CANDIDATES, CAND_FEATURES), f32),
        "evidence": spaces.Box(0, inf, (3,), f32),
        "tool_counts": spaces.Box(0, inf, (NUM_TOOLS,), f32),
        "status_counts": spaces.Box(0, inf, (NUM_STATUSES,), f32),
        "last_status": spaces.Box(0, NUM_STATUSES, (slots,), np.int8),
        "action_mask": spaces.Box(0, 1, (int(nvec.sum()),), np.int8),
    })


def check_action(action: Any, nvec: np.ndarray) -> np.ndarray:
    """The action as an integer array of shape ``nvec.shape``; a wrong shape or dtype is a caller bug (raises),
    out-of-range values are model output (they become call statuses downstream)."""
    a = np.asarray(action)
    if a.shape != nvec.shape or a.dtype.kind not in "iu":
        raise ValueError(f"action: expected an integer array of shape {nvec.shape} (MultiDiscrete "
                         f"{nvec.tolist()}), got dtype {a.dtype} shape {a.shape}")
    return a


def resolve_reward(reward: Any) -> Any:
    """A RewardConfig from a config or preset name (validated at construction, not at the first episode)."""
    from parasim.rewards import resolve_config

    return resolve_config(reward)


def task_options(options: dict[str, Any] | None, num_tasks: int, lanes: int | None) -> tuple[Any, Any]:
    """``options["task_index"]`` and ``options["task_seed"]`` validated (None where absent): ints for a single env
    (``lanes`` None), int arrays of shape [lanes] for a vector env. Bad values are caller bugs and raise."""
    out = []
    for key, high in (("task_index", num_tasks), ("task_seed", 2**63)):
        value = (options or {}).get(key)
        if value is None:
            out.append(None)
            continue
        arr = np.asarray(value)
        shape = () if lanes is None else (lanes,)
        what = "an integer" if lanes is None else f"an integer array of shape ({lanes},)"
        if arr.shape != shape or arr.dtype.kind not in "iu" or (arr.size and not (0 <= arr.min() and arr.max() < high)):
            raise ValueError(f"options[{key!r}]: expected {what} with values in [0, {high}), got {value!r}")
        out.append(arr.reshape(-1).astype(np.int64))
    return out[0], out[1]


def terminal_info(sim: Simulator, lanes: np.ndarray, reward_config: Any) -> tuple[np.ndarray, dict, dict]:
    """Rewards, reward components and trajectory fields of the finished episodes in ``lanes``.

    Each episode is scored as its own group: an env knows nothing of which rollouts share a task, so a
    group-relative preset (toolorchestra) sees a group of one here; trainers that group rollouts re-score
    the logged trajectories with ``compute_rewards`` over their groups.
    """
    traj = sim.trajectory(lanes)
    # the simulator writes every field in its contract dtype and range (tests check it against
    # ``TrajectoryBatch.from_arrays``), so the trusting constructor skips a second validation per step
    total, comps = score_trajectories(traj, reward_config, validate=False)
    return total, comps, traj


def score_trajectories(traj: dict[str, np.ndarray], reward_config: Any, *, validate: bool) -> tuple[np.ndarray, dict]:
    """``compute_rewards`` of finished episodes given as TrajectoryBatch fields, each its own group; ``validate``
    for fields that come from outside the simulator (real tools)."""
    from parasim import TrajectoryBatch, compute_rewards

    fields = {**traj, "group_id": np.arange(len(traj["outcome"]), dtype=np.int64)}
    batch = TrajectoryBatch.from_arrays(**fields) if validate else TrajectoryBatch(**fields)
    result = compute_rewards(batch, reward_config)
    comps = {k: np.asarray(v, np.float64) for k, v in result.as_dict().items()}
    return comps["total"], comps


def terminal_step_info(comps: dict[str, np.ndarray], traj: dict[str, np.ndarray]) -> dict[str, dict]:
    """The terminal step's info of a single env: every reward component and trajectory field of the episode."""
    return {"reward_components": {k: v[0] for k, v in comps.items()},
            "trajectory": {k: v[0] for k, v in traj.items()}}


class ParaOrchEnv(gym.Env):
    """ParaOrch-v0 (see the module docstring for options, action layout and observation keys)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}

    def __init__(self, pool: Any = "paramanager", suite: Any = "paramanager", max_rounds: int = 12,
                 max_parallel: int = 4, serial: bool = False, reward: Any = "paramanager", tools: str = "sim",
                 token_budget: float | None = None, seed: int | None = None, render_mode: str | None = None,
                 engine: Any = None) -> None:
        self.render_mode = check_render_mode(render_mode)
        if tools == "real":
            raise ValueError("tools='real': ParaOrchEnv runs the compiled simulator; make the real-tools env with "
                             "gym.make('ParaOrch-v0', tools='real', engine=...) or "
                             "parasim.envs.paraorch_real.ParaOrchRealEnv(engine=...)")
        if engine is not None:
            raise ValueError("engine: only with tools='real'; tools='sim' runs the compiled simulator")
        self.sim = make_simulator(tools, 1, pool=pool, suite=suite, max_rounds=max_rounds, max_parallel=max_parallel,
                                  serial=serial, token_budget=token_budget)
        self.reward_config = resolve_reward(reward)
        self.observation_space = observation_space(self.sim)
        self.action_space = spaces.MultiDiscrete(self.sim.nvec)
        self.num_tasks = self.sim.num_tasks
        self.model_names: tuple[str, ...] = tuple(self.sim.pool.model_names[:-1])
        self._initial_seed = check_seed(seed)
        self._act = np.zeros((1, len(self.sim.nvec)), np.int64)
        self._keep = np.zeros(1, np.uint8)
        self._lane = np.zeros(1, np.int64)
        # the lane's views of the simulator's observation buffers (written in place by every kernel call): each
        # observation copies them without indexing nine arrays again
        self._obs_views = tuple((k, v[0]) for k, v in self.sim.obs._asdict().items())
        self._seeded = False
        self._done = True
        # the board's records (``SimRound``s, made ``RoundRecord``s when rendered), kept only with a render mode
        self._history: deque[SimRound] | None = None if render_mode is None else new_history()
        self._ending: str | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        seed = check_seed(seed)
        options = check_option_keys(options, RESET_OPTIONS, "ParaOrch-v0")
        super().reset(seed=seed)
        if seed is None and not self._seeded:
            seed = self._initial_seed
            if seed is None:
                seed = int(self.np_random.integers(2**62))
        rows, task_seeds = task_options(options, self.num_tasks, None)
        if seed is not None:
            self.sim.seed([seed])
            self._seeded = True
        self.sim.reset(None, rows, task_seeds)
        self._done = False
        if self._history is not None:
            self._history.clear()
            self._ending = None
        return self._observation(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        a = check_action(action, self.sim.nvec)
        if self._done:
            raise RuntimeError("ParaOrch-v0: the episode is over; call reset() before step()")
        self._act[0] = a
        done = bool(self.sim.step(self._act, self._keep)[0])
        obs = self._observation()
        if self._history is not None and a[0] != 1:  # a round ran (a stop runs none)
            self._history.append((int(obs["round"][0]), a.copy(), self.sim.last_round(0)))
        if not done:
            return obs, 0.0, False, False, {}
        self._done = True
        total, comps, traj = terminal_info(self.sim, self._lane, self.reward_config)
        info = terminal_step_info(comps, traj)
        info.update({k: int(v) for k, v in self.sim.tasks(0).items()})
        if self._history is not None:
            self._ending = sim_ending(traj, 0, int(self.sim.final_answers()[0]), float(total[0]))
        return obs, float(total[0]), True, False, info

    def _observation(self) -> dict[str, np.ndarray]:
        """The observation (copies: the buffers change with the next step), as ``sim.observation(0)``."""
        return {k: v.copy() for k, v in self._obs_views}

    def task_weights(self) -> np.ndarray:
        """Each task index's probability when the env draws tasks itself (float64[num_tasks], sums to 1)."""
        return self.sim.task_weights()

    def action_masks(self) -> np.ndarray:
        """The current observation's ``action_mask`` as bool[sum(nvec)]: what sb3-contrib's MaskablePPO reads."""
        return self.sim.obs.action_mask[0].astype(bool)

    def render(self) -> str | np.ndarray | None:
        """The episode board in ``render_mode`` (see the module docstring); None, with a warning, without one."""
        if self.render_mode is None:
            gym.logger.warn("ParaOrch-v0: render() without a render_mode; make the env with render_mode='ansi' "
                            "or 'rgb_array'")
            return None
        return render_board(self._board(), self.render_mode)

    def _board(self) -> Board:
        """What the board shows of the current episode."""
        if not self._seeded:
            raise RuntimeError("ParaOrch-v0: call reset() before render()")
        rounds = tuple(sim_round(*r, self.model_names) for r in self._history or ())
        return Board("sim", self._observation(), rounds, ending=self._ending)


def sim_ending(traj: dict[str, np.ndarray], row: int, answer: int, reward: float) -> str:
    """The board's ending line of a simulated episode from its trajectory fields (row ``row``)."""
    return ending_text(bool(traj["ended_with_final"][row]), int(traj["rounds"][row]), f"#{answer}",
                       bool(traj["outcome"][row] == 1.0), reward)
