"""ParaOrchText-v0 for verl: a reward function, an agent loop, and task suites in verl's Parquet layout.

Users name ``parasim.integrations.verl`` (its file path or ``pkg://``), which re-exports this module; see there
why the code lives here.

- ``export_verl_parquet(suite, path, n)``: ``n`` tasks of a suite as verl's RL dataset (one row per task:
  ``data_source`` ``"parasim/<suite>"``, ``agent_name`` ``"parasim_agent"``, ``prompt`` the env's first chat
  messages, ``ability`` the task's domain, ``reward_model`` ``{"style": "rule", "ground_truth": <gold label>}``, and
  ``extra_info`` with the row's seeds, task index, benchmark, and the env options and reward config as JSON text,
  so every row replays alone). Written with pyarrow; needs no verl.
- ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``: verl's reward-function signature.
  It plays the manager's text through the env on the row's task and returns verl's dict form ``{"score": <the
  env's reward>, "acc": <correct>, <each reward component>}``. The text is ``solution_str`` as one turn, or the
  agent loop's ``manager_turns`` when verl merged them into ``extra_info``; data sources other than parasim's go to
  verl's ``default_compute_score``.
- ``ParaOrchAgentLoop``: a verl agent loop (verl's ``AgentLoopBase``, registered as ``"parasim_agent"``) that runs
  the ParaOrchText protocol: each turn the server manager samples the manager's text from the exact token stream,
  the env parses it and runs its calls as one parallel round (simulated tools, or real ones through an
  ``engine_factory``), and the env's feedback is appended with response mask 0. The episode's reward is the env's
  (``reward_score``), with the turns and the reward components in ``extra_fields``. To use it, point
  ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` to a YAML list holding
  ``{name: parasim_agent, _target_: parasim.integrations.verl.ParaOrchAgentLoop}`` (optional keys:
  ``engine_factory``, ``use_chat_template``, ``max_turn_tokens``; docs/bridges.md has the files).

Versions: written against verl 0.9.1's ``verl.experimental.agent_loop`` (``AgentLoopBase``, ``AgentLoopOutput``,
``AgentLoopMetrics``, ``DictConfigWrap``, ``register``, and the server manager's ``generate(request_id=,
prompt_ids=, sampling_params=) -> TokenOutput(token_ids, log_probs, ...)``). Without verl the agent loop does not
exist (asking for it raises ImportError saying so); with verl installed but one of the modules its agent loop
imports missing, importing this module raises an ImportError naming the missing module: there is no stand-in.
"""
from __future__ import annotations

import asyncio
import dataclasses
import importlib
import importlib.util
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from parasim.integrations import make_text_env, play_episode, task_rows

AGENT_NAME = "parasim_agent"
DATA_SOURCE_PREFIX = "parasim/"

VERL_INSTALLED = importlib.util.find_spec("verl") is not None
if VERL_INSTALLED:  # verl's own classes, or an error naming what a partial install lacks; never a stand-in
    try:
        from verl.experimental.agent_loop.agent_loop import (
            AgentLoopBase,
            AgentLoopMetrics,
            AgentLoopOutput,
            DictConfigWrap,  # noqa: F401  (verl's config wrapper, for callers that build the loop)
            register,
        )
    except ImportError as err:
        raise ImportError(f"verl is installed but its agent loop (verl.experimental.agent_loop) does not import: "
                          f"{err.name or err} is missing ({err}); install it (docs/bridges.md lists what verl's "
                          "modules need) or uninstall verl") from err


# ------------------------------------------------------------------------------------------- rows and Parquet
@dataclass(frozen=True)
class RowSpec:
    """What a row's ``extra_info`` says to replay its task: seeds, env options and the reward config."""

    task_seed: int
    tool_seed: int
    env_kwargs: dict[str, Any]
    reward: Any

    @classmethod
    def from_extra_info(cls, extra_info: Mapping[str, Any] | None) -> RowSpec:
        from parasim.scoring.rewards import RewardConfig

        info = dict(extra_info or {})
        missing = [k for k in ("task_seed", "tool_seed", "env_kwargs", "reward") if k not in info]
        if missing:
            raise ValueError(f"extra_info: missing {missing}; parasim rows carry task_seed, tool_seed, env_kwargs "
                             "and reward (export them with export_verl_parquet)")
        return cls(int(info["task_seed"]), int(info["tool_seed"]), json.loads(info["env_kwargs"]),
                   RewardConfig(**json.loads(info["reward"])))

    @property
    def env_key(self) -> str:
        """The env a row needs, as a key of the env pool."""
        return json.dumps([self.env_kwargs, dataclasses.asdict(self.reward)], sort_keys=True)


