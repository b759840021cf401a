"""Preallocated state and observation buffers of the batched simulator (one row per lane).

The state is one structured array of lane records (``lane_dtype``), lane-major, so that a lane step reads and
writes a few adjacent cache lines instead of a line or two in each of fifteen arrays (see ``parasim.sim.kernel``).
A record's dtype is fixed at compile time, so its per-model field is sized for the largest pool (``MAX_MODELS``,
17 bytes) and one compiled kernel serves every pool of a tool count; the per-tool fields are sized by the pool's
tool count T (``lane_dtype``: a capacity of 64 tools would add 320 bytes to every lane's record), so a pool with
a tool count other than the default spec's 7 compiles the kernels once more, for its dtype; the last round's
per-slot records, sized by the episode's ``max_parallel`` (K), are plain [N, K] arrays instead, since a record sized
for 16 slots would carry 0.5 KB of unused bytes per lane at K = 4 (measured: 17% of a 4,096-lane step).
``SimState`` shows every field as an array.
The observation also stays one plain array per key: the envs copy each of them per step, and copying a field of
a structured array is several times slower.
"""
from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

import numpy as np

from parasim.pools.pool import MAX_MODELS
from parasim.protocol.schema import NUM_STATUSES, NUM_TOOLS, Status
from parasim.sim.kernel import (
    C_ANSWER,
    C_COST,
    C_KIND,
    C_LAT,
    C_RULE,
    C_TOK_IN,
    C_TOK_OUT,
    C_USD,
    CAND_FEATURES,
    NO_CALL,
    NUM_CALL_F,
    NUM_CALL_I,
    NUM_CANDIDATES,
    NUM_EVIDENCE,
    NUM_F,
    NUM_I,
    NUM_TARGETS,
    OUT_ANSWER,
    OUT_CONFIRM,
    OUT_FLAG,
    TASK_ROW,
)
from parasim.tasks.suites import NUM_ANSWERS
from parasim.tools.spec import ToolSpec

TASK_FEATURES = 8  # domain one-hot (4), free-form, multiple-choice, options / 16, question tokens / 1000



@cache
def lane_dtype(num_tools: int) -> np.dtype:
    """One lane's record for T = ``num_tools`` tools, the fields every step touches first. The episode's task
    options (``parasim.sim.rules.begin_options``; docs/task_options.md) are two bit masks beside the stream, which
    every call reads (0 / 0: every tool offered at the pool's price), and, at the end, what only a reset or a priced
    call reads: the prices, the preference vector, the options' own stream and the next reset's requests."""
    return np.dtype([
        ("rng", np.uint64),  # the episode's random stream
        ("tools_off", np.int64),  # bit t set: the episode does not offer tool t (its calls are INVALID_TOOL)
        ("priced", np.int64),  # bit t set: a call of tool t costs price[t] USD this episode
        ("st_i", np.int64, (NUM_I,)),
        ("st_f", np.float64, (NUM_F,)),
        ("counts_t", np.int32, (num_tools,)),  # calls per tool
        ("counts_s", np.int32, (NUM_STATUSES,)),  # calls per status
        ("exec_prev", np.uint8, (num_tools,)),  # last call of the tool ended in EXEC_ERR
        ("arrival", np.int8, (NUM_ANSWERS,)),  # first-seen order per answer, -1 unseen
        ("order", np.int8, (NUM_ANSWERS,)),  # answers in first-seen order (the first st_i[I_SEQ] entries)
        ("scratch", np.int8, (NUM_ANSWERS,)),  # the ensemble's samples
        ("pref", np.int8, (MAX_MODELS + 1,)),  # preferred wrong answer per model
        ("effect", np.float64, (MAX_MODELS + 1,)),  # the task's per-model effect on the logit (``draw_model_effects``)
        ("ev", np.float64, (NUM_ANSWERS, NUM_EVIDENCE)),  # score, support, flags, confirms per answer
        ("task", np.int64, (2,)),  # the next reset's task: suite row (-1 = drawn by weight), keyed flag
        ("task_rng", np.uint64),  # start of the task stream of keyed lanes
        ("mask_off", np.int64),  # the tools_off the lane's action mask shows (``write_obs`` rewrites it on change)
        ("price", np.float64, (num_tools,)),  # USD per call of each priced tool this episode
        ("preference", np.float64, (num_tools + 3,)),  # the episode's toolorchestra vector, NaN: none
        ("opt_rng", np.uint64),  # the stream of drawn task options (``task_options="random"``) of unkeyed lanes
        ("opt_req", np.int64),  # the next reset's given options (``REQ_*`` bits): those are kept, not drawn
    ], align=True)


