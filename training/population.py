"""Population training: one process trains P grid points (configs x seeds) at once, each exactly as alone.

A sweep's points share almost everything but their reward, so training them one process each mostly pays for
per-call torch overhead on tiny matrices, P times over. ``run_population`` runs the pipeline of ``run_pipeline``
(scripted expert -> masked SFT -> evaluation -> GRPO -> evaluation) for all P members together:

- the members' weights live in one ``PolicyStack``: each member's matrix products run on its own rows with the
  shapes it has alone, everything else (tool conditioning, masking, sampling, log-probabilities) once for all;
- one vector env holds every member's lanes (``rollout.Block``), each block reset with exactly the seeds and task
  options the member's env gets alone, and each member's episodes are scored under its own ``RewardConfig`` and
  advantaged within its own groups (the env's own ``reward_components`` are those of the first member and unused);
- each member samples from its own ``torch.Generator`` (its slice of every draw), shuffles its own minibatches,
  clips its own gradients and takes its own Adam steps (``MemberAdam``);
- the expert's demonstrations depend on the seed, the env and the expert settings only, so members that share
  those (a C_tar sweep: every point of a seed) share one set; members that also share their initial weights and
  SFT settings (again every point of a seed in a reward sweep) share one SFT, trained once (``sft_twins``).

So a member's results equal the ones ``run_pipeline`` gives for its config, number for number
(tests/test_population.py); only the timings (``sft_s``, ``grpo_s``, ``eval_s``, ``env_steps_per_s``,
``step_s``) are the population's. Members must share the env options and the policy architecture
(``population_key``): a grid axis over ``pool``, ``max_parallel``, ``serial``, ``suite`` or the policy size makes
separate populations. Any other option (reward, SFT, GRPO, evaluation settings, seeds) may differ per member.
With workdirs, every member checkpoints into its own, in the files of a run alone, and resumes from them.
"""
from __future__ import annotations

import dataclasses
import io
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from parasim.config.writes import atomic_write_bytes, atomic_write_json
from training import expert, grpo, sft
from training.evaluate import evaluate_stack
from training.loggers import ProgressCallback
from training.policy import ManagerPolicy, PolicyStack
from training.rollout import EnvSpec, derive_seed, env_spec


def _quiet(phase: str, done: int, total: int) -> None:
    """The default progress callback: report nothing."""


def population_key(cfg: Any) -> str:
    """What the members of one population must share: the env options (one vector env) and the policy's size
    (one stacked architecture)."""
    return json.dumps({"env": dataclasses.asdict(cfg.env), "policy": dataclasses.asdict(cfg.policy)}, sort_keys=True)


def build_policy(cfg: Any, spec: EnvSpec | None = None) -> ManagerPolicy:
    """A freshly initialized policy for the env of ``cfg`` (init seeded by ``cfg.seed``); ``spec`` is the env's
    layout when already read."""
    spec = spec or env_spec(cfg.env)
    torch.manual_seed(derive_seed(cfg.seed, "init"))
    return ManagerPolicy(spec.obs_dim, spec.nvec, spec.obs_keys, spec.num_agent_tools, cfg.policy)


def claim_workdir(wd: Path, cfg: Any) -> None:
    """Record the config in ``wd``; refuse to resume checkpoints that belong to a different config."""
    wd.mkdir(parents=True, exist_ok=True)
    path = wd / "config.json"
    mine = json.loads(json.dumps(cfg.to_dict()))
    if path.exists() and json.loads(path.read_text()) != mine:
        raise ValueError(f"{wd} holds checkpoints of a different config; use another --out or remove it")
    atomic_write_json(path, mine)


def grpo_resume_step(workdir: Path) -> int | None:
    """The GRPO steps an interrupted run in ``workdir`` has checkpointed (None: none yet), where a resumed run's
    metric logs continue."""
    path = workdir / "grpo.pt"
    return int(torch.load(path, weights_only=False)["step"]) if path.exists() else None