def verl_rows(suite: str, n: int, *, env_kwargs: Mapping[str, Any] | None = None, reward: Any = "paramanager",
              seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """The records ``export_verl_parquet`` writes (see the module docstring)."""
    from parasim.scoring.rewards import resolve_config

    if not isinstance(suite, str):
        raise TypeError(f"suite: expected a suite name or a tasks file path (str), so that each row can name it, "
                        f"got {type(suite).__name__}")
    kwargs = dict(env_kwargs or {})
    for key in ("suite", "reward", "tools", "engine"):
        if key in kwargs:
            raise ValueError(f"env_kwargs[{key!r}]: set by export_verl_parquet itself (suite=, reward=; simulated "
                             f"tools), got {kwargs[key]!r}")
    kwargs["suite"] = suite
    reward_json = json.dumps(dataclasses.asdict(resolve_config(reward)))
    env_json = json.dumps(kwargs, sort_keys=True)
    name = Path(suite).stem if Path(suite).suffix else suite  # a tasks file is named by its stem
    return [{
        "data_source": DATA_SOURCE_PREFIX + name, "agent_name": AGENT_NAME, "prompt": row.messages,
        "ability": row.ability, "reward_model": {"style": "rule", "ground_truth": row.gold},
        "extra_info": {"split": split, "index": k, "task_seed": row.task_seed, "tool_seed": row.tool_seed,
                       "task_index": row.task_index, "benchmark": row.benchmark, "env_kwargs": env_json,
                       "reward": reward_json},
    } for k, row in enumerate(task_rows(n, kwargs, seed))]


def export_verl_parquet(suite: str, path: str | Path, n: int, *, env_kwargs: Mapping[str, Any] | None = None,
                        reward: Any = "paramanager", seed: int = 0, split: str = "train") -> Path:
    """Write ``n`` tasks of ``suite`` (a suite name or a tasks file) as a verl RL dataset at ``path`` (Parquet;
    parent folders are created) and return the path. ``env_kwargs`` are further ParaOrchText-v0 options (pool,
    max_rounds, ...), ``reward`` a preset name or RewardConfig, ``seed`` picks the rows (distinct prompts)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(path)
    records = verl_rows(suite, n, env_kwargs=env_kwargs, reward=reward, seed=seed, split=split)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), out)
    return out


# ------------------------------------------------------------------------------------------- reward function
_ENV_POOL: dict[tuple[str, int], list[Any]] = {}  # idle simulated envs by (row options, id of the tokenizer)


def _acquire_env(spec: RowSpec, engine: Any = None, tokenizer: Any = None) -> Any:
    """An env for this row: simulated ones come from the pool (built when none is idle), so rows do not pay for
    building the simulator each; a real-tools env is built around its own engine."""
    kwargs = {**spec.env_kwargs, **({"tokenizer": tokenizer} if tokenizer is not None else {})}
    if engine is not None:
        return make_text_env({**kwargs, "tools": "real", "engine": engine}, spec.reward)
    idle = _ENV_POOL.setdefault((spec.env_key, id(tokenizer)), [])
    return idle.pop() if idle else make_text_env(kwargs, spec.reward)


def _release_env(spec: RowSpec, env: Any, engine: Any = None, tokenizer: Any = None) -> None:
    """Return a simulated env to the pool once its episode is over."""
    if engine is None:
        _ENV_POOL.setdefault((spec.env_key, id(tokenizer)), []).append(env)


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  **kwargs: Any) -> dict[str, float] | float:
    """verl's reward function for parasim rows (see the module docstring); ``ground_truth`` is not needed, since the
    env's verifier decides correctness. Other data sources are scored by verl's ``default_compute_score``."""
    if not str(data_source).startswith(DATA_SOURCE_PREFIX):
        if not VERL_INSTALLED:
            raise ValueError(f"data_source: {data_source!r} is not a parasim row (expected '{DATA_SOURCE_PREFIX}"
                             "<suite>'), and verl, whose default_compute_score scores other sources, is not installed")
        from verl.utils.reward_score import default_compute_score

        return default_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    spec = RowSpec.from_extra_info(extra_info)
    turns = (extra_info or {}).get("manager_turns")
    env = _acquire_env(spec)
    try:
        info = play_episode(env, spec.task_seed, spec.tool_seed,
                            [solution_str] if turns is None else [str(t) for t in turns])
    finally:
        _release_env(spec, env)
    components = info["reward_components"]
    return {"score": components["total"], "acc": float(bool(info["correct"])),
            **{k: v for k, v in components.items() if k != "total"}}


# ------------------------------------------------------------------------------------------- agent loop
def _import_factory(spec: str | Callable[..., Any]) -> Callable[..., Any]:
    """An engine factory given as a callable or as ``"package.module:function"``."""
    if callable(spec):
        return spec
    module, _, name = str(spec).partition(":")
    if not name:
        raise ValueError(f"engine_factory: expected a callable or 'package.module:function', got {spec!r}")
    return getattr(importlib.import_module(module), name)


if VERL_INSTALLED:  # the agent loop subclasses verl's own base class
    @register(AGENT_NAME)
    class ParaOrchAgentLoop(AgentLoopBase):
        """One ParaOrchText-v0 episode per dataset row (see the module docstring).

        Options (keys of its entry in the agent loop config): ``engine_factory`` (a callable or
        ``"package.module:function"`` taking the row's ``extra_info`` and returning an EpisodeEngine over real tools,
        e.g. ``parasim.real.engine.RealEpisodeEngine``; without it the tools are simulated), ``use_chat_template``
        (render the conversation with the tokenizer's chat template and role "tool" results instead of the Hermes
        default), ``max_turn_tokens`` (a bound on one manager turn; the whole response is bounded by
        ``actor_rollout_ref.rollout.response_length``, and an episode that reaches it ends there, never answered).
        """

        def __init__(self, *args: Any, engine_factory: str | Callable[..., Any] | None = None,
                     use_chat_template: bool = False, max_turn_tokens: int | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            rollout = self.config.actor_rollout_ref.rollout
            self.response_length = int(rollout.response_length)
            self.engine_factory = _import_factory(engine_factory) if engine_factory is not None else None
            self.use_chat_template = bool(use_chat_template)
            if max_turn_tokens is not None and (isinstance(max_turn_tokens, bool)
                                                or not isinstance(max_turn_tokens, int)
                                                or max_turn_tokens < 1):
                raise ValueError(f"max_turn_tokens: expected None or an int >= 1, got {max_turn_tokens!r}")
            self.max_turn_tokens = max_turn_tokens

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
            """Play the row's episode; ``kwargs`` are the row's fields (``extra_info`` names the task)."""
            extra_info = dict(kwargs.get("extra_info") or {})
            spec = RowSpec.from_extra_info(extra_info)
            engine = self.engine_factory(extra_info) if self.engine_factory is not None else None
            tokenizer = self.tokenizer if self.use_chat_template else None
            env = _acquire_env(spec, engine, tokenizer)
            try:
                return await self._play(env, spec, sampling_params)
            finally:
                _release_env(spec, env, engine, tokenizer)

        async def _play(self, env: Any, spec: RowSpec, sampling_params: dict[str, Any]) -> AgentLoopOutput:
            from training.llm.data import ROLE_MANAGER
            from training.llm.rollout import Generation, Stream, reset_for_group

            loop = asyncio.get_running_loop()
            obs, _info = await loop.run_in_executor(None, reset_for_group, env, spec.task_seed, spec.tool_seed)
            stream = Stream(self.tokenizer, None, 0, max_tokens=0)
            stream.observe(obs)
            n = len(stream.traj.input_ids)
            stream.max_tokens = n + self.response_length
            turns: list[str] = []
            replies = 0  # env messages after a manager turn
            metrics = AgentLoopMetrics()
            request_id, eos = uuid4().hex, self.tokenizer.eos_token_id
            while True:
                room = stream.room
                if room <= 0:
                    info = (await loop.run_in_executor(None, env.unwrapped.end_episode))[4]
                    break
                params = {**sampling_params, "max_tokens": min(room, self.max_turn_tokens or room)}
                start = time.perf_counter()
                out = await self.server_manager.generate(request_id=request_id, prompt_ids=list(stream.traj.input_ids),
                                                         sampling_params=params)
                metrics.generate_sequences += time.perf_counter() - start
                ids = list(out.token_ids)[:room]
                logprobs = list(out.log_probs)[:room] if out.log_probs else [0.0] * len(ids)
                text = stream.add_generation(Generation(ids, logprobs, bool(ids) and ids[-1] == eos))
                turns.append(text)
                start = time.perf_counter()
                obs, _reward, terminated, truncated, info = await loop.run_in_executor(None, env.step, text)
                metrics.tool_calls += time.perf_counter() - start
                if terminated or truncated:
                    break
                stream.observe(obs)
                replies += 1
            traj, end = stream.traj, n + self.response_length
            mask = [int(role == ROLE_MANAGER) for s, e, role in traj.spans for _ in range(s, e)][n:end]
            return AgentLoopOutput(
                prompt_ids=traj.input_ids[:n], response_ids=traj.input_ids[n:end], response_mask=mask,
                response_logprobs=traj.sampled_logprobs[n:end], reward_score=info["reward_components"]["total"],
                num_turns=1 + len(turns) + replies, metrics=metrics,
                extra_fields={"manager_turns": turns, "reward_components": info["reward_components"],
                              "correct": bool(info["correct"])})


def __getattr__(name: str) -> Any:
    """``ParaOrchAgentLoop`` without verl: an ImportError that says so (the export and the reward need no verl)."""
    if name == "ParaOrchAgentLoop":
        raise ImportError("ParaOrchAgentLoop subclasses verl's AgentLoopBase and verl is not installed (pip install "
                          "verl==0.9.1, docs/bridges.md); export_verl_parquet and compute_score work without it")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
