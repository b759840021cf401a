"""The episode options every parasim environment takes, checked in one place.

The simulator, the structured env (simulated or real tools), its vector env and the text env all accept
``max_rounds``, ``max_parallel``, ``serial`` and ``token_budget`` and a seed; they share these checks so that
the limits agree and so that a bad value is refused with the field, the value and the allowed range instead of
being cast (``max_rounds=2.5`` used to run 3 rounds and report -0.5 rounds left; ``max_parallel=2.7`` became 2).
Integers must be Python or NumPy integers (bools are refused), never floats, whatever their value.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

ROUND_LIMIT = 1000  # rounds an episode may be given (the kernel's counters and the observation hold more)
SLOT_LIMIT = 16  # parallel call slots per round the compiled step supports
SEED_LIMIT = 2**63  # seeds are non-negative and fit an int64, as NumPy's SeedSequence and the kernel take them


class EpisodeOptions(NamedTuple):
    """Validated episode options: the limits of one episode."""

    max_rounds: int
    max_parallel: int
    serial: bool
    token_budget: float | None


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as a Python int in ``[lo, hi]``; floats, bools and strings are refused, not cast."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name}: expected an integer in [{lo}, {hi}], got {type(value).__name__} {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}], got {value!r}")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a bool; 0/1 integers and strings are refused, since ``serial="no"`` would read as True."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name}: expected True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_budget(name: str, value: Any) -> float | None:
    """A positive finite number, or None for no budget."""
    if value is None:
        return None
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name}: expected a positive number or None, got {type(value).__name__} {value!r}")
    if not (math.isfinite(float(value)) and value > 0):
        raise ValueError(f"{name}: expected a positive finite number or None, got {value!r}")
    return float(value)


def check_episode_options(max_rounds: Any, max_parallel: Any, serial: Any, token_budget: Any) -> EpisodeOptions:
    """The four episode options, each checked (see the module docstring)."""
    return EpisodeOptions(check_int("max_rounds", max_rounds, 1, ROUND_LIMIT),
                          check_int("max_parallel", max_parallel, 1, SLOT_LIMIT),
                          check_bool("serial", serial), check_budget("token_budget", token_budget))


def check_seed(seed: Any, name: str = "seed") -> int | None:
    """A reset seed: None or an integer in ``[0, 2**63)``."""
    if seed is None:
        return None
    return check_int(name, seed, 0, SEED_LIMIT - 1)


def check_lane_seeds(seed: Any, num_envs: int) -> list[int] | None:
    """A vector env's reset seed: None, an int ``s`` (lane ``i`` gets ``s + i``) or one int per lane, each in
    ``[0, 2**63)``, as the single env takes them (so ``seed=[-5] * N`` is refused there as ``seed=-5`` is here)."""
    if seed is None:
        return None
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool | np.bool_):
        first = check_int("seed", seed, 0, SEED_LIMIT - num_envs)
        return [first + i for i in range(num_envs)]
    if isinstance(seed, str | bytes) or not isinstance(seed, Iterable):
        raise TypeError(f"seed: expected None, an int or {num_envs} ints, got {type(seed).__name__} {seed!r}")
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"seed: expected an int or {num_envs} seeds (one per lane), got {len(seeds)}")
    return [check_int(f"seed[{i}]", s, 0, SEED_LIMIT - 1) for i, s in enumerate(seeds)]


def check_option_keys(options: Mapping[str, Any] | None, allowed: Iterable[str], env: str) -> dict[str, Any]:
    """``options`` as a dict, refusing keys the env does not read (a misspelt ``task_idx`` would silently draw
    a random task)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"options: expected a dict or None, got {type(options).__name__}")
    allowed = tuple(allowed)
    unknown = sorted(str(k) for k in options if k not in allowed)
    if unknown:
        raise ValueError(f"options: {env} reads {', '.join(allowed) or 'no options'}; got unknown key(s) "
                         f"{', '.join(unknown)}")
    return dict(options)


HARNESS_OPTIONS = ("max_output_tokens", "temperature", "reasoning_effort")
MAX_OUTPUT_TOKENS_LIMIT = 10_000_000


def check_harness(harness: Mapping[str, Any] | None) -> dict[str, Any]:
    """An env's ``harness`` option: None or a dict of ``HARNESS_OPTIONS``; ``max_output_tokens`` an integer in
    [1, 10^7] (the generation cap replacing the pool's). The sampling keys are checked against the pool by
    ``parasim.harness.with_harness`` (a pool is calibrated at one setting)."""
    out = check_option_keys(harness, HARNESS_OPTIONS, "harness")
    if out.get("max_output_tokens") is not None:
        out["max_output_tokens"] = check_int("harness.max_output_tokens", out["max_output_tokens"], 1,
                                             MAX_OUTPUT_TOKENS_LIMIT)
    return out
