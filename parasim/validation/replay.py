"""Replay logged episodes in the simulator, and measure real and simulated episodes the same way.

The replay is open-loop: each logged episode's rounds are stepped in the compiled simulator (``parasim.sim``) as the
same round actions (tool, model, target per slot), then a stop, in R replicas with their own random streams; the
simulated tools answer, so statuses, answers, tokens and latencies are the simulator's. Where the log holds the
round's action (the structured env passes it to the engine), it is replayed as logged, slots that the env refused
without a call included; otherwise the action is rebuilt from the round's calls, in call order: a reviewer takes
target 2 (verify the leading answer), an agent call that carried an earlier call's output target 1, everything else
target 0 (python and search calls log no target, so their carry target is lost without the action).

A replica may diverge from the real episode: where the real call ran on a leading answer, the replica may have none
yet (its earlier calls failed). Played as logged, the slot would be refused (FORMAT_ERR / INVALID_TOOL), and as the
real side is never refused there, every replica would be biased the same way. So such a slot is adapted, and counted
(``Replay.adapted``): a carry (target 1) asks the question fresh (target 0), a review of no answer is left out.
Slots the env itself refused (logged actions) are replayed as logged.

Replica r of every episode of one task shares the task's hidden draws (difficulty, per-(task, model) effects,
preferred wrong answers: a task stream keyed by the task and the replica), as repeated real episodes on one task share
the real task; other replicas draw their own, so the replicas' spread covers which tasks the log holds. A logged
difficulty is used as is; the model effects are always drawn.

Measured per episode, on both sides, from the per-call records: outcome (the final answer is right), tool-output
tokens (the calls' ``tokens_out``), cost units and USD of the calls, latency (the sum over rounds of the slowest call,
or of every call with ``serial``; the termination call is left out on both sides, the simulator does not time it),
the issued slots by status group, OK calls per tool and per model, and graded agent answers and the right ones.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from parasim.pools.pool import PoolSpec
from parasim.protocol.schema import NUM_TOOLS, Status, Tool
from parasim.sim import Simulator
from parasim.sim.kernel import C_ANSWER, C_KIND, C_TOK_OUT, EMPTY_SLOT, I_SEQ, NO_CALL, OUT_ANSWER
from parasim.sim.state import action_slot, empty_action, set_action_slot, slot_column, slot_parts
from parasim.tasks.suites import BENCHMARK_INDEX, FREE_FORM, GENERIC, TaskSuite
from parasim.validation.logs import LogError, LoggedEpisode, LoggedRound

# REJECTED: refused without running (format, tool, budget); TRUNCATED: cut at the generation cap, no answer
STATUS_GROUPS = ("OK", "EXEC_ERR", "TIMEOUT", "REJECTED", "TRUNCATED")
_GROUP_OF = {Status.OK: 0, Status.EXEC_ERR: 1, Status.TIMEOUT: 2, Status.FORMAT_ERR: 3, Status.INVALID_TOOL: 3,
             Status.BUDGET_EXCEEDED: 3, Status.TRUNCATED: 4}
_STATUS_GROUP = np.array([_GROUP_OF[Status(s)] for s in range(len(Status))] + [-1], np.int64)  # NO_CALL -> -1
_CR, _FIRST_BASIC = int(Tool.CRITICAL_REVIEWER), int(Tool.PYTHON)


@dataclass
class EpisodeMetrics:
    """Per-episode measures (rows: real episodes, or simulated lanes); the comparison's numerators and
    denominators."""

    outcome: np.ndarray  # float64[N]
    tokens: np.ndarray
    cost_units: np.ndarray
    usd: np.ndarray
    latency_s: np.ndarray
    status: np.ndarray  # float64[N, 5]: issued slots per STATUS_GROUPS
    tool_ok: np.ndarray  # float64[N, NUM_TOOLS]: OK calls per tool
    model_ok: np.ndarray  # float64[N, M]: OK agent calls per pool model
    graded: np.ndarray  # agent answers checked against the gold answer
    right: np.ndarray  # of those, right

    @classmethod
    def zeros(cls, n: int, num_models: int) -> EpisodeMetrics:
        z = np.zeros
        return cls(z(n), z(n), z(n), z(n), z(n), z((n, len(STATUS_GROUPS))), z((n, NUM_TOOLS)), z((n, num_models)),
                   z(n), z(n))

    def by_replica(self, replicas: int) -> EpisodeMetrics:
        """Rows grouped by ``replicas`` consecutive lanes (one logged episode each): arrays [episode, replica, ...]."""
        return EpisodeMetrics(**{k: v.reshape(-1, replicas, *v.shape[1:]) for k, v in vars(self).items()})


@dataclass
class Replay:
    """The simulated lanes' measures ([episode, replica, ...]) and the slots adapted to a diverged replica."""

    metrics: EpisodeMetrics
    adapted: int  # slots changed because the replica had no leading answer where the real episode had one
    slots: int  # slots replayed that ran in the real episode


