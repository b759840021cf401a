"""A manager trained in simulation, measured on real tools: what a ``parasim train --out DIR`` run learned, played
through the real call source under the same rules, tasks and evaluation as its simulated evaluation.

``load_trained(DIR)`` rebuilds the run's config and its final policy (``ckpt/config.json``, ``ckpt/grpo.pt``, or
``ckpt/sft.pt`` for a run without GRPO steps). ``real_envs`` makes a ``envs.real_vector.RealVectorEnv`` of the run's
env options over real endpoints, one ``RealEpisodeEngine`` per lane on one backend, and ``evaluate_on`` (in
``training.evaluate``) measures the policy there exactly as on ``make_envs``: the sim-to-real gap of one manager is
``evaluate_on(policy, real_envs(...), cfg, seed)`` against ``evaluate_on(policy, make_envs(...), cfg, seed)``.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from envs.real_vector import RealVectorEnv
from training.config import TrainConfig, from_dict
from training.policy import ManagerPolicy
from training.population import build_policy
from training.rollout import env_kwargs


def load_trained(run_dir: str | Path) -> tuple[TrainConfig, ManagerPolicy]:
    """The config and final policy of a ``parasim train --out run_dir`` run; a clear error when it is not one."""
    ckpt = Path(run_dir) / "ckpt"
    config = ckpt / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{run_dir}: no ckpt/config.json; expected the --out folder of a parasim train run")
    cfg = from_dict(json.loads(config.read_text()))
    weights = ckpt / ("grpo.pt" if cfg.grpo.steps else "sft.pt")
    if not weights.is_file():
        raise FileNotFoundError(f"{run_dir}: no {weights.relative_to(run_dir)}; the run has not finished")
    saved = torch.load(weights, weights_only=False)
    if cfg.grpo.steps and int(saved["step"]) < cfg.grpo.steps:
        raise ValueError(f"{weights}: checkpoint of GRPO step {saved['step']} of {cfg.grpo.steps}; the run has not "
                         "finished (rerun its parasim train command to resume it)")
    policy = build_policy(cfg)
    policy.load_state_dict(saved["policy"])
    return cfg, policy


def real_envs(cfg: TrainConfig, backend: Any, tasks: Sequence[Any], lanes: int, *, logger: Any = None,
              use_termination_model: bool = True, max_workers: int | None = None,
              on_episodes: Callable[[int], None] | None = None) -> RealVectorEnv:
    """``lanes`` real-tools lanes with ``cfg.env``'s options (pool, suite, rounds, width, serial, budget) over
    ``backend`` (a ``RealToolBackend``) and ``tasks`` (``RealTask``s); ``logger`` (a ``CallLogger``) records every
    call and episode for ``parasim calibrate`` / ``validate-sim``."""
    from parasim.pools.pool import load_pool
    from parasim.real.engine import RealEpisodeEngine
    from parasim.tasks.suites import load_suite

    engines = [RealEpisodeEngine(backend, tasks, logger=logger, use_termination_model=use_termination_model)
               for _ in range(lanes)]
    kwargs = env_kwargs(cfg.env)
    # read once for all lanes: parsing a pool file (and solving its skills) per lane costs seconds at hundreds of lanes
    kwargs.update(pool=load_pool(kwargs["pool"]), suite=load_suite(kwargs["suite"]))
    return RealVectorEnv.from_engines(engines, max_workers, on_episodes, **kwargs)
