"""The scripted expert whose correct trajectories warm-start the policy (SFT before GRPO).

It plays what the ParaManager and ToolOrchestra papers describe as sensible orchestration: a first
round of parallel calls with distinct, domain-appropriate tools on distinct models; then, depending on
the evidence, stop on a confirmed consensus, ask the critical reviewer to verify an unconfirmed leader,
add independent solvers when candidates disagree or the leader was flagged, and repair failed calls
(EXEC_ERR / TIMEOUT) in the next round by re-issuing them with the trajectory carried. Exploration
noise varies the number of calls, tools, models and the stopping round, so demonstrations cover more
than one script. Where the env gives the router signal, a solving round calls the models it favours first.

Only correct trajectories are kept, failures followed by a repair included (``recovered`` in the
stats); then trajectories are dropped, most over-represented first, until no tool has more than
``max_tool_share`` of the calls, so SFT does not teach a one-tool habit that GRPO must unlearn.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from parasim.config.env_options import ROUND_LIMIT
from parasim.config.fields import opt
from parasim.protocol.schema import NUM_TOOLS, Domain, Status, Tool
from parasim.sim import TARGET_CARRY, TARGET_QUESTION, TARGET_VERIFY
from parasim.sim.router_signal import ROUTER_KEY
from parasim.sim.state import dimension_slices, empty_action, set_action_slot, slot_column
from training.rollout import collect, derive_seed, make_envs

PREFERENCE_WEIGHTS = np.array([0.4, 0.3, 0.2, 0.1])  # how often each of a domain's preferred tools is drawn
FAILED = (int(Status.EXEC_ERR), int(Status.TIMEOUT))
PREFERENCES: dict[int, tuple[Tool, ...]] = {  # domain -> tools by how well they suit it
    Domain.MATH: (Tool.CODE_REASONER, Tool.STANDARD_REASONER, Tool.ENSEMBLE_SOLVER, Tool.PYTHON),
    Domain.SCIENCE: (Tool.STANDARD_REASONER, Tool.KNOWLEDGE_SEARCHER, Tool.ENSEMBLE_SOLVER, Tool.CODE_REASONER),
    Domain.KNOWLEDGE: (Tool.KNOWLEDGE_SEARCHER, Tool.SEARCH, Tool.STANDARD_REASONER, Tool.ENSEMBLE_SOLVER),
    Domain.CODE: (Tool.CODE_REASONER, Tool.PYTHON, Tool.STANDARD_REASONER, Tool.ENSEMBLE_SOLVER),
}


@dataclass(frozen=True)
class ExpertConfig:
    """How many demonstrations the expert plays and how they are filtered."""

    episodes: int = opt(2048, lo=1, hi=10_000_000, help="episodes played (before filtering to correct ones)")
    explore: float = opt(0.25, lo=0.0, hi=1.0, help="probability of a randomized choice at each decision")
    max_rounds: int = opt(4, lo=1, hi=ROUND_LIMIT, help="rounds after which the expert always stops")
    max_tool_share: float = opt(0.3, lo=0.15, hi=1.0, help="balance: no tool above this share of kept calls")


@dataclass
class Demonstrations:
    """The kept decisions (SFT inputs), the pool's model descriptor rows and what was kept."""

    x: torch.Tensor
    mask: torch.Tensor
    actions: torch.Tensor
    stats: dict[str, Any]
    models: torch.Tensor


