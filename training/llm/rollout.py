"""Rollouts of an LLM manager on ParaOrchText-v0: generation engines and the multi-turn loop.

The loop keeps, per episode, the exact token stream the model saw: the first prompt is tokenized once, each
manager turn appends the *generated* ids with the logprobs the sampler reported, and each environment reply
appends the tokens of the newly rendered text only. Nothing already in the stream is ever re-tokenized, so the
trainer scores exactly the tokens that were sampled (a re-tokenized string can split differently and silently
corrupt importance ratios).

Engines: ``HFEngine`` (``model.generate``, for CPU tests, single GPUs, and wherever vLLM is absent) and
``VLLMEngine`` (a vLLM OpenAI-compatible server: ``/v1/completions`` with prompt token ids, sampled logprobs
returned; weights pushed after each update through ``parasim.real.vllm_client``).
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from training.llm.data import ROLE_ENV, ROLE_MANAGER, TokenTrajectory, truncate

# keys the task-index draw of ``reset_for_group`` on its own stream of the task seed (the env keys the task's
# draws on the task seed itself)
TASK_INDEX_TAG = 0x7461736B


@dataclass
class Generation:
    """One sampled continuation: ids (the stop token included when it stopped), their logprobs, and whether it
    ended on a stop token (False: cut by the length limit)."""

    token_ids: list[int]
    logprobs: list[float]
    finished: bool


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0


class Engine(Protocol):
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int) -> list[Generation]:
        """Sample one continuation per prompt; deterministic for a seed where the backend allows it."""
        ...

    def sync_weights(self, state_dict: dict[str, torch.Tensor], step: int) -> None:
        """Make the engine sample from the trainer's current (full, unsharded) weights."""
        ...


class HFEngine:
    """Sampling with ``transformers``' ``generate``; logprobs of the sampled tokens under the processed
    (temperature / top-p) distribution, the one the tokens were drawn from.

    ``lm`` may be the trainer's own module (single process: weights are shared, syncing is free) or a private
    unsharded copy (FSDP2: the gathered full state dict is loaded into it after each update).
    """

    def __init__(self, lm: torch.nn.Module, stop_ids: Sequence[int], pad_id: int, device: torch.device,
                 shared: bool, max_batch: int = 64, compute_dtype: str = "bfloat16") -> None:
        self.lm, self.stop_ids, self.pad_id, self.device = lm, list(stop_ids), pad_id, device
        self.shared, self.max_batch, self.compute_dtype = shared, max_batch, compute_dtype

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int) -> list[Generation]:
        out: list[Generation] = []
        for s in range(0, len(prompts), self.max_batch):
            out += self._generate(prompts[s:s + self.max_batch], params, seed + s)
        return out

    def _generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int) -> list[Generation]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            att[i, width - len(p):] = 1
        devices = [self.device] if self.device.type == "cuda" else []
        cast = (torch.autocast("cuda", dtype=getattr(torch, self.compute_dtype))
                if self.device.type == "cuda" and self.compute_dtype != "float32"
                else torch.autocast("cpu", enabled=False))
        with torch.random.fork_rng(devices=devices), cast:
            torch.manual_seed(seed)
            res = self.lm.generate(
                input_ids=ids.to(self.device), attention_mask=att.to(self.device), do_sample=True,
                temperature=params.temperature, top_p=params.top_p, top_k=0, max_new_tokens=params.max_new_tokens,
                eos_token_id=self.stop_ids, pad_token_id=self.pad_id, output_scores=True,
                return_dict_in_generate=True, use_cache=True)
        new = res.sequences[:, width:]
        # one step at a time on the device: stacking all steps' processed logits would be [B, steps, V] at once
        logprobs = torch.stack([torch.log_softmax(step.float(), dim=-1).gather(-1, new[:, k:k + 1]).squeeze(-1)
                                for k, step in enumerate(res.scores)], dim=1).cpu()
        new = new.cpu()
        gens = []
        for i in range(len(prompts)):
            row = new[i].tolist()
            stop = next((k for k, t in enumerate(row) if t in self.stop_ids), None)
            n = stop + 1 if stop is not None else len(row)
            gens.append(Generation(row[:n], logprobs[i, :n].tolist(), stop is not None))
        return gens

    def sync_weights(self, state_dict: dict[str, torch.Tensor], step: int) -> None:
        if not self.shared:
            self.lm.load_state_dict(state_dict, strict=False)


class VLLMRequestError(RuntimeError):
    """A completion request that failed for good: its last attempt, or at once an error no retry can fix."""

    def __init__(self, url: str, status: int | None, attempts: int, elapsed_s: float, detail: str) -> None:
        super().__init__(f"POST {url} failed after {attempts} attempt(s) in {elapsed_s:.1f} s "
                         f"(status {status if status is not None else 'none: no HTTP answer'}): {detail}")
        self.url, self.status, self.attempts = url, status, attempts