def model_indices(episodes: tuple[LoggedEpisode, ...], pool: PoolSpec) -> dict[str, int]:
    """Pool row of every model id the logs' agent calls name; an id the pool lacks is a ``LogError``."""
    names = pool.model_names[:-1]
    index = {name: i for i, name in enumerate(names)}
    for e in episodes:
        for r, rnd in enumerate(e.rounds):
            if rnd.action is not None:  # a slot's model must be one the replay can play: the pool's
                tools, chosen, _ = slot_parts(np.asarray(rnd.action, np.int64))
                for k, (tool, j) in enumerate(zip(tools, chosen)):
                    if (0 <= tool < EMPTY_SLOT and Tool(int(tool)).is_agent and 0 <= j < len(e.models)
                            and e.models[j] not in index):
                        raise LogError(f"{e.where}.models[{j}]: model {e.models[j]!r} (slot {k} of rounds[{r}]."
                                       f"action) is not in the pool {pool.name!r}, whose models are {list(names)}")
            for call in rnd.calls:
                if Tool(call.tool).is_agent and call.model not in index:
                    raise LogError(f"{call.where}.model: model {call.model!r} (a {Tool(call.tool).wire_name} call) is "
                                   f"not in the pool {pool.name!r}, whose models are {list(names)}; pass a pool that "
                                   "has it, or fit one from the log (no --pool)")
    return index


def real_metrics(episodes: tuple[LoggedEpisode, ...], models: dict[str, int], *, serial: bool) -> EpisodeMetrics:
    """The logged episodes measured (see the module docstring)."""
    out = EpisodeMetrics.zeros(len(episodes), len(models))
    for i, e in enumerate(episodes):
        out.outcome[i] = float(e.correct)
        for rnd in e.rounds:
            latencies = [c.latency_s for c in rnd.calls]
            out.latency_s[i] += sum(latencies) if serial else max(latencies, default=0.0)
            for c in rnd.calls:
                out.tokens[i] += c.tokens_out
                out.cost_units[i] += c.cost_units
                out.usd[i] += c.usd
                out.status[i, _STATUS_GROUP[c.status]] += 1
                if c.status == Status.OK:
                    out.tool_ok[i, c.tool] += 1
                    if Tool(c.tool).is_agent:
                        out.model_ok[i, models[c.model]] += 1
                if c.correct >= 0 and c.tool != _CR:  # the simulated reviewer gives verdicts, never answers
                    out.graded[i] += 1
                    out.right[i] += c.correct
            if rnd.action is not None:  # slots the env refused before the engine ran anything
                issued = int((slot_parts(np.asarray(rnd.action))[0] != EMPTY_SLOT).sum())
                out.status[i, 3] += issued - len(rnd.calls)
    return out


def round_action(rnd: LoggedRound, episode: LoggedEpisode, models: dict[str, int], slots: int,
                 num_models: int) -> tuple[np.ndarray, np.ndarray]:
    """The simulator's action row (``action_nvec(slots, M)`` layout) for one logged round (module docstring), and
    which of its slots ran in the real episode (those a diverged replica adapts)."""
    a = empty_action(slots, EMPTY_SLOT)
    ran = np.zeros(slots, bool)
    for n, call in enumerate(rnd.calls):
        if call.slot is not None or rnd.action is None:
            ran[call.slot if call.slot is not None else n] = True
    if rnd.action is not None:
        logged = np.asarray(rnd.action, np.int64)
        a[:len(logged)] = logged
        for k in range(slot_parts(logged)[0].shape[0]):
            j = action_slot(logged, k)[1]  # an index into the episode's models, made a pool row
            known = 0 <= j < len(episode.models) and episode.models[j] in models
            a[slot_column(k) + 1] = models[episode.models[j]] if known else num_models  # unknown: out of range
        a[0] = 0
        return a, ran
    for n, call in enumerate(rnd.calls):
        k = call.slot if call.slot is not None else n
        agent = Tool(call.tool).is_agent
        target = 2 if call.tool == _CR else (1 if agent and call.target >= 0 else 0)
        set_action_slot(a, k, call.tool, models[call.model] if agent else 0, target)
    return a, ran


def replay_suite(episodes: tuple[LoggedEpisode, ...]) -> tuple[TaskSuite, np.ndarray]:
    """One suite row per logged task (its benchmark, answer format and difficulty, NaN = drawn), and each
    episode's row. Benchmarks outside the catalogue play as their domain's generic benchmark."""
    rows: dict[str, int] = {}
    bench, domain, options, z = [], [], [], []
    for e in episodes:
        if e.task_id not in rows:
            rows[e.task_id] = len(rows)
            bench.append(BENCHMARK_INDEX.get(e.benchmark, GENERIC[e.domain]))
            domain.append(e.domain)
            options.append(e.options if e.options >= 2 else FREE_FORM)
            z.append(e.difficulty)
    n = len(rows)
    suite = TaskSuite("validate-sim", np.asarray(bench, np.int32), np.asarray(domain, np.int32),
                      np.asarray(options, np.int32), np.asarray(z, np.float64), np.arange(1, n + 1) / n,
                      tuple(rows))
    return suite, np.array([rows[e.task_id] for e in episodes], np.int64)


