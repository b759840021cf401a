"""What only real tools need besides the episode's rules: answer texts as ids, and the rules' records for a task.

The rules of a round (``parasim.sim.rules``) see answers as small integer ids and read the vote weights from the
parameter record and the task's row record. Real tools return text, so ``AnswerIds`` gives two answers one id when
the task's verifier (``parasim.tools.verify``) would accept one as the other: the same option letter for multiple
choice, SQuAD normalization otherwise, and math-verify equality for math. Ids are given in first-seen order; the
rules hold ``NUM_ANSWERS`` (16) ids, so an answer that would be the 17th distinct one gets none: its call stays OK
(tokens, cost and latency count) but adds no candidate and no vote, as an OK call without an answer.

``real_params`` is the parameter record for the engine's model ids: the pool's rows for the ids it names, and for an
id it does not name (an endpoint serving a new model) the pool's mean over its agent models (mean reliability and
mean reviewer sensitivity / specificity, so its vote weights are an average prior, not a made-up one). ``task_row``
is the row record of one real task (benchmark, domain, answer ids in play, the vote's prior odds, question tokens).
"""
from __future__ import annotations

import numpy as np

from parasim.pools.pool import MAX_MODELS, PoolSpec
from parasim.protocol.engine import TaskView
from parasim.real.backend import approx_tokens
from parasim.sim.tables import (
    ROW_DTYPE,
    SimTables,
    answer_log_odds_offset,
    kernel_params,
    vote_probabilities,
    vote_weights,
)
from parasim.tasks.suites import FREE_FORM, NUM_ANSWERS
from parasim.tools.verify import (  # noqa: F401  (answer_kind: re-exported for the real call source)
    AnswerKind,
    answer_kind,
    extract_choice,
    math_equal,
    normalize_text,
)


class AnswerIds:
    """The answer ids of one real episode: answers that verify as equal share an id (see the module docstring)."""

    def __init__(self, kind: AnswerKind, options: tuple[str, ...]) -> None:
        self.kind, self.options = kind, options
        self.texts: list[str] = []  # the answer as first seen, per id
        self.sources: list[int] = []  # the episode's index of the call that first gave it, per id
        self._keys: list[str] = []

    def _key(self, answer: str) -> str:
        if self.kind is AnswerKind.CHOICE:
            letter = extract_choice(f"Final answer: {answer}", len(self.options), self.options)
            return letter or normalize_text(answer)
        return normalize_text(answer)

    def find(self, answer: str) -> int:
        """The id ``answer`` belongs to, -1 if none (model text: never raises)."""
        key = self._key(answer)
        if key in self._keys:
            return self._keys.index(key)
        if self.kind is AnswerKind.MATH:
            for j, text in enumerate(self.texts):
                if math_equal(answer, text):
                    return j
        return -1

    def id_for(self, answer: str, source: int) -> int:
        """The id of an OK call's answer, a new one for an answer not seen before (``source``: the call's index in
        the episode); -1 for an empty answer or a new one past ``NUM_ANSWERS`` ids."""
        if not answer.strip():
            return -1
        found = self.find(answer)
        if found >= 0 or len(self.texts) >= NUM_ANSWERS:
            return found
        self.texts.append(answer)
        self.sources.append(source)
        self._keys.append(self._key(answer))
        return len(self.texts) - 1


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


def real_params(pool: PoolSpec, tables: SimTables, model_ids: tuple[str, ...], env: np.ndarray,
                slots: int) -> np.ndarray:
    """The parameter record (1-element ``params_dtype(T)``) of the pool ``tables`` (``build_tables(pool, ...)``) with
    model row ``j`` for ``model_ids[j]`` (row ``len(model_ids)``: the pool's manager); see the module docstring."""
    if not 1 <= len(model_ids) <= MAX_MODELS:
        raise ValueError(f"engine.model_names: expected 1 to {MAX_MODELS} model ids (the action's model dimension), "
                         f"got {len(model_ids)}")
    src, _rows = kernel_params(tables, env, slots)
    s = src[0]
    nm_pool = pool.num_models
    rows = [pool.model_names.index(m) if m in pool.model_names[:-1] else -1 for m in model_ids] + [nm_pool]
    params = np.zeros(1, src.dtype)
    p = params[0]
    p["nm"], p["slots"], p["env"], p["proto"], p["tt"], p["bonus"] = len(model_ids), slots, env, s["proto"], s["tt"], \
        s["bonus"]
    p["direct"], p["num_reviewers"], p["reviewers"] = s["direct"], s["num_reviewers"], s["reviewers"]
    # the mean agent model, for ids the pool does not name: probabilities averaged, then their vote weights
    rel, sens, spec = vote_probabilities(pool)
    mean_rel, mean_md = vote_weights(rel[:, :, :nm_pool].mean(-1), sens[:nm_pool].mean(0), spec[:nm_pool].mean(0))
    mean_rel, mean_md = mean_rel.T, mean_md.T  # [T, NB] and [D, 4], as the parameter record holds them
    agents = slice(0, nm_pool)
    for j, r in enumerate(rows):
        if r >= 0:
            p["tm"][:, j], p["tok_mu"][:, j] = s["tm"][:, r], s["tok_mu"][:, r]
            p["rel_logit"][:, j] = s["rel_logit"][:, r]
            p["mm"][j], p["md"][j], p["skill"][j] = s["mm"][r], s["md"][r], s["skill"][r]
            continue
        p["tm"][:, j], p["tok_mu"][:, j] = s["tm"][:, agents].mean(1), s["tok_mu"][:, agents].mean(1)
        p["rel_logit"][:, j] = mean_rel
        p["mm"][j], p["md"][j], p["skill"][j] = s["mm"][agents].mean(0), mean_md, s["skill"][agents].mean(0)
    return params


def task_row(view: TaskView, benchmark: int, difficulty: float | None) -> np.ndarray:
    """The row record (1-element ``ROW_DTYPE``) of a real task: free-form when it has no options (16 answer ids in
    play), else its options (at most 16 ids); the vote's prior odds log(A - 1) with A its options; its question's
    tokens (``approx_tokens``); its difficulty where known (the rules never read it)."""
    num_options = len(view.options)
    rows = np.zeros(1, ROW_DTYPE)
    r = rows[0]
    r["bench"], r["domain"] = benchmark, view.domain
    r["nans"] = NUM_ANSWERS if num_options < 2 else min(num_options, NUM_ANSWERS)
    r["log_odds"] = answer_log_odds_offset(FREE_FORM if num_options < 2 else num_options)
    r["z"] = 0.0 if difficulty is None else float(difficulty)
    r["qtok"] = float(approx_tokens(view.question))
    r["dcdf"] = 1.0
    return rows