class SimState(NamedTuple):
    """Everything a lane's episode carries: views of the lane records (writes go to the records) and the
    per-slot arrays."""

    st_i: np.ndarray  # int64[N, NUM_I]
    st_f: np.ndarray  # float64[N, NUM_F]
    counts_t: np.ndarray  # int32[N, T] calls per tool
    counts_s: np.ndarray  # int32[N, S] calls per status
    last_status: np.ndarray  # int8[N, K]
    exec_prev: np.ndarray  # uint8[N, T] last call of the tool ended in EXEC_ERR
    pref: np.ndarray  # int8[N, M+1] preferred wrong answer per model
    effect: np.ndarray  # float64[N, M+1] the task's per-model effect on the logit
    ev: np.ndarray  # float64[N, 4, NUM_ANSWERS] score, support, flags, confirms per answer
    arrival: np.ndarray  # int8[N, NUM_ANSWERS] first-seen order, -1 unseen
    order: np.ndarray  # int8[N, NUM_ANSWERS] answers in first-seen order
    rng: np.ndarray  # uint64[N]
    scratch: np.ndarray  # int8[N, NUM_ANSWERS] ensemble samples
    call_i: np.ndarray  # int8[N, K, NUM_CALL_I] last round, per slot: output kind, answer id (-1 none), rule
    call_f: np.ndarray  # float64[N, K, 5] last round, per slot: tokens in, tokens out, latency, USD, cost units
    task: np.ndarray  # int64[N, 2] the next reset's task: suite row (-1 = drawn by weight), keyed flag
    task_rng: np.ndarray  # uint64[N] start of the task stream of keyed lanes


class EpisodeTools(NamedTuple):
    """Each lane's task options for its current episode (``episode_tools``; docs/task_options.md): what a manager's
    prompt would tell it about the tools it has and what the user wants."""

    available: np.ndarray  # bool[N, T] the tools the episode offers (calls of the others are INVALID_TOOL)
    price_usd: np.ndarray  # float64[N, T] USD per call of each tool this episode; NaN: the pool's own figure
    preference: np.ndarray  # float64[N, T + 3] toolorchestra's vector (tools, outcome, cost, latency); NaN: none


def episode_tools(lanes: np.ndarray, num_tools: int) -> EpisodeTools:
    """Copies of the episode options of the lane records ``lanes`` (``lane_dtype(num_tools)``; the simulator's, or the
    real-tools source's one lane)."""
    bits = np.int64(1) << np.arange(num_tools, dtype=np.int64)
    priced = (lanes["priced"][:, None] & bits) != 0
    return EpisodeTools(available=(lanes["tools_off"][:, None] & bits) == 0,
                        price_usd=np.where(priced, lanes["price"], np.nan), preference=lanes["preference"].copy())


class ObsBuffers(NamedTuple):
    """The Dict observation's arrays for all lanes (the env hands out copies)."""

    task: np.ndarray  # float32[N, 8]
    round: np.ndarray  # float32[N, 2]
    budget: np.ndarray  # float32[N, 4]
    candidates: np.ndarray  # float32[N, C, 5]
    evidence: np.ndarray  # float32[N, 3]
    tool_counts: np.ndarray  # float32[N, T]
    status_counts: np.ndarray  # float32[N, S]
    last_status: np.ndarray  # int8[N, K]
    action_mask: np.ndarray  # int8[N, sum(action_nvec)]: the per-dimension masks, concatenated


