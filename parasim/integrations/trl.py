"""ParaOrchText-v0 in Hugging Face TRL's ``GRPOTrainer``: a task dataset, reward functions, a multi-turn rollout.

- ``task_dataset(n, env_kwargs=...)``: a ``datasets.Dataset`` of task rows in TRL's prompt format, conversational
  (``prompt`` = the env's first chat messages, which TRL renders with the tokenizer's chat template) or standard
  (``prompt`` = the env's rendered observation), with the columns ``task_seed``, ``tool_seed``, ``task_index``,
  ``benchmark`` that TRL passes on to reward functions.
- ``make_reward_func(preset, env_kwargs)``: a reward function with TRL's signature
  ``(prompts, completions, **columns) -> list[float]`` that plays each completion's tool calls through the env on
  its row's task (simulated tools replay exactly) and returns the env's reward under ``preset``. A completion is
  one manager turn (standard format: its text; conversational: its assistant messages, tool calls TRL parsed into
  ``tool_calls`` written back as ``<tool_call>`` blocks); an episode the completion leaves unfinished ends there,
  never answered.
- ``ParaOrchRollout``: the multi-turn adapter, a ``rollout_func`` for ``GRPOTrainer(rollout_func=...)``. Why that
  mechanism and not TRL's ``environment_factory``: TRL's tool loop parses tool calls with the tokenizer's response
  schema and runs one Python method per call, while a ParaOrchText round is the set of parallel calls of one turn
  (run together, up to ``max_parallel``, budgets and ids per round) and must be parsed by parasim's own parser,
  whose repairs and FORMAT_ERR / INVALID_TOOL statuses the reward charges. ``rollout_func`` hands the whole
  episode to the env: each turn the policy (the trainer's own model) samples from the exact token stream, the env
  parses and runs the round, and its feedback is appended as tokens with ``env_mask`` 0, so only the manager's
  tokens are trained. It returns the env's own episode reward as the ``env_reward`` column (``reward_func``
  passes it to TRL, logging the episodes' ``reward_components`` and ``correct`` columns per step) and the manager's
  turns as ``manager_turns``, which ``make_reward_func`` replays instead of the completion when present. vLLM
  generation is refused, for the reason docs/bridges.md gives; docs/bridges/trl_grpo.py is a complete script.

Versions: written against TRL 1.16 (``rollout_func`` with ``env_mask``, the reward kwargs ``log_metric``).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parasim.integrations import make_text_env, play_episode, task_rows


def task_dataset(n: int, *, env_kwargs: Mapping[str, Any] | None = None, seed: int = 0,
                 conversational: bool = True) -> Any:
    """``n`` rows of the env's task suite as a TRL prompt dataset (see the module docstring); the prompts are
    distinct (``parasim.integrations.task_rows``). An env rendering through a chat template (``tokenizer`` in
    ``env_kwargs``) takes ``conversational=False``: TRL renders conversational prompts without parasim's tool list,
    which such an env leaves to the template."""
    from datasets import Dataset

    if conversational and (env_kwargs or {}).get("tokenizer") is not None:
        raise ValueError("conversational: TRL would render these prompts without the tool list (tools=), which an "
                         "env with tokenizer= leaves to the chat template; use conversational=False (the rendered "
                         "observation as the prompt)")
    rows = task_rows(n, env_kwargs, seed)
    return Dataset.from_list([{
        "prompt": row.messages if conversational else row.observation, "task_seed": row.task_seed,
        "tool_seed": row.tool_seed, "task_index": row.task_index, "benchmark": row.benchmark} for row in rows])


def completion_turns(completion: Any) -> list[str]:
    """The manager's turns in a TRL completion: a standard completion is one turn; a conversational one has a turn
    per assistant message, whose ``tool_calls`` (when TRL's response parser split them off) are written back as
    Hermes ``<tool_call>`` blocks after the content."""
    if isinstance(completion, str):
        return [completion]
    if not isinstance(completion, list):
        raise TypeError(f"completion: expected a str (standard format) or a list of messages (conversational), got "
                        f"{type(completion).__name__}")
    turns = []
    for message in completion:
        if message.get("role") != "assistant":
            continue
        blocks = [_tool_call_text(call) for call in message.get("tool_calls") or ()]
        turns.append("\n".join([str(message.get("content") or ""), *blocks]) if blocks else
                     str(message.get("content") or ""))
    return turns


def _tool_call_text(call: Mapping[str, Any]) -> str:
    """One parsed tool call (OpenAI form, ``{"function": {"name", "arguments"}}``) as a ``<tool_call>`` block."""
    fn = call.get("function", call)
    arguments = fn.get("arguments", {})
    if isinstance(arguments, str):
        return f'<tool_call>\n{{"name": {json.dumps(fn.get("name"))}, "arguments": {arguments}}}\n</tool_call>'
    return "<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": arguments}) + "\n</tool_call>"


def make_reward_func(preset: Any = "paramanager", env_kwargs: Mapping[str, Any] | None = None) -> Callable[..., list]:
    """A TRL reward function scoring completions on their rows' tasks with the env's reward under ``preset`` (a
    preset name or RewardConfig). It reads the rows' ``task_seed`` / ``tool_seed`` columns, and ``manager_turns``
    when a ``ParaOrchRollout`` supplied them; it logs the mean of each reward component and the accuracy
    (``parasim/<component>``, ``parasim/correct``) through TRL's ``log_metric``."""
    env = make_text_env(env_kwargs, preset)

    def reward(prompts: Sequence[Any], completions: Sequence[Any], task_seed: Sequence[int],
               tool_seed: Sequence[int], manager_turns: Sequence[Sequence[str]] | None = None,
               log_metric: Callable[[str, float], None] | None = None, **_columns: Any) -> list[float]:
        if not len(prompts) == len(completions) == len(task_seed) == len(tool_seed):
            raise ValueError(f"reward: {len(prompts)} prompts, {len(completions)} completions, {len(task_seed)} "
                             f"task_seed and {len(tool_seed)} tool_seed values; expected one of each per completion")
        infos = []
        for i, completion in enumerate(completions):
            turns = list(manager_turns[i]) if manager_turns is not None else completion_turns(completion)
            infos.append(play_episode(env, task_seed[i], tool_seed[i], turns))
        if log_metric is not None:
            _log_means(log_metric, infos)
        return [info["reward_components"]["total"] for info in infos]

    reward.__name__ = f"parasim_{preset if isinstance(preset, str) else preset.formula}"
    return reward


def _log_means(log_metric: Callable[[str, float], None], infos: Sequence[Mapping[str, Any]]) -> None:
    """The batch means of every reward component and of the accuracy, as TRL metrics."""
    for name in infos[0]["reward_components"]:
        log_metric(f"parasim/{name}", sum(i["reward_components"][name] for i in infos) / len(infos))
    log_metric("parasim/correct", sum(bool(i["correct"]) for i in infos) / len(infos))


class ParaOrchRollout:
    """A TRL ``rollout_func`` that plays whole ParaOrchText-v0 episodes with the trainer's policy (see the module
    docstring). ``dataset`` is the ``task_dataset`` the trainer trains on: TRL passes a rollout only the prompts, so
    each prompt's row (its seeds) is found by the prompt. ``max_turn_tokens`` bounds one manager turn; the whole
    completion (manager turns and env feedback) is bounded by the trainer's ``max_completion_length``, and an
    episode that reaches it ends there, never answered. Sampling uses the trainer's ``temperature`` and ``top_p``.
    Generation runs on the trainer's own model (``use_vllm=False``; why not vLLM: docs/bridges.md). The rollout
    also hands the reward functions each episode's ``reward_components`` and ``correct``, which ``reward_func``
    logs per step."""

    def __init__(self, dataset: Any, *, preset: Any = "paramanager", env_kwargs: Mapping[str, Any] | None = None,
                 max_turn_tokens: int = 512) -> None:
        if isinstance(max_turn_tokens, bool) or not isinstance(max_turn_tokens, int) or max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens: expected an int >= 1, got {max_turn_tokens!r}")
        self.rows = {_prompt_key(row["prompt"]): (int(row["task_seed"]), int(row["tool_seed"])) for row in dataset}
        self.preset, self.env_kwargs, self.max_turn_tokens = preset, dict(env_kwargs or {}), max_turn_tokens
        self.envs: list[Any] = []
        self.calls = 0

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        """One episode per prompt: TRL's ``prompt_ids`` / ``completion_ids`` / ``logprobs`` plus ``env_mask`` (1 on
        the manager's tokens) and the columns ``env_reward``, ``manager_turns`` for the reward functions."""
        from trl.models import unwrap_model_for_generation

        from training.llm.rollout import HFEngine, SamplingParams

        if getattr(trainer, "use_vllm", False):
            raise ValueError("use_vllm: ParaOrchRollout samples with the trainer's own model; set use_vllm=False "
                             "(TRL's vLLM generate is one collective call per batch with one max_completion_length, "
                             "while an episode's turns differ in number per prompt and rank and each is bounded by "
                             "the room it has left: docs/bridges.md)")
        seeds = [self._row(p) for p in prompts]
        while len(self.envs) < len(prompts):
            self.envs.append(make_text_env(self.env_kwargs, self.preset))
        tokenizer = trainer.processing_class
        params = SamplingParams(self.max_turn_tokens, float(trainer.temperature), float(trainer.top_p))
        seed = int(trainer.args.seed) * 1_000_003 + self.calls
        self.calls += 1
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                                         gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs
                                         ) as model:
            engine = HFEngine(model, [tokenizer.eos_token_id], tokenizer.pad_token_id, trainer.accelerator.device,
                              shared=True)
            episodes = play_batch(self.envs[:len(prompts)], seeds, engine, tokenizer, params,
                                  int(trainer.max_completion_length), seed)
        return {key: [e[key] for e in episodes] for key in episodes[0]}

    def _row(self, prompt: Any) -> tuple[int, int]:
        try:
            return self.rows[_prompt_key(prompt)]
        except KeyError:
            raise ValueError("prompt: not a row of the dataset this ParaOrchRollout was built with (TRL passes a "
                             "rollout only the prompt, and the prompt names the task); build both from the same "
                             "task_dataset") from None

    @staticmethod
    def reward_func(prompts: Sequence[Any], completions: Sequence[Any], env_reward: Sequence[float],
                    reward_components: Sequence[Mapping[str, float]] | None = None,
                    correct: Sequence[bool] | None = None, log_metric: Callable[[str, float], None] | None = None,
                    **_columns: Any) -> list[float]:
        """The reward of each episode as the env paid it (the ``env_reward`` column of the rollout); for
        ``GRPOTrainer(reward_funcs=rollout.reward_func)``. It needs no replay, so it also serves real tools. It
        logs the batch means of the episodes' reward components and accuracy (``parasim/<component>``,
        ``parasim/correct``) through TRL's ``log_metric``, as ``make_reward_func`` does."""
        if len(env_reward) != len(completions):
            raise ValueError(f"env_reward: {len(env_reward)} values for {len(completions)} completions; use it with "
                             "the rollout_func=ParaOrchRollout(...) that supplies them")
        if log_metric is not None and reward_components is not None and correct is not None:
            _log_means(log_metric, [{"reward_components": rc, "correct": c}
                                    for rc, c in zip(reward_components, correct)])
        return [float(r) for r in env_reward]