def sft_twins(cfgs: Sequence[Any], stack: PolicyStack, learners: Sequence[int]) -> dict[int, int]:
    """For each learner, the first learner whose SFT it repeats exactly (itself if none): the same initial weights,
    demonstrations (``expert.demonstrations_key``) and SFT settings, and the seed that orders the minibatches. The
    points of a reward sweep that share a seed are such twins, since neither the expert nor SFT reads the reward; a
    member's SFT floats do not depend on the others in its pass, so training one twin and copying its weights gives
    each exactly what it would get alone, for a fraction of the work."""
    first: dict[Any, list[int]] = {}
    twin: dict[int, int] = {}
    for m in learners:
        key = (expert.demonstrations_key(cfgs[m]), cfgs[m].sft, derive_seed(cfgs[m].seed, "sft"))
        state = stack.member_state(m)
        twin[m] = next((r for r in first.get(key, []) if all(
            torch.equal(v, stack.param(n)[r]) for n, v in state.items())), m)
        if twin[m] == m:
            first.setdefault(key, []).append(m)
    return twin


def warm_start(cfgs: Sequence[Any], stack: PolicyStack, workdirs: Sequence[Path | None],
               progress: ProgressCallback = _quiet) -> list[dict[str, Any]]:
    """Expert demonstrations and SFT of every member, or the stored SFT weights of an interrupted run; each
    member's record (``sft_losses``, ``expert``)."""
    infos: list[dict[str, Any] | None] = [None] * stack.size
    for m, wd in enumerate(workdirs):
        if wd is not None and (wd / "sft.pt").exists():
            state = torch.load(wd / "sft.pt", weights_only=False)
            stack.load_member(m, state["policy"])
            infos[m] = state["info"]
    todo = [m for m in range(stack.size) if infos[m] is None]
    fresh: dict[int, dict[str, Any]] = {m: {"sft_losses": [], "expert": {}} for m in todo}
    learners = [m for m in todo if cfgs[m].sft.epochs > 0]
    if learners:
        keys = list(dict.fromkeys(expert.demonstrations_key(cfgs[m]) for m in learners))
        progress("expert", 0, len(keys))
        demos: dict[Any, expert.Demonstrations] = {}
        for m in learners:
            key = expert.demonstrations_key(cfgs[m])
            if key not in demos:
                demos[key] = expert.demonstrations(cfgs[m])
                progress("expert", len(demos), len(keys))
        shared = {key: sft.Decisions(d.x, d.mask, d.actions, d.models) for key, d in demos.items()}
        twin = sft_twins(cfgs, stack, learners)
        data: list[sft.Decisions | None] = [None] * stack.size
        for m in learners:
            key = expert.demonstrations_key(cfgs[m])
            fresh[m]["expert"] = demos[key].stats
            data[m] = shared[key] if twin[m] == m else None
        epochs = max(cfgs[m].sft.epochs for m in learners)
        progress("sft", 0, epochs)
        losses = sft.train_sft_stack(stack, data, [c.sft for c in cfgs],
                                     [derive_seed(c.seed, "sft") for c in cfgs], lambda e: progress("sft", e, epochs))
        for m in learners:
            if twin[m] != m:
                stack.load_member(m, stack.member_state(twin[m]))
            fresh[m]["sft_losses"] = list(losses[twin[m]])
    for m in todo:
        infos[m] = fresh[m]
        if workdirs[m] is not None:
            buf = io.BytesIO()
            torch.save({"policy": stack.member_state(m), "info": fresh[m]}, buf)
            atomic_write_bytes(workdirs[m] / "sft.pt", buf.getvalue())
    return infos  # type: ignore[return-value]