def action_nvec(slots: int, num_models: int, num_tools: int = NUM_TOOLS) -> np.ndarray:
    """MultiDiscrete sizes: [stop (2)] + [tool (T + 1: tool value T is the empty slot), model (M), target (3)] per
    slot: the action layout, which the compiled rules read with ``parasim.sim.rules.slot_call`` and Python with
    ``action_slot``. T: the pool's tool count (default: the default tool spec's)."""
    return np.array([2] + [num_tools + 1, num_models, NUM_TARGETS] * slots, np.int64)


def slot_column(k: int) -> int:
    """The column of slot ``k``'s tool in an action row (its model and target follow): batched consumers index
    ``actions[:, slot_column(k) + part]`` with part 0 / 1 / 2."""
    return 1 + 3 * k


def slot_of_dimension(d: int) -> tuple[int, int]:
    """The (slot, part) of action dimension ``d`` >= 1, part 0 the tool, 1 the model, 2 the target:
    ``slot_column``'s inverse, for code that walks the dimensions in order (autoregressive sampling)."""
    return divmod(d - 1, 3)


def slot_parts(actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of every slot's tool, model and target in action rows [..., 1 + 3K]: three [..., K] arrays (writes
    through them change ``actions``)."""
    return actions[..., 1::3], actions[..., 2::3], actions[..., 3::3]


def dimension_slices(nvec: np.ndarray) -> list[slice]:
    """The entries of each action dimension in a flat action mask (``sum(nvec)`` entries, dimensions in order)."""
    ends = np.cumsum(nvec)
    return [slice(int(e - n), int(e)) for e, n in zip(ends, nvec, strict=True)]


def action_slot(action: np.ndarray, k: int) -> tuple[int, int, int]:
    """Slot ``k`` of one action row: (tool, model, target)."""
    j = slot_column(k)
    return int(action[j]), int(action[j + 1]), int(action[j + 2])


def set_action_slot(action: np.ndarray, k: int, tool: int, model: int, target: int) -> None:
    """Write slot ``k`` of one action row."""
    j = slot_column(k)
    action[j: j + 3] = tool, model, target


def empty_action(slots: int, num_tools: int, stop: bool = False) -> np.ndarray:
    """An action row with every slot empty (tool value ``num_tools``, T): a stop with ``stop``, else a round to fill
    in."""
    action = np.zeros(1 + 3 * slots, np.int64)
    action[0] = int(stop)
    action[1::3] = num_tools
    return action


def static_action_mask(slots: int, allowed: int, num_models: int, tools: ToolSpec) -> np.ndarray:
    """The action mask with no leading answer yet; steps then only flip the lead-dependent entries
    (the reviewer tools, and the carry / verify targets) of each allowed slot."""
    parts = [np.ones(2, np.int8)]
    t = tools.num_tools
    for k in range(slots):
        mask = np.zeros(t + 1, np.int8)
        mask[t] = 1
        if k < allowed:
            mask[:t] = 1
            mask[list(tools.with_behaviour("reviewer"))] = 0
        parts += [mask, np.ones(num_models, np.int8), np.array([1, 0, 0], np.int8)]
    return np.concatenate(parts)


class LaneArrays(NamedTuple):
    """The state arrays of N lanes in the kernels' argument order: the lane records and the last round's
    per-slot records."""

    lanes: np.ndarray  # lane_dtype(T)[N]
    last_status: np.ndarray  # int8[N, K]
    call_i: np.ndarray  # int8[N, K, NUM_CALL_I]
    call_f: np.ndarray  # float64[N, K, NUM_CALL_F]


def allocate_lanes(n: int, slots: int, num_tools: int) -> LaneArrays:
    """``n`` zeroed lanes of a pool with ``num_tools`` tools: no call in any slot, no answer seen, no task
    requested."""
    lanes = np.zeros(n, lane_dtype(num_tools))
    lanes["arrival"] = -1
    lanes["task"][:, TASK_ROW] = -1
    lanes["preference"] = np.nan
    return LaneArrays(lanes, np.full((n, slots), NUM_STATUSES, np.int8), np.full((n, slots, NUM_CALL_I), -1, np.int8),
                      np.zeros((n, slots, NUM_CALL_F)))


def lane_views(a: LaneArrays, num_models: int) -> SimState:
    """The ``SimState`` of lanes ``a``: the records' fields as views (``pref`` and ``effect`` cut to the pool's models
    and the manager, ``ev`` transposed to [lane, c, answer]) and the per-slot arrays."""
    lanes = a.lanes
    return SimState(
        st_i=lanes["st_i"], st_f=lanes["st_f"], counts_t=lanes["counts_t"], counts_s=lanes["counts_s"],
        last_status=a.last_status, exec_prev=lanes["exec_prev"], pref=lanes["pref"][:, :num_models + 1],
        effect=lanes["effect"][:, :num_models + 1], ev=lanes["ev"].transpose(0, 2, 1), arrival=lanes["arrival"],
        order=lanes["order"], rng=lanes["rng"],
        scratch=lanes["scratch"], call_i=a.call_i, call_f=a.call_f, task=lanes["task"], task_rng=lanes["task_rng"])


def allocate_obs(n: int, slots: int, num_models: int, tools: ToolSpec) -> ObsBuffers:
    """The observation buffers of ``n`` lanes of a pool with ``num_models`` models and the tool spec ``tools``, each
    lane's action mask the static one (``static_action_mask``)."""
    t = tools.num_tools
    obs = ObsBuffers(
        task=np.zeros((n, TASK_FEATURES), np.float32), round=np.zeros((n, 2), np.float32),
        budget=np.zeros((n, 4), np.float32), candidates=np.zeros((n, NUM_CANDIDATES, CAND_FEATURES), np.float32),
        evidence=np.zeros((n, 3), np.float32), tool_counts=np.zeros((n, t), np.float32),
        status_counts=np.zeros((n, NUM_STATUSES), np.float32), last_status=np.zeros((n, slots), np.int8),
        action_mask=np.zeros((n, int(action_nvec(slots, num_models, t).sum())), np.int8))
    obs.action_mask[:] = static_action_mask(slots, slots, num_models, tools)
    return obs


