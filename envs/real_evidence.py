"""The evidence board of a real-tools episode: answers grouped into candidates and scored, as the simulator does.

ParaOrch-v0's observation shows candidate answers ranked by the termination model's score (never their text).
In the simulator answers are integer ids; real tools return text, so two answers are one candidate when the
task's verifier (``parasim.tools.verify``) would accept one as the other: math-verify equality for math,
the same option letter for multiple choice, SQuAD normalization otherwise. The score is the simulator's
weighted vote (``parasim.sim.kernel``): an OK answer adds ``max(0.05, logit(reliability) + log(A - 1))``
with the pool's reliability of that (benchmark, tool, model), a reviewer's flag or confirmation adds the
log-likelihood ratio of its sensitivity and specificity. A model id the pool does not name (an endpoint
serving a new model) gets the pool's mean over its agent models: an average prior, not a made-up one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from parasim.pools import PoolSpec, reliability
from parasim.protocol.schema import Domain, Tool
from parasim.tasks import BENCHMARK_INDEX, NUM_ANSWERS
from parasim.tools.verify import (
    AnswerKind,
    extract_choice,
    kind_for,
    math_equal,
    normalize_text,
)


@dataclass
class Candidate:
    """One distinct answer: its text (as first seen), vote score, tallies, and the call that first gave it."""

    answer: str
    source: int  # index of the first call (episode order) that gave it: what target 1 / 2 carry as context
    arrival: int
    score: float = 0.0
    support: int = 0
    flags: int = 0
    confirms: int = 0

    def features(self) -> list[float]:
        """The observation row: present, score, supporting calls, reviewer flags, reviewer confirmations."""
        return [1.0, self.score, float(self.support), float(self.flags), float(self.confirms)]


class CallWeights:
    """The termination model's per-call weights for one task, from a pool's reliabilities and reviewer rates."""

    def __init__(self, pool: PoolSpec, model_ids: tuple[str, ...], benchmark: str, domain: int,
                 num_options: int) -> None:
        rel = np.clip(reliability(pool)[BENCHMARK_INDEX[benchmark]], 1e-4, 1 - 1e-4)  # [T, M+1]
        sens = np.clip(pool.sens[:, domain], 0.01, 0.99)
        spec = np.clip(pool.spec[:, domain], 0.01, 0.99)
        agents = slice(0, pool.num_models)
        rows = [pool.model_names.index(m) if m in pool.model_names[:-1] else -1 for m in model_ids]

        def per_model(table: np.ndarray) -> np.ndarray:  # [..., M+1] -> [..., len(model_ids)]
            mean = table[..., agents].mean(-1, keepdims=True)
            return np.concatenate([table[..., r:r + 1] if r >= 0 else mean for r in rows], -1)

        log_a = math.log((num_options if num_options > 1 else NUM_ANSWERS) - 1)
        # basic tools (python, search) are run by the manager: index -1 is the pool's manager row, as in the sim
        rel_m = np.concatenate([per_model(rel), rel[:, -1:]], -1)
        self._answer = np.maximum(0.05, np.log(rel_m / (1 - rel_m)) + log_a)
        s, p = per_model(sens), per_model(spec)
        self._flag, self._confirm = np.log((1 - p) / s), np.log(p / (1 - s))

    def answer(self, tool: Tool, model: int) -> float:
        """Score an OK answer of ``tool`` adds (``model`` -1 for a basic tool)."""
        return float(self._answer[tool, model])

    def review(self, flagged: bool, model: int) -> float:
        """Score a reviewer's flag (negative) or confirmation (positive) adds to the answer it reviewed."""
        return float(self._flag[model] if flagged else self._confirm[model])


def answer_kind(domain: int, num_options: int) -> AnswerKind:
    """How answers of a task are compared: the verifier's kind, exact match for code (its outputs are strings)."""
    kind = kind_for(Domain(domain), num_options)
    return AnswerKind.EXACT if kind is AnswerKind.CODE else kind


class EvidenceBoard:
    """The candidates of one episode; answers that verify as equal share a candidate."""

    def __init__(self, kind: AnswerKind, options: tuple[str, ...], weights: CallWeights) -> None:
        self.kind, self.options, self.weights = kind, options, weights
        self.candidates: list[Candidate] = []
        self.ok_answers = 0

    def _key(self, answer: str) -> str:
        if self.kind is AnswerKind.CHOICE:
            letter = extract_choice(f"Final answer: {answer}", len(self.options), self.options)
            return letter or normalize_text(answer)
        return normalize_text(answer)

    def find(self, answer: str) -> Candidate | None:
        """The candidate ``answer`` belongs to, or None (model text: never raises)."""
        key = self._key(answer)
        for cand in self.candidates:
            if self._key(cand.answer) == key:
                return cand
        if self.kind is AnswerKind.MATH:
            for cand in self.candidates:
                if math_equal(answer, cand.answer):
                    return cand
        return None

    def add_answer(self, answer: str, tool: Tool, model: int, call_index: int) -> None:
        """An OK call's answer: joins (or opens) its candidate and adds the call's vote weight."""
        if not answer.strip():
            return
        cand = self.find(answer)
        if cand is None:
            cand = Candidate(answer, call_index, len(self.candidates))
            self.candidates.append(cand)
        cand.support += 1
        cand.score += self.weights.answer(tool, model)
        self.ok_answers += 1

    def add_review(self, target: Candidate, flagged: bool, model: int) -> None:
        """A reviewer's verdict on ``target`` (the leading candidate when its round began)."""
        if flagged:
            target.flags += 1
        else:
            target.confirms += 1
        target.score += self.weights.review(flagged, model)

    def ranked(self) -> list[Candidate]:
        """Candidates by score, the earlier first on ties (the termination model's order)."""
        return sorted(self.candidates, key=lambda c: (-c.score, c.arrival))

    def lead(self) -> Candidate | None:
        """The termination model's pick so far, None without evidence."""
        ranked = self.ranked()
        return ranked[0] if ranked else None