def run_population(cfgs: Sequence[Any], workdirs: Sequence[str | Path | None] | None = None,
                   logs: Sequence[Callable[[dict[str, Any]], None] | None] | None = None,
                   keep_trajectories: bool = False, progress: ProgressCallback = _quiet) -> list[dict[str, Any]]:
    """Train and evaluate every config as one population; each member's metrics, as ``run_pipeline`` returns them.

    ``workdirs[m]`` holds member ``m``'s checkpoints (as ``run_pipeline``'s workdir), ``logs[m]`` gets its GRPO
    rows. ``progress(phase, done, total)`` follows the population's phases (expert, sft, eval sft, grpo, eval);
    it never touches the runs' randomness. Raises ``ValueError`` when the configs cannot share a population.
    """
    size = len(cfgs)
    if not size:
        raise ValueError("cfgs: a population needs at least one config")
    keys = [population_key(c) for c in cfgs]
    if any(k != keys[0] for k in keys):
        bad = next(i for i, k in enumerate(keys) if k != keys[0])
        raise ValueError(f"cfgs[{bad}]: env {cfgs[bad].env} / policy {cfgs[bad].policy} differ from cfgs[0]'s "
                         f"{cfgs[0].env} / {cfgs[0].policy}; a population shares its env options and policy size")
    wds = [Path(w) if w is not None else None for w in (workdirs or [None] * size)]
    for wd, cfg in zip(wds, cfgs):
        if wd is not None:
            claim_workdir(wd, cfg)
    t0 = time.perf_counter()
    spec = env_spec(cfgs[0].env)
    stack = PolicyStack([build_policy(c, spec) for c in cfgs])
    infos = warm_start(cfgs, stack, wds, progress)
    seeds = [derive_seed(c.seed, "evaluate") for c in cfgs]
    progress("eval sft", 0, 1)
    start = evaluate_stack(stack, cfgs, seeds, other_pool=False)
    progress("eval sft", 1, 1)
    t_sft = time.perf_counter() - t0
    steps = max(c.grpo.steps for c in cfgs)
    progress("grpo", max((grpo_resume_step(wd) or 0) if wd is not None else 0 for wd in wds), steps)
    histories = grpo.train_stack(cfgs, stack, [wd / "grpo.pt" if wd is not None else None for wd in wds],
                                 list(logs or [None] * size), lambda done, total: progress("grpo", done, total))
    t_grpo = time.perf_counter() - t0 - t_sft
    progress("eval", 0, 1)
    final = evaluate_stack(stack, cfgs, seeds)
    progress("eval", 1, 1)
    t_eval = time.perf_counter() - t0 - t_sft - t_grpo
    results = []
    for cfg, metrics, begin, history, info in zip(cfgs, final, start, histories, infos):
        batch = metrics.pop("trajectories")
        curve = [h["reward"] for h in history]
        result = {
            **metrics,
            **{f"sft_{k}": begin[k] for k in ("accuracy", "reward", "tokens", "cost_units", "latency_s")},
            "train_reward_start": curve[0] if curve else None,
            "train_reward_end": float(np.mean(curve[-5:])) if curve else None,
            "reward_curve": curve,
            "accuracy_curve": [h["accuracy"] for h in history],
            "entropy_curve": [h["entropy"] for h in history],
            "env_steps_per_s": float(np.mean([h["env_steps_per_s"] for h in history])) if history else None,
            "sft_s": t_sft, "grpo_s": t_grpo, "eval_s": t_eval,
            "config": cfg.to_dict(), **info,
        }
        if keep_trajectories:
            result["trajectories"] = batch
        results.append(result)
    return results


def split_population(keys: Sequence[Any], parts: int) -> list[list[int]]:
    """Cut one population's members into at most ``parts`` near-equal chunks (one per worker), members that share
    ``keys`` (their demonstrations) kept together where the sizes allow, so each chunk plays few expert runs."""
    order = sorted(range(len(keys)), key=lambda i: (list(dict.fromkeys(keys)).index(keys[i]), i))
    bounds = np.linspace(0, len(order), min(parts, len(order)) + 1).round().astype(int)
    return [sorted(order[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
