"""Trajectory formats for LLM manager training: role spans over token ids, JSONL conversations, padded batches.

A trajectory is the token stream the model saw (prompt, manager turns, tool feedback, ...) with role spans saying
who wrote each token. Only manager spans are trained (manager tokens 1, tool and environment tokens 0). Token ids
are the ones generated or tokenized once, never re-derived from text, so the logprobs the sampler reported stay
aligned with the tokens the trainer scores.

On disk (SFT data, logged trajectories) a trajectory is one JSON line, either
  ``{"messages": [...OpenAI chat messages...], "tools": [...], "group_id": 3, "record": {...}}``
(assistant messages are the manager's, tool results are ``role: "tool"`` messages; rendered by the tokenizer's chat
template, or by ``chat_template`` when given, through ``envs.paraorch_text.render_conversation``, the function
ParaOrchText-v0 renders its observations with, so that SFT text and the environment's text have one form:
``{"messages": info["messages"], "tools": env.tools}`` of a ParaOrchText-v0 episode with ``tokenizer=`` is a valid
line) or
  ``{"segments": [{"role": "manager" | "env", "text": "..."}, ...]}``
(text already rendered, e.g. a log of the raw stream). ``record`` optionally carries TrajectoryBatch fields.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROLE_ENV = 0  # system prompt, user question, tool results, chat-template glue: never trained
ROLE_MANAGER = 1  # tokens the manager generated: trained
ROLE_NAMES = {"env": ROLE_ENV, "tool": ROLE_ENV, "system": ROLE_ENV, "user": ROLE_ENV, "manager": ROLE_MANAGER,
              "assistant": ROLE_MANAGER}


@dataclass
class TokenTrajectory:
    """One trajectory as tokens: ``spans`` are (start, end, role) half-open and cover ``input_ids`` in order.

    ``sampled_logprobs`` holds, per token, the log-probability the sampler reported for a generated token (0 for
    tokens it did not generate); ``truncated`` marks a stream cut at the length limit (its loss can be masked).
    """

    input_ids: list[int]
    spans: list[tuple[int, int, int]]
    sampled_logprobs: list[float] | None = None
    truncated: bool = False
    group_id: int = 0
    record: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        pos = 0
        for i, (start, end, role) in enumerate(self.spans):
            if start != pos or end < start:
                raise ValueError(f"TokenTrajectory.spans[{i}] = {(start, end, role)}: spans must tile the tokens "
                                 f"in order (expected start {pos}, end >= start)")
            pos = end
        if pos != len(self.input_ids):
            raise ValueError(f"TokenTrajectory.spans cover {pos} tokens but input_ids has {len(self.input_ids)}")
        if self.sampled_logprobs is not None and len(self.sampled_logprobs) != len(self.input_ids):
            raise ValueError(f"TokenTrajectory.sampled_logprobs has {len(self.sampled_logprobs)} entries, "
                             f"input_ids {len(self.input_ids)}")

    def append(self, ids: Sequence[int], role: int, logprobs: Sequence[float] | None = None) -> None:
        """Extend the stream by a segment written by ``role`` (merging with a preceding span of the same role)."""
        ids = list(ids)
        if not ids:
            return
        start = len(self.input_ids)
        self.input_ids.extend(ids)
        if self.spans and self.spans[-1][2] == role:
            self.spans[-1] = (self.spans[-1][0], start + len(ids), role)
        else:
            self.spans.append((start, start + len(ids), role))
        if self.sampled_logprobs is not None:
            self.sampled_logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    @property
    def manager_tokens(self) -> int:
        return sum(e - s for s, e, r in self.spans if r == ROLE_MANAGER)

    def to_json(self) -> dict[str, Any]:
        """The JSONL form ``trajectory_from_json`` reads back (NumPy values in ``record`` become plain lists)."""
        record = {k: np.asarray(v).tolist() for k, v in self.record.items()}
        return {"input_ids": self.input_ids, "spans": [list(s) for s in self.spans],
                "sampled_logprobs": self.sampled_logprobs, "truncated": self.truncated,
                "group_id": self.group_id, "record": record}


def render_segments(tokenizer: Any, messages: Sequence[dict[str, Any]],
                    tools: Sequence[dict[str, Any]] | None = None,
                    chat_template: str | None = None) -> list[tuple[str, int]]:
    """Split a chat rendered by the tokenizer's template (or ``chat_template``) into (text, role) segments.

    Each assistant turn's own text (content, tool-call blocks and the end-of-turn token) is a manager segment; the
    template glue before it (``<|im_start|>assistant\\n``) and everything else are environment text. Found by rendering
    prefixes, which needs the template to be prefix-stable (ChatML / Qwen3 templates are); otherwise it says so.
    """
    eos = tokenizer.eos_token or ""
    segments: list[tuple[str, int]] = []
    done = ""
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        head = _render(tokenizer, messages[:i], tools, chat_template, generation_prompt=True)
        full = _render(tokenizer, messages[:i + 1], tools, chat_template, generation_prompt=False)
        if not head.startswith(done) or not full.startswith(head):
            raise ValueError(f"messages[{i}]: the chat template is not prefix-stable here, so the manager's span "
                             "cannot be located; pass pre-rendered 'segments' instead")
        tail = full[len(head):]
        cut = tail.rfind(eos) + len(eos) if eos and eos in tail else len(tail)
        segments += [(head[len(done):], ROLE_ENV), (tail[:cut], ROLE_MANAGER)]
        done = head + tail[:cut]
    final = _render(tokenizer, messages, tools, chat_template, generation_prompt=False)
    if not final.startswith(done):
        raise ValueError("the chat template is not prefix-stable at the end of the conversation")
    segments.append((final[len(done):], ROLE_ENV))
    return [(text, role) for text, role in segments if text]


def _render(tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None,
            chat_template: str | None, generation_prompt: bool) -> str:
    from envs.paraorch_text import render_conversation

    return render_conversation(messages, tokenizer, tools, chat_template, add_generation_prompt=generation_prompt)


def tokenize_segments(tokenizer: Any, segments: Iterable[tuple[str, int]], max_tokens: int | None = None,
                      group_id: int = 0, record: dict[str, Any] | None = None) -> TokenTrajectory:
    """Tokenize each segment on its own and concatenate, the same way rollouts build their streams."""
    traj = TokenTrajectory([], [], group_id=group_id, record=dict(record or {}))
    for text, role in segments:
        traj.append(tokenizer(text, add_special_tokens=False)["input_ids"], role)
    if max_tokens is not None and len(traj.input_ids) > max_tokens:
        traj = truncate(traj, max_tokens)
    return traj


def truncate(traj: TokenTrajectory, max_tokens: int) -> TokenTrajectory:
    """Cut a trajectory to ``max_tokens`` (spans clipped), marking it truncated."""
    spans = [(s, min(e, max_tokens), r) for s, e, r in traj.spans if s < max_tokens]
    lps = traj.sampled_logprobs[:max_tokens] if traj.sampled_logprobs is not None else None
    return TokenTrajectory(traj.input_ids[:max_tokens], spans, lps, True, traj.group_id, traj.record)


def read_jsonl(path: str | Path, tokenizer: Any, max_tokens: int | None = None,
               chat_template: str | None = None) -> list[TokenTrajectory]:
    """Load SFT / logged trajectories (``messages`` lines rendered with ``chat_template`` if given, else the
    tokenizer's own); errors name the file and line."""
    out = []
    with Path(path).open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(trajectory_from_json(json.loads(line), tokenizer, max_tokens, chat_template))
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{n}: {err}") from err
    return out


def trajectory_from_json(obj: dict[str, Any], tokenizer: Any, max_tokens: int | None = None,
                         chat_template: str | None = None) -> TokenTrajectory:
    """One JSONL line (``messages``, ``segments`` or ``input_ids``+``spans``) as a TokenTrajectory."""
    group_id, record = int(obj.get("group_id", 0)), obj.get("record") or {}
    if "input_ids" in obj:
        traj = TokenTrajectory(list(obj["input_ids"]), [tuple(s) for s in obj["spans"]], obj.get("sampled_logprobs"),
                               bool(obj.get("truncated", False)), group_id, record)
        return truncate(traj, max_tokens) if max_tokens and len(traj.input_ids) > max_tokens else traj
    if "messages" in obj:
        segments = render_segments(tokenizer, obj["messages"], obj.get("tools"), chat_template)
    elif "segments" in obj:
        segments = []
        for i, seg in enumerate(obj["segments"]):
            if seg.get("role") not in ROLE_NAMES:
                raise ValueError(f"segments[{i}].role = {seg.get('role')!r}; allowed: {sorted(ROLE_NAMES)}")
            segments.append((str(seg["text"]), ROLE_NAMES[seg["role"]]))
    else:
        raise ValueError("a trajectory line needs 'messages', 'segments' or 'input_ids' + 'spans'")
    return tokenize_segments(tokenizer, segments, max_tokens, group_id, record)


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    with Path(path).open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


def token_mask(trajs: Sequence[TokenTrajectory], width: int, *, mask_truncated: bool = False) -> np.ndarray:
    """The loss mask [B, width] from the role spans, by the core's span kernel: manager tokens 1, all else 0.

    ``mask[b, t] = 1`` means the log-probability of token t (predicted from position t - 1) is trained.
    """
    from parasim import loss_mask_from_spans

    offsets, starts, ends, trainable = [0], [], [], []
    for t in trajs:
        for s, e, r in t.spans:
            starts.append(s)
            ends.append(e)
            trainable.append(r == ROLE_MANAGER)
        offsets.append(len(starts))
    mask, _turns = loss_mask_from_spans(
        np.asarray(offsets, np.int64), np.asarray(starts, np.int64), np.asarray(ends, np.int64),
        np.asarray(trainable, np.uint8), width, truncated=np.asarray([t.truncated for t in trajs], np.uint8),
        mask_truncated=mask_truncated)
    return np.asarray(mask)


@dataclass
class PaddedBatch:
    """Right-padded token ids of a list of trajectories; ``attention_mask`` is 1 on real tokens."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    def to(self, device: torch.device) -> PaddedBatch:
        return PaddedBatch(self.input_ids.to(device), self.attention_mask.to(device))


def pad_batch(trajs: Sequence[TokenTrajectory], pad_id: int) -> PaddedBatch:
    width = max(len(t.input_ids) for t in trajs)
    ids = torch.full((len(trajs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(trajs), width), dtype=torch.long)
    for i, t in enumerate(trajs):
        ids[i, :len(t.input_ids)] = torch.tensor(t.input_ids)
        att[i, :len(t.input_ids)] = 1
    return PaddedBatch(ids, att)


def pad_rows(rows: Sequence[np.ndarray], width: int, fill: float = 0.0) -> torch.Tensor:
    """Stack ragged per-token arrays (masks, advantages, weights) into a right-padded float tensor."""
    out = torch.full((len(rows), width), fill, dtype=torch.float32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.as_tensor(np.asarray(r, np.float32))
    return out