class ScriptedExpert:
    """A per-lane scripted manager; remembers each lane's last round to repair its failed calls."""

    def __init__(self, num_lanes: int, nvec: list[int], cfg: ExpertConfig, rng: np.random.Generator,
                 tool_names: Sequence[str] | None = None) -> None:
        self.cfg, self.rng = cfg, rng
        self.width = len(nvec)
        self.slots = (self.width - 1) // 3
        self.num_models = int(nvec[slot_column(0) + 1])
        self.num_tools = int(nvec[slot_column(0)]) - 1  # the tool dimension's last entry is the empty slot
        # the env's tool spec (default: the default spec's tools): each default tool the script names, by its index
        names = list(tool_names) if tool_names is not None else [Tool(t).wire_name for t in range(NUM_TOOLS)]
        if len(names) != self.num_tools:
            raise ValueError(f"tool_names: {len(names)} names for an action space of {self.num_tools} tools")
        self._index = {t: names.index(t.wire_name) for t in Tool if t.wire_name in names}
        if Tool.CRITICAL_REVIEWER not in self._index:
            raise ValueError(f"tool_names: the scripted expert verifies with critical_reviewer, which {names} lacks")
        self._review = self._index[Tool.CRITICAL_REVIEWER]
        self._prefs = {d: [self._index[t] for t in tools if t in self._index] for d, tools in PREFERENCES.items()}
        self._tool_entries = [dimension_slices(np.asarray(nvec))[slot_column(k)] for k in range(self.slots)]
        self.last = np.full((num_lanes, self.slots, 3), -1, np.int64)

    def __call__(self, live: np.ndarray, obs: dict[str, np.ndarray], x: torch.Tensor,
                 mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        acts = np.zeros((len(live), self.width), np.int64)
        for j, lane in enumerate(live):
            acts[j] = self.decide(lane, {k: v[lane] for k, v in obs.items()})
        return torch.from_numpy(acts), torch.zeros(len(live))

    def decide(self, lane: int, o: dict[str, np.ndarray]) -> np.ndarray:
        """One decision for one lane from its observation."""
        act = empty_action(self.slots, self.num_tools)
        slots = int(sum(o["action_mask"][entries][:self.num_tools].any() for entries in self._tool_entries))
        rnd, distinct = int(o["round"][0]), int(o["evidence"][1])
        cand = o["candidates"]
        explore = self.rng.random() < self.cfg.explore
        failed = [tuple(self.last[lane, k]) for k, s in enumerate(o["last_status"]) if s in FAILED and rnd > 0]
        calls: list[tuple[int, int, int]] = []
        if rnd >= self.cfg.max_rounds or o["round"][1] <= 1:
            act[0] = 1  # the last round must be final_answer, or the episode ends without one
        elif failed:
            carry = TARGET_CARRY if distinct else TARGET_QUESTION
            calls = [(t, m, target if t == self._review else carry) for t, m, target in failed]
            if distinct and len(calls) < slots and self.rng.random() < 0.5:
                calls.append((self._review, self._model(), TARGET_VERIFY))
        elif distinct == 0:
            calls = self._solvers(o, self._width(slots, explore, first=rnd == 0))
        else:
            confirmed, flagged = cand[0, 4] > 0, cand[0, 3] > 0
            lead_margin = cand[0, 2] - cand[1, 2]
            settled = confirmed and lead_margin > 0 and not explore
            if not flagged and (settled or (lead_margin >= 2 and rnd >= 1 and self.rng.random() < 0.5)):
                act[0] = 1  # a confirmed leader, or (half the time) a clear majority after a round
            elif flagged or lead_margin <= 0:
                calls = self._solvers(o, max(1, self._width(slots, explore, first=False) - 1))
                calls.append((self._review, self._model(), TARGET_VERIFY))
            else:
                calls = [(self._review, self._model(), TARGET_VERIFY)]
                if explore and slots > 1:
                    calls += self._solvers(o, 1)
        calls = calls[:slots]
        if act[0] == 0 and not calls:
            act[0] = 1
        self.last[lane] = -1
        for k, (t, m, target) in enumerate(calls):
            set_action_slot(act, k, t, m, target)
            self.last[lane, k] = (t, m, target)
        return act

    def _width(self, slots: int, explore: bool, first: bool) -> int:
        """Calls in a solving round: 2-3 in parallel (fewer later), a random width when exploring."""
        if explore:
            return int(self.rng.integers(1, slots + 1))
        return min(slots, 3 if first else 2)

    def _model(self) -> int:
        return int(self.rng.integers(self.num_models))

    def _model_order(self, o: dict[str, np.ndarray]) -> np.ndarray:
        """The models a solving round calls, first to last: a random order, or, where the env gives the router
        signal (``ROUTER_KEY``), an order drawn with probabilities proportional to exp(signal) (Plackett-Luce, by
        Gumbel noise): models the router favours first, still varied, so that SFT shows the policy the signal in
        use instead of leaving GRPO to find it from a start that ignores it."""
        if ROUTER_KEY not in o:
            return self.rng.permutation(self.num_models)
        return np.argsort(-(o[ROUTER_KEY].astype(np.float64) + self.rng.gumbel(size=self.num_models)), kind="stable")

    def _solvers(self, o: dict[str, np.ndarray], n: int) -> list[tuple[int, int, int]]:
        """``n`` independent solver calls: distinct domain-preferred tools on distinct models."""
        domain = int(np.argmax(o["task"][:4]))
        prefs = self._prefs[domain]
        weights = PREFERENCE_WEIGHTS[:len(prefs)]
        if len(prefs) < len(PREFERENCE_WEIGHTS):  # a spec without some of the tools: the rest keep their ratios
            weights = weights / weights.sum()
        tools = self.rng.choice(len(prefs), size=min(n, len(prefs)), replace=False, p=weights)
        models = self._model_order(o)
        has_lead = int(o["evidence"][1]) > 0
        out = []
        for j, ti in enumerate(tools):
            target = TARGET_CARRY if has_lead and self.rng.random() < 0.3 else TARGET_QUESTION
            out.append((prefs[ti], int(models[j % self.num_models]), target))
        return out


def balance(tool_counts: np.ndarray, keep: np.ndarray, max_share: float) -> np.ndarray:
    """Drop kept trajectories, heaviest users of the dominant tool first, until no tool exceeds ``max_share``."""
    keep = keep.copy()
    while keep.any():
        totals = tool_counts[keep].sum(0).astype(float)
        share = totals / max(totals.sum(), 1.0)
        top = int(np.argmax(share))
        if share[top] <= max_share:
            break
        idx = np.flatnonzero(keep)
        heavy = idx[np.argsort(-(tool_counts[idx, top] / np.maximum(tool_counts[idx].sum(1), 1)), kind="stable")]
        keep[heavy[: max(1, len(heavy) // 50)]] = False
    return keep


def demonstrations_key(cfg: Any) -> tuple[Any, ...]:
    """What ``demonstrations(cfg)`` depends on: the seed, the env options and the expert's settings. Not the reward:
    the env's score of an episode is never read, so the points of a reward sweep share their demonstrations."""
    return cfg.seed, cfg.env, cfg.expert


def demonstrations(cfg: Any) -> Demonstrations:
    """Play ``cfg.expert.episodes`` expert episodes and return the decisions of the kept ones."""
    e: ExpertConfig = cfg.expert
    envs = make_envs(cfg.env, e.episodes, cfg.reward)
    nvec = [int(v) for v in envs.single_action_space.nvec]
    expert = ScriptedExpert(e.episodes, nvec, e, np.random.default_rng(derive_seed(cfg.seed, "expert-policy")),
                            envs.unwrapped.sim.pool.tools.names)
    ro = collect(expert, envs, seed=derive_seed(cfg.seed, "expert"), group_size=1)
    envs.close()
    b = ro.batch
    correct = b.outcome >= 1.0
    failed_calls = ro.status_counts[:, list(FAILED)].sum(1) > 0
    keep = balance(b.tool_counts, correct & (b.format_violations == 0), e.max_tool_share)
    sel = ro.decisions_of(torch.from_numpy(np.flatnonzero(keep)))
    totals = b.tool_counts[keep].sum(0)
    stats = {"episodes": len(keep), "expert_accuracy": float(correct.mean()), "kept": int(keep.sum()),
             "decisions": int(sel.numel()), "recovered": int((keep & failed_calls).sum()),
             "tool_share": (totals / max(totals.sum(), 1)).round(4).tolist()}
    return Demonstrations(ro.x[sel], ro.mask[sel], ro.actions[sel], stats, ro.models)