class VLLMEngine:
    """Rollouts from a vLLM OpenAI-compatible server via ``/v1/completions`` with token-id prompts.

    Asks for the sampled token's logprob (``logprobs: 1``) and the ids themselves (``return_token_ids``, or
    ``return_tokens_as_token_ids`` on older servers), so no text is re-tokenized. Start the server with
    ``--logprobs-mode processed_logprobs`` when sampling at a temperature other than 1, so that the logprobs are
    those of the distribution the tokens came from. After each update the trainer's weights are written to
    ``weights_dir`` and the server reloads them (``parasim.real.vllm_client``).

    A server that is busy or restarting (connection errors, timeouts, 408 / 429 / 5xx: the real-tools client's
    rule, ``parasim.real.client.retryable_status``) must not fail a GRPO step: each request gets up to
    ``retries`` more attempts, ``backoff_s`` doubled each time with up to ``jitter`` of random stretch (``rng``;
    seed it for reproducible waits), all within ``deadline_s`` from the first attempt. Then, or at once for any
    other error, :class:`VLLMRequestError` names the URL, the last status and the attempts. ``timeout_s`` is
    httpx's per-operation timeout, capped by what is left of the deadline. ``sleep`` and ``clock`` are the waits
    and the deadline's time (tests pass a fake pair).
    """

    def __init__(self, base_url: str, model: str, stop_ids: Sequence[int], weights_dir: str | Path,
                 concurrency: int = 64, timeout_s: float = 600.0, retries: int = 4, backoff_s: float = 1.0,
                 jitter: float = 0.5, deadline_s: float = 1800.0, rng: random.Random | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        import httpx

        if type(retries) is not int or not 0 <= retries <= 20:
            raise ValueError(f"VLLMEngine retries={retries!r}: must be an int in [0, 20]")
        numbers: tuple[tuple[str, float, str, Callable[[float], bool]], ...] = (
            ("timeout_s", timeout_s, "> 0", lambda v: v > 0), ("backoff_s", backoff_s, ">= 0", lambda v: v >= 0),
            ("jitter", jitter, "in [0, 1]", lambda v: 0 <= v <= 1), ("deadline_s", deadline_s, "> 0", lambda v: v > 0))
        for name, value, allowed, ok in numbers:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
                raise ValueError(f"VLLMEngine {name}={value!r}: must be a number {allowed}")
        self.base_url, self.model, self.stop_ids = base_url.rstrip("/").removesuffix("/v1"), model, list(stop_ids)
        self.weights_dir = Path(weights_dir)
        self.concurrency = concurrency
        self.timeout_s, self.retries, self.backoff_s, self.jitter = timeout_s, retries, backoff_s, jitter
        self.deadline_s, self.rng, self.sleep, self.clock = deadline_s, rng or random.Random(), sleep, clock
        self.client = httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int) -> list[Generation]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda a: self._one(a[1], params, seed + a[0]), enumerate(prompts)))

    def _one(self, prompt: Sequence[int], params: SamplingParams, seed: int) -> Generation:
        body = {
            "model": self.model, "prompt": list(prompt), "max_tokens": params.max_new_tokens,
            "temperature": params.temperature, "top_p": params.top_p, "seed": int(seed) % 2**31,
            "logprobs": 1, "return_token_ids": True, "return_tokens_as_token_ids": True,
            "skip_special_tokens": False, "stop_token_ids": self.stop_ids,
        }
        choice = self._post("/v1/completions", body)["choices"][0]
        return parse_completion_choice(choice, self.stop_ids)

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` with the retries of the class docstring; the decoded JSON of the first 200 answer."""
        import httpx

        from parasim.real.client import backoff_delay, retryable_status

        url, start = f"{self.base_url}{path}", self.clock()
        attempt = 0
        while True:
            attempt += 1
            left = self.deadline_s - (self.clock() - start)
            status: int | None = None
            try:
                # a sleep may overshoot what the deadline check allowed: never pass httpx a timeout <= 0
                resp = self.client.post(path, json=body, timeout=min(self.timeout_s, max(left, 1e-3)))
            except httpx.TransportError as err:  # refused, reset, timed out
                detail, transient = f"{type(err).__name__}: {err}"[:300], True
            else:
                if resp.status_code == 200:
                    return resp.json()
                status, transient = resp.status_code, retryable_status(resp.status_code)
                detail = f"HTTP {status}: {resp.text[:300]}"
            delay = backoff_delay(self.backoff_s, attempt, self.jitter, self.rng)
            elapsed = self.clock() - start
            if not transient or attempt > self.retries or elapsed + delay >= self.deadline_s:
                why = ("not retryable" if not transient else "retries exhausted" if attempt > self.retries
                       else f"the next retry would pass the {self.deadline_s:g} s deadline")
                raise VLLMRequestError(url, status, attempt, elapsed, f"{detail} ({why})")
            self.sleep(delay)

    def sync_weights(self, state_dict: dict[str, torch.Tensor], step: int) -> None:
        from parasim.real import vllm_client

        vllm_client.push_weights(self.base_url, state_dict, self.weights_dir, step=step, client=self.client)


def parse_completion_choice(choice: dict[str, Any], stop_ids: Sequence[int]) -> Generation:
    """Token ids and sampled logprobs of one ``/v1/completions`` choice (ids from ``token_ids`` or from the
    ``token_id:N`` strings that ``return_tokens_as_token_ids`` produces)."""
    lp = choice.get("logprobs") or {}
    ids = choice.get("token_ids")
    if ids is None:
        ids = [int(str(t).split(":", 1)[1]) for t in lp.get("tokens") or []]
    logprobs = [float(x) if x is not None else 0.0 for x in lp.get("token_logprobs") or []]
    if len(logprobs) != len(ids):
        raise ValueError(f"vLLM returned {len(ids)} token ids but {len(logprobs)} logprobs; "
                         "the request must set logprobs and return_token_ids")
    finished = bool(ids) and ids[-1] in stop_ids or choice.get("finish_reason") == "stop"
    return Generation(list(ids), logprobs, finished)


# ------------------------------------------------------------------------------------------- the loop
class Stream:
    """One episode's token stream, kept in step with the environment's conversation.

    The environment returns the whole conversation each step (a list of chat messages, rendered with the
    tokenizer's chat template, or a string already rendered). The new environment text of a step is the rendered
    conversation past the end of the manager's last turn; the manager's turn itself is already in the stream as
    the ids it generated.
    """

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]] | None, group_id: int,
                 max_tokens: int) -> None:
        self.tok, self.tools, self.max_tokens = tokenizer, tools, max_tokens
        self.eos = tokenizer.eos_token or ""
        self.traj = TokenTrajectory([], [], [], group_id=group_id)
        self._prev: Any = None
        self._last_gen: Generation | None = None

    def render(self, conversation: Any) -> str:
        if isinstance(conversation, str):
            return conversation
        return self.tok.apply_chat_template(list(conversation), tools=self.tools or None, tokenize=False,
                                            add_generation_prompt=True)

    def observe(self, conversation: Any) -> None:
        """Append the environment text that is new since the manager's last turn."""
        full = self.render(conversation)
        if self._prev is None:
            text = full
        else:
            text = self._new_text(full)
        self.traj.append(self.tok(text, add_special_tokens=False)["input_ids"], ROLE_ENV)
        self._prev = conversation

    def _new_text(self, full: str) -> str:
        gen = self._last_gen
        assert gen is not None
        action = self.tok.decode(gen.token_ids, skip_special_tokens=False)
        done = self.render(self._prev) + action
        if full.startswith(done):
            return full[len(done):]
        # The environment rendered the manager's turn differently from the raw sample (stripped text, an end of turn
        # the sample lacked): resume right after that turn's end-of-turn token in the new rendering.
        head = self.render(self._prev)
        if not full.startswith(head):
            raise ValueError("the environment's conversation is not an extension of the previous one; "
                             "token streams cannot be kept without re-tokenizing")
        tail = full[len(head):]
        cut = tail.find(self.eos)
        if cut < 0:
            raise ValueError("cannot find the end of the manager's turn in the environment's conversation")
        ended = bool(gen.token_ids) and gen.finished
        return tail[cut + len(self.eos):] if ended else tail[cut:]

    def add_generation(self, gen: Generation) -> str:
        """Append the manager's sampled ids; returns the text the environment receives."""
        self.traj.append(gen.token_ids, ROLE_MANAGER, gen.logprobs)
        self._last_gen = gen
        return self.tok.decode(gen.token_ids, skip_special_tokens=True)

    @property
    def room(self) -> int:
        return self.max_tokens - len(self.traj.input_ids)


@dataclass
class RolloutConfig:
    max_tokens: int = 8192  # per trajectory, prompt + manager + tool feedback
    max_turn_tokens: int = 512  # per manager turn
    temperature: float = 1.0
    top_p: float = 1.0


def collect(envs: Sequence[Any], engine: Engine, tokenizer: Any, seeds: Sequence[tuple[int, int | None]],
            group_ids: Sequence[int], cfg: RolloutConfig, seed: int,
            tools: Sequence[dict[str, Any]] | None = None) -> list[TokenTrajectory]:
    """Run one episode in each env, batching the manager's generations turn by turn.

    ``seeds[i] = (task_seed, tool_seed)``: a group shares its task seed (``reset_for_group``). Each trajectory's
    ``record`` holds the
    env's TrajectoryBatch fields (``info["trajectory"]``) with ``group_id`` set. ``seed`` drives sampling.
    """
    streams = [Stream(tokenizer, tools, int(g), cfg.max_tokens) for g in group_ids]
    infos: list[dict[str, Any]] = [{} for _ in envs]
    for i, env in enumerate(envs):
        obs, infos[i] = reset_for_group(env, *seeds[i])
        streams[i].observe(obs)
    active = list(range(len(envs)))
    turn = 0
    while active:
        room = [i for i in active if streams[i].room > 0]
        for i in sorted(set(active) - set(room)):
            streams[i].traj.truncated = True
            infos[i] = envs[i].unwrapped.end_episode()[4]  # cut off: the env scores it as never answered
        active = room
        if not active:
            break
        max_new = min(cfg.max_turn_tokens, max(streams[i].room for i in active))
        params = SamplingParams(max_new, cfg.temperature, cfg.top_p)
        gens = engine.generate([streams[i].traj.input_ids for i in active], params, seed=seed + 1_000_003 * turn)
        still = []
        for i, gen in zip(active, gens):
            gen = _clip(gen, streams[i].room)
            text = streams[i].add_generation(gen)
            obs, _reward, terminated, truncated, infos[i] = envs[i].step(text)
            if terminated or truncated:
                streams[i].traj.truncated |= bool(truncated) and not terminated
                continue
            streams[i].observe(obs)
            still.append(i)
        active = still
        turn += 1
    return [_finish(s, info) for s, info in zip(streams, infos)]


def reset_for_group(env: Any, task_seed: int, tool_seed: int | None) -> tuple[Any, dict[str, Any]]:
    """Reset so that rollouts with one ``task_seed`` play the same task with their own tool randomness.

    Through the env's public reset options (``ParaOrchText-v0``; as the structured trainer's ``reset_groups``):
    the task index is drawn from ``task_seed``'s stream by the env's ``task_weights()`` (the distribution the env
    would draw from itself) and passed with ``task_seed`` as ``options``, so the rollouts of a group play the
    identical task (simulated tools: row, hidden difficulty, preferred wrong answers, option letters; real tools:
    the engine's task at that index), while ``seed=tool_seed`` seeds each rollout's tool calls. Without a
    ``tool_seed`` the tool calls are seeded from ``task_seed`` too. Envs that expose no task count get
    ``task_seed`` alone.
    """
    unwrapped = env.unwrapped
    options: dict[str, int] = {"task_seed": int(task_seed)}
    num_tasks = getattr(unwrapped, "num_tasks", None)
    if num_tasks:
        rng = np.random.default_rng([int(task_seed), TASK_INDEX_TAG])
        options["task_index"] = int(rng.choice(num_tasks, p=unwrapped.task_weights()))
    return env.reset(seed=int(task_seed if tool_seed is None else tool_seed), options=options)


def _clip(gen: Generation, room: int) -> Generation:
    if len(gen.token_ids) <= room:
        return gen
    return Generation(gen.token_ids[:room], gen.logprobs[:room], False)


def _finish(stream: Stream, info: dict[str, Any]) -> TokenTrajectory:
    traj = stream.traj
    if len(traj.input_ids) > stream.max_tokens:
        traj = truncate(traj, stream.max_tokens)
    record = dict(info.get("trajectory") or {})
    if not record:
        raise ValueError("the episode ended without info['trajectory'] (the TrajectoryBatch fields); "
                         "ParaOrchText-v0 returns it on the terminal step")
    record["group_id"] = traj.group_id
    traj.record = record
    return traj


def rollout_summary(trajs: Sequence[TokenTrajectory]) -> dict[str, float]:
    """Lengths of the batch for the log: total / manager tokens per trajectory, truncation rate."""
    lengths = np.asarray([len(t.input_ids) for t in trajs], np.float64)
    manager = np.asarray([t.manager_tokens for t in trajs], np.float64)
    return {"len_mean": float(lengths.mean()), "len_max": float(lengths.max()),
            "manager_tokens_mean": float(manager.mean()),
            "truncated_frac": float(np.mean([t.truncated for t in trajs]))}


def dump_trajectories(path: str | Path, trajs: Sequence[TokenTrajectory]) -> None:
    with Path(path).open("a") as fh:
        for t in trajs:
            fh.write(json.dumps(t.to_json()) + "\n")
