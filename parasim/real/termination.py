"""The termination model: the episode's final answer, written from the trajectory by a configured model.

ParaManager ends an episode by handing the whole trajectory (every tool result and the manager's proposed
answer) to a termination model that writes the answer a verifier then scores; the manager's own
``final_answer`` is evidence, not the verdict. When the termination endpoint cannot answer (down, timing
out, an empty reply) the answer falls back to the rules' vote (``fallback_answer``: the lead of the episode's
evidence, as the simulated termination model answers, else the manager's proposal), so an outage lowers quality
instead of ending the run.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parasim.protocol.schema import CallResult, Status, ToolCall
from parasim.real import prompts
from parasim.real.client import ChatClient
from parasim.real.endpoints import TerminationSpec

_EVIDENCE_CHARS = 800


@dataclass
class Synthesis:
    """The final answer, how it was reached (``"model"`` or ``"vote"``) and the termination call's cost."""

    answer: str
    method: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    status: Status = Status.OK
    detail: str = ""


def evidence_lines(calls: Sequence[ToolCall], results: Sequence[CallResult]) -> list[str]:
    """One paragraph per call that produced something: id, tool, model, status, review verdict, answer, text."""
    lines = []
    for i, (call, res) in enumerate(zip(calls, results)):
        head = f"#{i} {call.tool.wire_name}" + (f" ({call.model})" if call.model else "") + f" [{res.status.name}]"
        if res.status is not Status.OK:
            lines.append(f"{head}: {res.detail[:200]}")
            continue
        flagged = res.extra.get("flagged")
        if flagged is not None:
            head += " verdict: " + ("WRONG" if flagged else "CORRECT")
        answer = res.extra.get("answer")
        if answer:
            head += f" answer: {answer}"
        lines.append(f"{head}\n{res.output[:_EVIDENCE_CHARS]}")
    return lines


def fallback_answer(lead: str | None, manager_answer: str | None) -> str:
    """The answer without a termination model's: the rules' vote lead (``parasim.sim.rules.lane_lead``: the
    highest score of the reliability-weighted votes and the reviewers' verdicts, the call source's), else the
    manager's own answer, as the simulated termination model answers (``parasim.sim.sim_source.sim_finish``)."""
    return lead if lead else (manager_answer or "")


class TerminationModel:
    """Writes the final answer with the endpoint named in the endpoint map's ``termination`` section."""

    def __init__(self, chat: ChatClient, spec: TerminationSpec) -> None:
        self.chat, self.spec = chat, spec

    async def synthesize(self, question: str, options: Sequence[str], calls: Sequence[ToolCall],
                         results: Sequence[CallResult], manager_answer: str | None, lead: str | None = None,
                         seed: int | None = None) -> Synthesis:
        messages = prompts.termination_messages(question, evidence_lines(calls, results), manager_answer, options)
        comp = await self.chat.chat(self.spec.model, messages, max_tokens=self.spec.max_tokens,
                                    temperature=self.spec.temperature, seed=seed)
        answer = prompts.extract_answer(comp.texts[0]) if comp.status is Status.OK else ""
        if answer:
            return Synthesis(answer, "model", comp.tokens_in, comp.tokens_out, comp.latency_s)
        detail = comp.detail or "the termination model gave no answer"
        return Synthesis(fallback_answer(lead, manager_answer), "vote", comp.tokens_in, comp.tokens_out,
                         comp.latency_s, comp.status, detail)