def _stream_seed(*parts: object) -> int:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


def replay(episodes: tuple[LoggedEpisode, ...], pool: PoolSpec, models: dict[str, int], *, replicas: int, seed: int,
           slots: int, serial: bool, token_budget: float | None) -> Replay:
    """Every episode replayed in ``replicas`` simulated lanes (lane ``e * replicas + r``), measured."""
    suite, task_row = replay_suite(episodes)
    num_models = pool.num_models
    max_rounds = max(1, max(len(e.rounds) for e in episodes))
    n = len(episodes) * replicas
    sim = Simulator(pool, suite, n, max_rounds=max_rounds, max_parallel=slots, serial=serial,
                    token_budget=token_budget)
    stop = empty_action(slots, EMPTY_SLOT, stop=True)
    plan = np.tile(stop, (len(episodes), max_rounds + 1, 1))  # [episode, step, action]
    ran = np.zeros((len(episodes), max_rounds + 1, slots), bool)
    for i, e in enumerate(episodes):
        for t, rnd in enumerate(e.rounds):
            plan[i, t], ran[i, t] = round_action(rnd, e, models, slots, num_models)
    lane_episode = np.repeat(np.arange(len(episodes)), replicas)
    replica = np.tile(np.arange(replicas), len(episodes))
    sim.seed([_stream_seed(seed, "lane", i) for i in range(n)])
    task_seeds = np.array([_stream_seed(seed, "task", suite.task_ids[task_row[e]], r)
                           for e, r in zip(lane_episode, replica)], np.int64)
    prices = np.full((n, sim.num_tools), np.nan)  # each episode's own tool prices (its log's), else the pool's
    for i, e in enumerate(episodes):
        for tool, usd in e.tool_prices:
            prices[i * replicas:(i + 1) * replicas, tool] = usd
    sim.reset(task_index=task_row[lane_episode], task_seeds=task_seeds,
              tool_prices=prices if any(e.tool_prices for e in episodes) else None)
    out = EpisodeMetrics.zeros(n, num_models)
    rounds = np.array([len(e.rounds) for e in episodes])[lane_episode]
    keep = np.zeros(n, np.uint8)
    adapted = 0
    for t in range(max_rounds + 1):
        running = (sim.done == 0) & (t < rounds)  # lanes that play a round (not a stop) this step
        actions = plan[lane_episode, t]
        adapted += _adapt(actions, ran[lane_episode, t] & running[:, None], sim.state.st_i[:, I_SEQ] == 0)
        sim.step(actions, keep)
        _add_round(out, sim, actions, np.flatnonzero(running))
        if sim.done.all():
            break
    traj = sim.trajectory()
    out.outcome[:] = traj["outcome"]
    out.cost_units[:] = traj["cost_units"]
    out.usd[:] = traj["usd"]
    out.latency_s[:] = traj["latency_s"]
    return Replay(out.by_replica(replicas), adapted, int(ran.sum()) * replicas)


def _adapt(actions: np.ndarray, ran: np.ndarray, no_lead: np.ndarray) -> int:
    """Adapt, in place, the slots that ran in the real episode to lanes without a leading answer (module
    docstring); returns how many were changed."""
    tools, _, targets = slot_parts(actions)
    lost = ran & no_lead[:, None]
    review = lost & (tools == _CR)
    carry = lost & (targets == 1) & ~review
    targets[carry] = 0
    tools[review] = EMPTY_SLOT
    return int(carry.sum() + review.sum())


def _add_round(out: EpisodeMetrics, sim: Simulator, actions: np.ndarray, lanes: np.ndarray) -> None:
    """Add the last round's per-slot records of ``lanes`` to their measures."""
    status = sim.state.last_status[lanes].astype(np.int64)  # [n, K]
    tools, models, _ = slot_parts(actions[lanes])
    issued = status != NO_CALL
    group = _STATUS_GROUP[np.where(issued, status, len(Status))]
    out.tokens[lanes] += (sim.state.call_f[lanes, :, C_TOK_OUT] * issued).sum(1)
    for g in range(len(STATUS_GROUPS)):
        out.status[lanes, g] += (group == g).sum(1)
    ok = status == Status.OK
    agent = tools < _FIRST_BASIC
    rows, slots = np.nonzero(ok)
    np.add.at(out.tool_ok, (lanes[rows], tools[rows, slots]), 1)
    rows, slots = np.nonzero(ok & agent)
    np.add.at(out.model_ok, (lanes[rows], models[rows, slots]), 1)
    answered = ok & agent & (sim.state.call_i[lanes, :, C_KIND] == OUT_ANSWER)
    out.graded[lanes] += answered.sum(1)
    out.right[lanes] += (answered & (sim.state.call_i[lanes, :, C_ANSWER] == 0)).sum(1)
