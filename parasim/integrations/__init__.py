"""Bridges from ParaOrchText-v0 to the trainers researchers use: TRL (``parasim.integrations.trl``) and verl
(``parasim.integrations.verl``).

Both bridges score a manager's text the same way, here: ``play_episode`` resets the text env to a task row through
``reset_for_group`` (the reset parasim's own GRPO trainer uses, so that a row's ``task_seed`` names one task and its
``tool_seed`` one stream of tool outcomes), plays the manager's turns, ends an episode the turns left unfinished with
``end_episode`` (cut off, never answered), and returns the terminal info, whose ``reward_components`` the env computed
under its reward config. So a trainer's reward is the environment's reward, for the same text, by construction.
``task_rows`` draws the rows that both trainers' datasets are built from. Nothing here imports TRL or verl.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ENV_ID = "ParaOrchText-v0"
_SEED_STRIDE = 1_000_003  # row k of a dataset seeded s plays task seed s * stride + k (as the expert data do)
_DRAWS_PER_ROW = 20  # task_rows tries at most this many seeds per requested row before giving up


@dataclass(frozen=True)
class TaskRow:
    """One task of a suite as a trainer's dataset row: the first observation (as chat ``messages`` and as the
    rendered ``observation``), the seeds that replay it, and what it is (``task_index`` in the suite,
    ``benchmark`` name, ``ability``: the task's domain, ``gold``: the correct answer's label, "" where the engine
    has no labels)."""

    messages: list[dict[str, Any]]
    observation: str
    task_seed: int
    tool_seed: int
    task_index: int
    benchmark: str
    ability: str
    gold: str


def make_text_env(env_kwargs: Mapping[str, Any] | None = None, reward: Any = None) -> Any:
    """``gym.make("ParaOrchText-v0", **env_kwargs)``, with ``reward`` (a preset name or RewardConfig) as its reward
    config when given; naming the reward in both places is an error, since one would silently win."""
    import gymnasium as gym

    import parasim  # noqa: F401  (registers the environments)

    kwargs = dict(env_kwargs or {})
    if reward is not None:
        if "reward" in kwargs:
            raise ValueError(f"reward: given both as reward={reward!r} and as env_kwargs['reward']="
                             f"{kwargs['reward']!r}; pass it once")
        kwargs["reward"] = reward
    return gym.make(ENV_ID, **kwargs)


def play_episode(env: Any, task_seed: int, tool_seed: int, turns: Sequence[str]) -> dict[str, Any]:
    """Play ``turns`` (the manager's texts, one per turn) on the row ``(task_seed, tool_seed)`` and return the
    terminal info; turns after the episode ended are not played, and an episode still running after the last turn
    is ended as cut off (``ParaOrchTextEnv.end_episode``)."""
    from training.llm.rollout import reset_for_group

    reset_for_group(env, int(task_seed), int(tool_seed))
    for text in turns:
        if not isinstance(text, str):
            raise TypeError(f"turns: each turn is the manager's text (str), got {type(text).__name__}")
        _obs, _reward, terminated, truncated, info = env.step(text)
        if terminated or truncated:
            return info
    return env.unwrapped.end_episode()[4]


def task_rows(n: int, env_kwargs: Mapping[str, Any] | None = None, seed: int = 0) -> list[TaskRow]:
    """``n`` task rows of the env's suite, with distinct first observations (a TRL rollout finds its row from the
    prompt alone, which is all TRL passes it): row k tries task seed ``seed * 1_000_003 + k`` and skips a seed
    whose observation an earlier row already has, trying at most ``20 * n`` seeds."""
    from parasim.protocol.schema import Domain
    from training.llm.rollout import reset_for_group

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected an int >= 1 (the number of rows), got {n!r}")
    env = make_text_env(env_kwargs)
    rows: list[TaskRow] = []
    seen: set[str] = set()
    for k in range(_DRAWS_PER_ROW * n):
        if len(rows) == n:
            break
        task_seed = int(seed) * _SEED_STRIDE + k
        obs, info = reset_for_group(env, task_seed, task_seed)
        if obs in seen:
            continue
        seen.add(obs)
        labels = env.unwrapped.labels or [""]
        rows.append(TaskRow(messages=json.loads(json.dumps(info["messages"])), observation=obs, task_seed=task_seed,
                            tool_seed=task_seed, task_index=int(info.get("task_index", -1)),
                            benchmark=_benchmark_name(info.get("benchmark")),
                            ability=Domain(int(info["task"].domain)).name.lower(), gold=str(labels[0])))
    if len(rows) < n:
        raise ValueError(f"n: asked for {n} rows with distinct prompts, the suite gave {len(rows)} in "
                         f"{_DRAWS_PER_ROW * n} seeds; lower n")
    return rows


def _benchmark_name(index: Any) -> str:
    """The name of ``parasim.tasks.suites.BENCHMARKS[index]`` ("" when the engine names none)."""
    from parasim.tasks.suites import BENCHMARKS

    return BENCHMARKS[int(index)].name if index is not None and 0 <= int(index) < len(BENCHMARKS) else ""
