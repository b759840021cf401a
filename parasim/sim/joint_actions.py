"""ParaOrch-v0's joint action encoding (``action_encoding="joint"``): one choice per slot, masked by the rules.

The factored action ``[stop] + [tool, model, target] * K`` has a per-dimension mask, and a policy that samples the
dimensions independently (sb3-contrib's ``MaskableMultiCategoricalDistribution`` splits the flat mask by dimension
and masks each categorical on its own) can still draw a round the rules reject: a reviewer on the question target, a
solver on the verify target, or a round with no call. No per-dimension mask of that layout can exclude them. The
joint encoding makes every rule a per-dimension one:

  - the action is ``MultiDiscrete([1 + J] * K)``, one dimension per slot, whose entry ``1 + c`` is call ``c`` of the
    pool's call table (``calls``: every (tool, model, target) the rules ever let run, with the model 0 for the basic
    tools, which ignore it) and whose entry 0 is "no call" in slots 1..K-1 and ``final_answer`` in slot 0;
  - so slot 0 always holds a call or the stop: an empty round cannot be written;
  - each slot's mask is ``lane_rule`` (``parasim.sim.rules``, the compiled rule that plans the round) evaluated on
    every call of the table in the lane's current state (leading answer or not, tokens used, the episode's tool
    subset, the allowed parallelism): entry ``1 + c`` is open exactly when the rule lets call ``c`` run in that slot
    (or would give it BUDGET_EXCEEDED, a call that is well formed but over the token budget). The rule reads only
    the round-start state and the slot's own index, never another slot, so independent per-slot draws from these
    masks are a valid round, whatever the policy.

``decode`` turns joint rows into factored rows, which the compiled step runs unchanged; an out-of-range entry (model
output, not a caller bug) decodes to an unknown tool and gets INVALID_TOOL, as in the factored encoding.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from parasim.sim.kernel import F_TOKENS, NUM_TARGETS
from parasim.sim.rules import RULE_BUDGET, RULE_RUNS, is_agent, lane_lead, lane_rule, slot_rule
from parasim.sim.tables import E_TOKEN_BUDGET

ACTION_ENCODINGS = ("factored", "joint")


def check_action_encoding(value: Any) -> str:
    """The ``action_encoding`` env option: "factored" (the default layout) or "joint" (this module)."""
    if not isinstance(value, str) or value not in ACTION_ENCODINGS:
        raise ValueError(f"action_encoding: expected one of {list(ACTION_ENCODINGS)}, got {value!r}")
    return value


@njit(cache=True)
def runnable_calls(tt, nm):
    """Every (tool, model, target) that ``slot_rule`` lets run in some state (with or without a leading answer), for
    the tool table ``tt`` ([T, NUM_TT]) and ``nm`` pool models: int64[J, 3]. Basic tools (the manager runs them, the
    model is ignored) appear once, with model 0."""
    out = np.empty((tt.shape[0] * max(nm, 1) * NUM_TARGETS, 3), np.int64)
    n = 0
    for tool in range(tt.shape[0]):
        models = nm if is_agent(tt, tool) else 1
        for model in range(models):
            for target in range(NUM_TARGETS):
                runs = False
                for has_lead in (False, True):
                    runs = runs or slot_rule(tt, tool, model, target, 0, 1, nm, has_lead, 0.0, np.inf) == RULE_RUNS
                if runs:
                    out[n, 0], out[n, 1], out[n, 2] = tool, model, target
                    n += 1
    return out[:n].copy()


@njit(cache=True)
def joint_masks(lanes, params, calls, out):
    """Each lane's joint mask into ``out`` (int8[N, K * (1 + J)]): per slot, entry 0 open (stop in slot 0, no call in
    the others) and entry ``1 + c`` open when ``lane_rule`` lets call ``calls[c]`` run in that slot of the lane's next
    round (or gives it BUDGET_EXCEEDED); the same inputs ``plan_round`` gives the rule (round-start lead and tokens,
    the episode's unoffered tools, the allowed slots)."""
    P = params[0]
    allowed, budget = P.slots, P.env[E_TOKEN_BUDGET]
    width = calls.shape[0] + 1
    for i in range(lanes.shape[0]):
        L = lanes[i]
        has_lead = lane_lead(L) >= 0
        ctx = L.st_f[F_TOKENS]
        off = L.tools_off
        for k in range(P.slots):
            j = k * width
            out[i, j] = 1
            for c in range(calls.shape[0]):
                rule = lane_rule(P.tt, off, calls[c, 0], calls[c, 1], calls[c, 2], k, allowed, P.nm, has_lead, ctx,
                                 budget)
                out[i, j + 1 + c] = 1 if rule == RULE_RUNS or rule == RULE_BUDGET else 0


class JointEncoding:
    """The joint encoding of one pool's actions (see the module docstring): its sizes, masks and decoder.

    ``params`` is the compiled rules' parameter record (``Simulator.params``, or the real-tools source's), whose tool
    table, model count and slots define the calls."""

    def __init__(self, params: np.ndarray) -> None:
        p = params[0]
        self.params = params
        self.slots = int(p["slots"])
        self.num_tools = int(p["tt"].shape[0])
        self.calls = runnable_calls(np.ascontiguousarray(p["tt"]), int(p["nm"]))
        self.width = 1 + len(self.calls)  # entries per slot: none (stop in slot 0) + the calls
        self.nvec = np.full(self.slots, self.width, np.int64)
        # decode table: row 0 no call (tool value T), rows 1..J the calls, the last an unknown tool (INVALID_TOOL)
        self._rows = np.concatenate([[[self.num_tools, 0, 0]], self.calls, [[self.num_tools + 1, 0, 0]]]).astype(
            np.int64)

    def masks(self, lanes: np.ndarray) -> np.ndarray:
        """The joint masks (int8[n, K * width]) of the lane records ``lanes`` (a 1-D array or slice of them)."""
        out = np.empty((len(lanes), self.slots * self.width), np.int8)
        joint_masks(lanes, self.params, self.calls, out)
        return out

    def decode(self, actions: np.ndarray) -> np.ndarray:
        """Factored action rows (int64[n, 1 + 3K]) of joint rows ``actions`` (integers [n, K], already checked for
        shape and dtype): slot 0's entry 0 is the stop; an entry outside ``[0, width)`` is an unknown tool."""
        a = np.asarray(actions, np.int64)
        idx = np.where((a >= 0) & (a < self.width), a, self.width)
        out = np.empty((a.shape[0], 1 + 3 * self.slots), np.int64)
        out[:, 0] = a[:, 0] == 0
        out[:, 1:] = self._rows[idx].reshape(a.shape[0], -1)
        return out