def _prompt_key(prompt: Any) -> str:
    """A dataset prompt (a string, or chat messages) as a lookup key."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def play_batch(envs: Sequence[Any], seeds: Sequence[tuple[int, int]], engine: Any, tokenizer: Any, params: Any,
               max_completion: int, seed: int) -> list[dict[str, Any]]:
    """Play one episode per env on its row ``seeds[i] = (task_seed, tool_seed)``, batching the policy's turns.

    The token stream is ``training.llm.rollout.Stream``'s: the first observation is the prompt, each turn
    appends the sampled ids (with their logprobs) and the env's new text, never re-tokenizing what is there. An
    episode whose completion reaches ``max_completion`` tokens is ended with ``end_episode``; the completion is
    cut to ``max_completion``. Returns per episode the TRL rollout fields and the env's reward."""
    from training.llm.data import ROLE_MANAGER
    from training.llm.rollout import Generation, SamplingParams, Stream, reset_for_group

    streams, turns, infos, prompt_len = [], [[] for _ in envs], [dict() for _ in envs], []
    for env, (task_seed, tool_seed) in zip(envs, seeds):
        obs, _info = reset_for_group(env, task_seed, tool_seed)
        stream = Stream(tokenizer, None, 0, max_tokens=0)
        stream.observe(obs)
        prompt_len.append(len(stream.traj.input_ids))
        stream.max_tokens = prompt_len[-1] + max_completion
        streams.append(stream)
    active, turn = list(range(len(envs))), 0
    while active:
        for i in [i for i in active if streams[i].room <= 0]:
            infos[i] = envs[i].unwrapped.end_episode()[4]
        active = [i for i in active if streams[i].room > 0]
        if not active:
            break
        width = min(params.max_new_tokens, max(streams[i].room for i in active))
        gens = engine.generate([streams[i].traj.input_ids for i in active],
                               SamplingParams(width, params.temperature, params.top_p), seed=seed + 7919 * turn)
        still = []
        for i, gen in zip(active, gens):
            room = streams[i].room
            if len(gen.token_ids) > room:
                gen = Generation(gen.token_ids[:room], gen.logprobs[:room], False)
            text = streams[i].add_generation(gen)
            turns[i].append(text)
            obs, _reward, terminated, truncated, infos[i] = envs[i].step(text)
            if not (terminated or truncated):
                streams[i].observe(obs)
                still.append(i)
        active, turn = still, turn + 1
    out = []
    for stream, n, episode_turns, info in zip(streams, prompt_len, turns, infos):
        traj = stream.traj
        ids, logprobs = traj.input_ids[n:n + max_completion], traj.sampled_logprobs[n:n + max_completion]
        mask = [int(role == ROLE_MANAGER) for s, e, role in traj.spans for _ in range(s, e)][n:n + max_completion]
        out.append({"prompt_ids": traj.input_ids[:n], "completion_ids": ids, "logprobs": logprobs, "env_mask": mask,
                    "env_reward": info["reward_components"]["total"], "manager_turns": episode_turns,
                    "reward_components": dict(info["reward_components"]), "correct": bool(info["correct"])})
    return out
