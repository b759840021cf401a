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
on real tools with the same spaces and the same compiled rules, see ``envs.real_source``), ``harness``
(None, or a dict: ``max_output_tokens`` replaces the pool's generation cap; ``temperature`` samples the pool's calls
at another temperature by the softmax law, ``parasim.pools.harness.at_temperature``; ``reasoning_effort`` must be the
pool's calibrated one: ``parasim.pools.harness.with_harness``; simulated tools only), ``descriptors``
(False: True adds the observation keys ``models`` and ``tools``, ``parasim.pools.descriptors``), ``router_signal``
(None: True or "calibrated" adds the observation key ``router``, a per-model signal of the task's per-model effects
as informative as real routers' predictions, ``parasim.sim.router_signal``; a number in [0, 1] sets its rho;
simulated tools only), ``action_encoding``
("factored", the layout below; "joint": one choice per slot under a mask that only opens valid calls,
``parasim.sim.joint_actions``).
One class for both: the env holds a call source (``envs.call_source``), and the rules of a round
(``parasim.sim.rules``) are the same compiled functions whichever source answers the calls.

Action, ``MultiDiscrete(nvec)`` with ``nvec = [2] + [T + 1, M, 3] * K`` (T = the pool's tools, 7 with the default
tool spec, ``parasim.tools.spec``; M = pool models):
  - ``a[0]``: stop flag, 1 = ``final_answer`` (the slots are then ignored), 0 = run a round.
  - slot k (``a[1 + 3k : 4 + 3k]``): tool (index in the pool's tool spec, 0..T-1, the ``Tool`` value for the
    default spec; T = empty slot), model (pool model index; ignored by the basic tools such as python and search,
    which the manager runs itself), target (0 = the question, fresh context; 1 = carry the trajectory and its
    leading answer, which the call may copy; 2 = verify the leading answer, reviewer tools such as
    critical_reviewer only, which must use it).
  Masked or out-of-range parts become call statuses, never exceptions: an unknown tool or model or a
  reviewer with nothing to review is INVALID_TOOL; a bad or inapplicable target is FORMAT_ERR; a round with
  no call, or a stop flag other than 0/1, is a format violation (counted in the trajectory's
  ``format_violations``). The per-dimension mask cannot express the cross-dimension rules (the
  critical_reviewer takes target 2 and only it does; a round holds a call), so a policy that samples the
  dimensions independently should use ``action_encoding="joint"``: ``MultiDiscrete([1 + J] * K)``, per slot 0 =
  none (``final_answer`` in slot 0) or one of the J calls the rules can run, each slot's mask computed by the
  compiled rule itself, so every masked sample is a valid round (``parasim.sim.joint_actions``). An action of
  the wrong shape or a non-integer dtype raises ValueError (a caller bug, not model output).

Observation, a Dict of arrays (C = 4 candidates, S = 7 statuses, ``parasim.protocol.schema.NUM_STATUSES``):
  - ``task`` float32[8]: domain one-hot (math, science, knowledge, code), free-form flag, multiple-choice
    flag, answer options / 16 (1 for free-form), question tokens / 1000.
  - ``round`` float32[2]: rounds used, rounds left.
  - ``budget`` float32[4]: tokens (trajectory length), cost units, USD, latency seconds used so far.
  - ``candidates`` float32[C, 5]: candidate answers ranked by the termination model's score, each row
    (present, score, supporting calls, reviewer flags, reviewer confirmations); answer ids are hidden.
  - ``evidence`` float32[3]: OK answers so far, distinct answers, 1 if the termination model would fall
    back to the manager's own answer (no evidence yet).
  - ``tool_counts`` float32[T]: calls per tool so far; ``status_counts`` float32[S]: calls per status.
  - ``last_status`` int8[K]: status of each slot's call in the last round (S = no call).
  - ``action_mask`` int8[sum(nvec)]: the per-dimension masks of the action, concatenated in ``nvec``
    order (stop 2, then per slot tool T+1, model M, target 3); 1 = allowed. With ``action_encoding="joint"``,
    int8[K * (1 + J)]: each slot's joint mask.
  - with ``descriptors=True`` only: ``models`` float32[M, 13] and ``tools`` float32[T, 5], the pool's model and tool
    descriptors in [0, 1] (price, speed, time to first token, published accuracy per domain, context window; tool
    kind and cost; ``parasim.pools.descriptors``), the same values every step (they describe the pool, not the episode,
    except that an episode with its own tool prices, ``tool_prices`` or ``task_options="random"``, shows them in the
    tools' ``usd_per_call`` column; copies, as every key is, since Gymnasium's users keep observations), so a policy
    that scores their rows can act on a pool it was not trained on. Off by default: the keys cost nothing then.
  - with ``router_signal`` only: ``router`` float32[M], per pool model a signal of its per-task effect on this task,
    rho e / tau + sqrt(1 - rho^2) noise (``parasim.sim.router_signal``), with rho calibrated (``"calibrated"``) so
    that the router reading it best captures 15% of the per-query oracle's gain over the best single model, as the
    best published routers do (rho 0 where the best model per benchmark captures more); constant over the episode,
    identical for lanes that play the identical task.

Reset options (``reset(options={...})``), for trainers that play one task several times (GRPO groups):
  - ``task_index`` (int in ``[0, num_tasks)``): play the suite's task at that index (row of the suite: a
    benchmark, whose items' difficulty is drawn, or a fixed task of a task file) instead of drawing one by the
    suite's weights.
  - ``task_seed`` (int >= 0): draw the task's own randomness (its row when ``task_index`` is absent, a drawn
    difficulty, the models' preferred wrong answers) from a stream started from this seed instead of the
    episode's stream, so equal ``task_index`` / ``task_seed`` give the identical task (same question features,
    same hidden difficulty) while the tool calls keep drawing from the env's own stream (seeded as usual).
  - ``preference`` (T + 3 numbers: tools, outcome, cost, latency), ``tools_available`` (T bools or tool names)
    and ``tool_prices`` (USD per call, per tool or a name -> price dict): the episode's ToolOrchestra-style task
    options (docs/task_options.md); the constructor option ``task_options="random"`` draws them per episode.
  Like any reset option they apply to this reset's episode only (a later ``reset()`` without them draws by
  weight again, as Gymnasium's vector envs' autoresets do). ``env.unwrapped.num_tasks`` (the suite's rows) and
  ``env.unwrapped.task_weights()`` (their sampling probabilities) let trainers sample task indices as the env
  would; ``env.unwrapped.model_names`` names the action's model indices.

Render (``render_mode``, ``envs.render``): ``"ansi"`` returns the episode board as text (task, rounds
used and left, the calls of the last rounds with tool, model, target, status and result, the candidates, the
evidence, the budgets used), ``"rgb_array"`` the same board as a uint8[H, W, 3] image of a fixed size per env. The
env records the calls only with a render mode set. ``action_masks()`` returns the current ``action_mask`` as bool,
sb3-contrib's MaskablePPO convention; ``envs.action_masks.tuple_mask`` gives Gymnasium's per-dimension
masks for ``action_space.sample(mask=...)``.

Info: on the terminal step ``reward_components`` (every component of the reward result, including
``total``), ``trajectory`` (the TrajectoryBatch fields of the episode; ``group_id`` is the episode's
number since the env was seeded), ``task_index`` (the suite row played) and ``benchmark`` (its benchmark,
an index into ``parasim.tasks.suites.BENCHMARKS``); empty otherwise.
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from envs.call_source import CallSource, SimSource
from envs.render import Board, check_render_mode, ending_text, new_history, render_board
from envs.render_modes import RENDER_FPS, RENDER_MODES
from parasim.config.env_options import check_bool, check_episode_options, check_option_keys, check_seed
from parasim.pools.descriptors import Descriptors, descriptor_spaces, episode_tool_rows, pool_descriptors
from parasim.protocol.schema import NUM_STATUSES, ToolCall
from parasim.sim import Simulator
from parasim.sim.gather import trajectory_fields
from parasim.sim.joint_actions import JointEncoding, check_action_encoding
from parasim.sim.kernel import CAND_FEATURES, NUM_CANDIDATES
from parasim.sim.router_signal import ROUTER_KEY, RouterSetting, router_request, router_setting
from parasim.sim.state import TASK_FEATURES, episode_tools
from parasim.tasks.suites import load_suite

REAL_TOOLS_HINT = (
    "build the engine over an OpenAI-compatible endpoint per pool model, e.g. engine = "
    "parasim.real.engine.RealEpisodeEngine(parasim.real.backend.RealToolBackend.from_config('endpoints.yaml'), "
    "parasim.real.tasks.load_real_tasks('tasks.jsonl')), then gym.make('ParaOrch-v0', tools='real', engine=engine)")


def make_simulator(tools: str, num_lanes: int, *, pool: Any, suite: Any, max_rounds: int, max_parallel: int,
                   serial: bool, token_budget: float | None, num_threads: int = 1,
                   harness: dict[str, Any] | None = None, task_options: str | None = None) -> Simulator:
    """The compiled simulator behind the simulated envs (real tools run through ``envs.real_source``)."""
    if tools == "real":
        raise ValueError("tools='real': the compiled simulator runs simulated tools only; real tools need one "
                         f"engine per env ({REAL_TOOLS_HINT}; several such envs vectorize with "
                         "gym.vector.AsyncVectorEnv)")
    if tools != "sim":
        raise ValueError(f"tools: expected 'sim' or 'real', got {tools!r}")
    return Simulator(pool, suite, num_lanes, max_rounds=max_rounds, max_parallel=max_parallel, serial=serial,
                     token_budget=token_budget, num_threads=num_threads, harness=harness, task_options=task_options)


def observation_space(sim: Simulator, descriptors: bool = False, joint: JointEncoding | None = None,
                      router: bool = False) -> spaces.Dict:
    """The single-episode Dict observation space of a simulator's envs (see the module docstring)."""
    return dict_observation_space(sim.slots, float(sim.env[0]), sim.nvec, descriptors, joint, router)


def dict_observation_space(slots: int, max_rounds: float, nvec: np.ndarray, descriptors: bool = False,
                           joint: JointEncoding | None = None, router: bool = False) -> spaces.Dict:
    """The Dict observation space for K = ``slots`` call slots, R rounds and the action sizes ``nvec`` (whose tool
    dimension, T + 1, gives the tool count T, and whose model dimension the model count M); the simulated and the
    real-tools env share it, so a policy trained on one runs on the other. ``descriptors`` adds the ``models`` and
    ``tools`` keys (``parasim.pools.descriptors``); ``joint`` sizes the action mask for the joint encoding;
    ``router`` adds the ``router`` key (``parasim.sim.router_signal``)."""
    inf = np.inf
    f32 = np.float32
    num_tools = int(nvec[1]) - 1
    task_high = np.array([1, 1, 1, 1, 1, 1, 1, inf], f32)
    extra = descriptor_spaces(int(nvec[2]), num_tools) if descriptors else {}
    return spaces.Dict({
        "task": spaces.Box(0, task_high, (TASK_FEATURES,), f32),
        "round": spaces.Box(0, max_rounds, (2,), f32),
        "budget": spaces.Box(0, inf, (4,), f32),
        "candidates": spaces.Box(-inf, inf, (NUM_CANDIDATES, CAND_FEATURES), f32),
        "evidence": spaces.Box(0, inf, (3,), f32),
        "tool_counts": spaces.Box(0, inf, (num_tools,), f32),
        "status_counts": spaces.Box(0, inf, (NUM_STATUSES,), f32),
        "last_status": spaces.Box(0, NUM_STATUSES, (slots,), np.int8),
        "action_mask": spaces.Box(0, 1, (int((nvec if joint is None else joint.nvec).sum()),), np.int8),
        **extra,
        **({ROUTER_KEY: spaces.Box(-inf, inf, (int(nvec[2]),), f32)} if router else {}),
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
    from parasim.scoring.rewards import resolve_config

    return resolve_config(reward)


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
    num_tools = int(np.shape(traj["tool_counts"])[-1])  # the pool's tool count: one count column per tool
    batch = TrajectoryBatch.from_arrays(num_tools=num_tools, **fields) if validate else TrajectoryBatch(**fields)
    result = compute_rewards(batch, reward_config)
    comps = {k: np.asarray(v, np.float64) for k, v in result.as_dict().items()}
    return comps["total"], comps


def terminal_step_info(comps: dict[str, np.ndarray], traj: dict[str, np.ndarray]) -> dict[str, dict]:
    """The terminal step's info of a single env: every reward component and trajectory field of the episode."""
    return {"reward_components": {k: v[0] for k, v in comps.items()},
            "trajectory": {k: v[0] for k, v in traj.items()}}


class ParaOrchEnv(gym.Env):
    """ParaOrch-v0 (see the module docstring for options, action layout and observation keys): the episode's rules
    over a call source (``envs.call_source``), simulated or real tools."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}

    def __init__(self, pool: Any = "paramanager", suite: Any = "paramanager", max_rounds: int = 12,
                 max_parallel: int = 4, serial: bool = False, reward: Any = "paramanager", tools: str = "sim",
                 token_budget: float | None = None, seed: int | None = None, render_mode: str | None = None,
                 engine: Any = None, harness: dict[str, Any] | None = None, descriptors: bool = False,
                 task_options: str | None = None, action_encoding: str = "factored",
                 router_signal: Any = None) -> None:
        self.render_mode = check_render_mode(render_mode)
        descriptors = check_bool("descriptors", descriptors)
        encoding = check_action_encoding(action_encoding)
        self.source: CallSource = make_source(tools, engine, pool=pool, suite=suite, max_rounds=max_rounds,
                                              max_parallel=max_parallel, serial=serial, token_budget=token_budget,
                                              harness=harness, task_options=task_options)
        # the router signal's setting (None: no ``router`` key); real tools have no simulated effects to read
        self.router: RouterSetting | None = None
        if isinstance(self.source, SimSource):
            self.router = router_setting(router_signal, self.source.sim, pool, suite, harness)
        elif router_request(router_signal) is not None:
            raise ValueError("router_signal: simulated tools only (the signal reads the simulator's per-model "
                             "effects; a real router's predictions are not wired in)")
        self.tools = self.source.tools
        self.reward_config = resolve_reward(reward)
        # the joint encoding's call table and masks (None: the factored layout), ``parasim.sim.joint_actions``
        self.joint = JointEncoding(self.source.params) if encoding == "joint" else None
        self.observation_space = dict_observation_space(self.source.slots, float(self.source.max_rounds),
                                                        self.source.nvec, descriptors, self.joint,
                                                        self.router is not None)
        self.action_space = spaces.MultiDiscrete(self.source.nvec if self.joint is None else self.joint.nvec)
        self.model_names: tuple[str, ...] = self.source.model_names
        self._initial_seed = check_seed(seed)
        self._lane = np.zeros(1, np.int64)
        # lane 0's views of the source's observation buffers (written in place by the compiled rules): each
        # observation copies them without indexing nine arrays again
        self._obs_views = tuple((k, v[0]) for k, v in self.source.obs._asdict().items())
        self._suite, self._descriptors = suite, None
        # the pool's descriptor rows, constant over episodes (copied into each observation only when asked for)
        self._constant_obs: dict[str, np.ndarray] = {}
        self._episode_prices = task_options == "random"  # episodes can have their own tool prices
        if descriptors:
            d = self.descriptors
            self._constant_obs = {"models": d.models, "tools": d.tools}
        self._seeded = False
        self._started = False
        self._done = True
        self._spec: EnvSpec | None = None
        # the board's records (kept only with a render mode), made ``RoundRecord``s when rendered
        self._history: deque[Any] | None = None if render_mode is None else new_history()
        self._ending: str | None = None

    @property
    def sim(self) -> Simulator:
        """The simulator of a ``tools="sim"`` env (its one lane is this env's episode)."""
        if not isinstance(self.source, SimSource):
            raise AttributeError("sim: a tools='real' env has no simulator; its calls run on env.source.engine")
        return self.source.sim

    @property
    def descriptors(self) -> Descriptors:
        """The pool's model and tool descriptors (``parasim.pools.descriptors``; the ``models`` / ``tools`` observation
        keys with ``descriptors=True``): the simulator's pool and suite, or the real-tools prior pool's entries of
        the engine's model ids."""
        if self._descriptors is None:
            if isinstance(self.source, SimSource):
                self._descriptors = pool_descriptors(self.source.sim.pool, self.source.sim.suite)
            else:
                self._descriptors = pool_descriptors(self.source.pool, load_suite(self._suite),  # type: ignore
                                                     self.model_names)
        return self._descriptors

    @property
    def engine(self) -> Any:
        """The real-tools engine of a ``tools="real"`` env."""
        if self.tools != "real":
            raise AttributeError("engine: a tools='sim' env has no engine; its calls are simulated (env.sim)")
        return self.source.engine  # type: ignore[attr-defined]

    @property
    def num_tasks(self) -> int:
        """Valid ``task_index`` values are ``0 .. num_tasks - 1``: the suite's rows, or the engine's task list."""
        return self.source.num_tasks

    @property
    def spec(self) -> EnvSpec | None:
        return self._spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        """gym.make sets the registered spec; real tools make the env nondeterministic, and the spec says so."""
        self._spec = value if value is None or not self.source.nondeterministic else replace(
            value, nondeterministic=True)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        seed = check_seed(seed)
        options = check_option_keys(options, self.source.reset_options,
                                    "ParaOrch-v0" if self.tools == "sim" else "ParaOrch-v0 (tools='real')")
        super().reset(seed=seed)
        if seed is None and not self._seeded:
            seed = self._initial_seed
            if seed is None and self.tools == "sim":  # the simulator's streams need a start; an engine has its own
                seed = int(self.np_random.integers(2**62))
        info = self.source.reset(seed, options)
        self._episode_prices = self._episode_prices or "tool_prices" in options
        self._seeded = self._seeded or seed is not None
        self._started = True
        self._done = False
        if self._history is not None:
            self._history.clear()
            self._ending = None
        return self._observation(), info

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        if self.joint is not None:  # the joint encoding's action, as the factored one the call source plays
            action = self.joint.decode(check_action(action, self.action_space.nvec)[None])[0]
        return self.turn(action)

    def turn(self, action: Any, calls: dict[int, ToolCall] | None = None,
             manager_answer: str | None = None) -> tuple[dict, float, bool, bool, dict]:
        """``step`` with what a text manager adds to its action (ParaOrchText-v0 translates its text into this
        env's factored actions): the call it wrote for each slot, which real tools run (``envs.real_source``), and its
        own answer with a stop, which a real engine's termination model reads."""
        a = check_action(action, self.source.nvec)
        if self._done:
            raise RuntimeError("ParaOrch-v0: the episode is over; call reset() before step()")
        done, info, record = self.source.play(a, self._history is not None, calls, manager_answer)
        if record is not None:
            self._history.append(record)
        obs = self._observation()
        if not done:
            return obs, 0.0, False, False, info
        return self._end(obs, info)

    def cut(self) -> tuple[dict, float, bool, bool, dict]:
        """End the running episode now, as one that never answered (a trainer's token limit cut the manager off):
        the termination model answers from the evidence so far, no round or format violation is added, and the
        step tuple has ``truncated`` True."""
        if self._done:
            raise RuntimeError("ParaOrch-v0: the episode is over; call reset() before cut()")
        self.source.cut()
        obs, reward, _terminated, _truncated, info = self._end(self._observation(), {})
        return obs, reward, False, True, info

    def _end(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        """The terminal step: the lane's trajectory row scored under the env's reward, and the source's terminal
        info."""
        self._done = True
        traj = trajectory_fields(self._lane, self.source.lanes)
        # the simulator writes every field in its contract dtype and range (tests check it against
        # ``TrajectoryBatch.from_arrays``); a real call source's figures come from outside and are validated
        total, comps = score_trajectories(traj, self.reward_config, validate=self.source.nondeterministic)
        info.update(terminal_step_info(comps, traj))
        info.update(self.source.terminal_info())
        if self._history is not None:
            self._ending = ending_text(bool(traj["ended_with_final"][0]), int(traj["rounds"][0]),
                                       self.source.answer_label(), bool(traj["outcome"][0] == 1.0), float(total[0]))
        return obs, float(total[0]), True, False, info

    def _observation(self) -> dict[str, np.ndarray]:
        """The observation (copies: the buffers change with the next step)."""
        obs = {k: v.copy() for k, v in self._obs_views}
        if self.router is not None:
            obs[ROUTER_KEY] = self.router.signal(self.source.lanes[:1])[0]
        if self.joint is not None:
            obs["action_mask"] = self.joint.masks(self.source.lanes[:1])[0]
        if self._constant_obs:
            obs.update({k: v.copy() for k, v in self._constant_obs.items()})
            if self._episode_prices:  # the episode may have its own tool prices (task options)
                price = episode_tools(self.source.lanes[self._lane], int(self.source.nvec[1]) - 1).price_usd
                obs["tools"] = episode_tool_rows(self.descriptors.tools, price)[0]
        return obs

    def task_weights(self) -> np.ndarray:
        """Each task index's probability when the env draws tasks itself (float64[num_tasks], sums to 1): the
        suite's weights, uniform over a real engine's task list."""
        return self.source.task_weights()

    def action_masks(self) -> np.ndarray:
        """The current observation's ``action_mask`` as bool[sum(nvec)]: what sb3-contrib's MaskablePPO reads
        (before the first reset: the mask with no leading answer yet)."""
        if self.joint is not None:
            return self.joint.masks(self.source.lanes[:1])[0].astype(bool)
        return self.source.obs.action_mask[0].astype(bool)

    def render(self) -> str | np.ndarray | None:
        """The episode board in ``render_mode`` (see the module docstring); None, with a warning, without one."""
        if self.render_mode is None:
            gym.logger.warn("ParaOrch-v0: render() without a render_mode; make the env with render_mode='ansi' "
                            "or 'rgb_array'")
            return None
        return render_board(self._board(), self.render_mode)

    def _board(self) -> Board:
        """What the board shows of the current episode."""
        if not self._started:
            raise RuntimeError("ParaOrch-v0: call reset() before render()")
        rounds = self.source.board_rounds(tuple(self._history or ()))
        return Board(self.tools, self._observation(), rounds, ending=self._ending, **self.source.board_extras())


def make_source(tools: str, engine: Any, *, pool: Any, suite: Any, max_rounds: int, max_parallel: int, serial: bool,
                token_budget: float | None, harness: dict[str, Any] | None = None,
                task_options: str | None = None) -> CallSource:
    """The call source of a single env: a one-lane simulator, or the real-tools source over ``engine``."""
    if tools == "sim":
        if engine is not None:
            raise ValueError("engine: only with tools='real'; tools='sim' runs the compiled simulator")
        return SimSource(make_simulator(tools, 1, pool=pool, suite=suite, max_rounds=max_rounds,
                                        max_parallel=max_parallel, serial=serial, token_budget=token_budget,
                                        harness=harness, task_options=task_options))
    if tools != "real":
        raise ValueError(f"tools: expected 'sim' or 'real', got {tools!r}")
    if engine is None:
        raise NotImplementedError(f"ParaOrch-v0 with tools='real' needs engine=, the real-tools backend of its "
                                  f"episodes: {REAL_TOOLS_HINT}. Use tools='sim' for the simulator.")
    if harness is not None:
        raise ValueError("harness: simulated tools only; real tools' generation cap and sampling are the endpoint "
                         "map's max_tokens and temperature (parasim.real.endpoints)")
    max_rounds, max_parallel, serial, token_budget = check_episode_options(max_rounds, max_parallel, serial,
                                                                           token_budget)
    from envs.real_source import RealSource  # real tools' dependencies load only for them

    return RealSource(engine, pool=pool, suite=suite, max_rounds=max_rounds, max_parallel=max_parallel,
                      serial=serial, token_budget=token_budget, task_options=task_options)


def sim_ending(traj: dict[str, np.ndarray], row: int, answer: int, reward: float) -> str:
    """The board's ending line of a simulated episode from its trajectory fields (row ``row``)."""
    return ending_text(bool(traj["ended_with_final"][row]), int(traj["rounds"][row]), f"#{answer}",
                       bool(traj["outcome"][row] == 1.0), reward)