OUTPUT_KINDS = {OUT_ANSWER: "answer", OUT_FLAG: "flag", OUT_CONFIRM: "confirm"}


def slot_records(last_status: np.ndarray, call_i: np.ndarray, call_f: np.ndarray,
                 lane: int = 0) -> list[dict[str, Any]]:
    """Lane ``lane``'s last round as the per-slot records say it, one dict per slot that held a call (slot order):
    ``slot``, ``status``, ``rule`` (why the plan let it run or not: ``parasim.sim.rules.slot_rule``), ``kind``
    ("answer": ``answer`` is an answer id, 0 the gold one; "flag" / "confirm": a review of the leading answer
    ``answer``; None: no output, see ``status``), tokens in / out, latency, USD and cost units. Both call sources
    fill these records, so what a round did reads the same for simulated and real tools."""
    out = []
    for k, status in enumerate(last_status[lane]):
        if status == NO_CALL:
            continue
        ci, cf = call_i[lane, k], call_f[lane, k]
        out.append({"slot": k, "status": Status(int(status)), "rule": int(ci[C_RULE]),
                    "kind": OUTPUT_KINDS.get(int(ci[C_KIND])), "answer": int(ci[C_ANSWER]),
                    "tokens_in": float(cf[C_TOK_IN]), "tokens_out": float(cf[C_TOK_OUT]), "latency_s": float(cf[C_LAT]),
                    "usd": float(cf[C_USD]), "cost_units": float(cf[C_COST])})
    return out


def write_slot_record(arrays: LaneArrays, lane: int, k: int, status: int, kind: int, answer: int, tokens_in: float,
                      tokens_out: float, latency_s: float, usd: float, cost_units: float) -> None:
    """Fill slot ``k``'s outcome record of lane ``lane`` (phase (b) of a round, ``parasim.sim.rules``) for a call
    that a call source ran outside compiled code (real tools): the record ``slot_records`` reads back."""
    arrays.last_status[lane, k] = status
    arrays.call_i[lane, k, C_KIND], arrays.call_i[lane, k, C_ANSWER] = kind, answer
    rec = arrays.call_f[lane, k]
    rec[C_TOK_IN], rec[C_TOK_OUT], rec[C_LAT] = tokens_in, tokens_out, latency_s
    rec[C_USD], rec[C_COST] = usd, cost_units
