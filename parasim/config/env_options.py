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

from parasim.config.jsonl import finite_in, show_value

ROUND_LIMIT = 1000  # rounds an episode may be given (the kernel's counters and the observation hold more)
SLOT_LIMIT = 16  # parallel call slots per round the compiled step supports
LANE_LIMIT = 2**31 - 1  # lanes of one vector env / simulator (int32 lane indices)
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


def check_lane_seeds(seed: Any, num_envs: int) -> np.ndarray | None:
    """A vector env's reset seed as int64[num_envs]: None, an int ``s`` (lane ``i`` gets ``s + i``) or one int per
    lane, each in ``[0, 2**63)``, as the single env takes them (so ``seed=[-5] * N`` is refused there as ``seed=-5``
    is here). An integer NumPy array is checked in one pass: a trainer reseeds every lane at every collection, and
    the per-seed check of a list was the largest Python cost of a population's reset."""
    if seed is None:
        return None
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool | np.bool_):
        first = check_int("seed", seed, 0, SEED_LIMIT - num_envs)
        return np.arange(num_envs, dtype=np.int64) + first
    if isinstance(seed, np.ndarray) and seed.dtype.kind in "iu" and seed.ndim == 1:
        if len(seed) != num_envs:
            raise ValueError(f"seed: expected an int or {num_envs} seeds (one per lane), got {len(seed)}")
        bad = np.flatnonzero((seed < 0) | (seed > SEED_LIMIT - 1))
        if len(bad):
            i = int(bad[0])
            check_int(f"seed[{i}]", seed[i], 0, SEED_LIMIT - 1)  # raises, naming the lane
        return seed.astype(np.int64)
    if isinstance(seed, str | bytes) or not isinstance(seed, Iterable):
        raise TypeError(f"seed: expected None, an int or {num_envs} ints, got {type(seed).__name__} {seed!r}")
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"seed: expected an int or {num_envs} seeds (one per lane), got {len(seeds)}")
    return np.array([check_int(f"seed[{i}]", s, 0, SEED_LIMIT - 1) for i, s in enumerate(seeds)], np.int64)


def check_mapping(name: str, value: Any) -> dict[str, Any]:
    """A dict option (reset ``options``, ``harness``): None is empty; anything else than a mapping is a
    ``TypeError`` naming the option (``options=[1, 2]`` was an ``AttributeError`` deep in an env)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{name}: expected a dict or None, got {type(value).__name__}")
    return dict(value)


def check_option_keys(options: Mapping[str, Any] | None, allowed: Iterable[str], env: str) -> dict[str, Any]:
    """``options`` as a dict, refusing keys the env does not read (a misspelt ``task_idx`` would silently draw
    a random task)."""
    options = check_mapping("options", options)
    allowed = tuple(allowed)
    unknown = sorted(str(k) for k in options if k not in allowed)
    if unknown:
        raise ValueError(f"options: {env} reads {', '.join(allowed) or 'no options'}; got unknown key(s) "
                         f"{', '.join(unknown)}")
    return dict(options)


HARNESS_OPTIONS = ("max_output_tokens", "temperature", "reasoning_effort")
MAX_OUTPUT_TOKENS_LIMIT = 10_000_000
MAX_TEMPERATURE = 2.0  # a pool file's protocol.temperature range, [0, 2]
POOL_TEMPERATURE = -1.0  # a config's temperature for "the pool's own" (no harness option: training's env.temperature)


def check_harness(harness: Mapping[str, Any] | None) -> dict[str, Any]:
    """An env's ``harness`` option: None or a dict of ``HARNESS_OPTIONS``; ``max_output_tokens`` an integer in
    [1, 10^7] (the generation cap replacing the pool's); ``temperature`` a number in [0, MAX_TEMPERATURE]. Against
    the pool they are checked by ``parasim.pools.harness.with_harness``."""
    out = check_option_keys(harness, HARNESS_OPTIONS, "harness")
    if out.get("max_output_tokens") is not None:
        out["max_output_tokens"] = check_int("harness.max_output_tokens", out["max_output_tokens"], 1,
                                             MAX_OUTPUT_TOKENS_LIMIT)
    t = out.get("temperature")
    if t is not None:
        if isinstance(t, bool | np.bool_) or not isinstance(t, int | float | np.integer | np.floating):
            raise TypeError(f"harness.temperature: expected a number in [0, {MAX_TEMPERATURE:g}], got "
                            f"{type(t).__name__} {t!r}")
        if not 0.0 <= float(t) <= MAX_TEMPERATURE:
            raise ValueError(f"harness.temperature: expected a number in [0, {MAX_TEMPERATURE:g}], got {t!r}")
        out["temperature"] = float(t)
    return out


# ------------------------------------------------------------------ task options (docs/task_options.md)
TASK_OPTIONS = ("preference", "tools_available", "tool_prices")  # reset options of the envs that take them
TASK_OPTION_MODES = (None, "random")  # the constructor option ``task_options``
PRICE_LIMIT = 1e6  # USD per call an episode may charge


class TaskOptions(NamedTuple):
    """Checked task options of one reset, one row per lane (one row for a single env), None where not given:
    ``preference`` float64[L, T + 3], ``tools_available`` bool[L, T], ``tool_prices`` float64[L, T] (NaN: the pool's
    price)."""

    preference: np.ndarray | None
    tools_available: np.ndarray | None
    tool_prices: np.ndarray | None


def check_task_option_mode(value: Any) -> int:
    """The constructor option ``task_options``: None (episodes get only the options their reset gives) or "random"
    (each episode draws its tool subset, prices and preference vector: ``parasim.sim.task_options``); its code."""
    if value is not None and not isinstance(value, str) or value not in TASK_OPTION_MODES:
        raise ValueError(f"task_options: expected one of {list(TASK_OPTION_MODES)}, got {value!r}")
    return TASK_OPTION_MODES.index(value)


def _per_lane(value: Any, lanes: int | None, one_row: Any) -> bool:
    """Whether a vector env's option ``value`` gives one row per lane (a sequence of ``lanes`` rows) rather than one
    row for all; ``one_row(x)`` says whether ``x`` is a single row."""
    if lanes is None or isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        return False
    items = list(value)
    return len(items) == lanes and not one_row(items) and all(not isinstance(x, str | bytes) for x in items)


def _real_row(name: str, value: Any, width: int, what: str, lo: float, hi: float, none_ok: bool) -> np.ndarray:
    """One row of ``width`` reals in [lo, hi] (None entries: NaN where ``none_ok``)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"{name}: expected {width} numbers ({what}), got {type(value).__name__} {value!r}")
    items = list(value)
    if len(items) != width:
        raise ValueError(f"{name}: expected {width} numbers ({what}), got {len(items)}")
    row = np.empty(width)
    for j, x in enumerate(items):
        if x is None and none_ok:
            row[j] = np.nan
            continue
        if isinstance(x, bool | np.bool_) or not isinstance(x, int | float | np.integer | np.floating):
            raise TypeError(f"{name}[{j}]: expected a number in [{lo}, {hi}]{' or None' if none_ok else ''}, got "
                            f"{type(x).__name__} {x!r}")
        if none_ok and isinstance(x, float | np.floating) and math.isnan(x):
            row[j] = np.nan
            continue
        if not finite_in(x, lo, hi):  # compared before float(): 10**400 is out of range, not an OverflowError
            raise ValueError(f"{name}[{j}]: expected a finite number in [{lo}, {hi}], got {show_value(x)}")
        row[j] = float(x)
    return row


def _tool_row(name: str, value: Any, tool_names: tuple[str, ...]) -> np.ndarray:
    """``tools_available`` of one episode: one bool per tool, or the names of the tools it offers."""
    t = len(tool_names)
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"{name}: expected {t} bools (one per tool: {', '.join(tool_names)}) or a list of tool names, "
                        f"got {type(value).__name__} {value!r}")
    items = list(value)
    if items and all(isinstance(x, str) for x in items):
        unknown = sorted(set(items) - set(tool_names))
        if unknown:
            raise ValueError(f"{name}: unknown tool(s) {unknown}; the tool spec's tools: {', '.join(tool_names)}")
        row = np.isin(np.array(tool_names), items)
    else:
        if len(items) != t or not all(isinstance(x, bool | np.bool_) for x in items):
            raise ValueError(f"{name}: expected {t} bools (one per tool: {', '.join(tool_names)}) or a list of tool "
                             f"names, got {value!r}")
        row = np.array(items, bool)
    if not row.any():
        raise ValueError(f"{name}: an episode must offer at least one tool of {', '.join(tool_names)}, got {value!r}")
    return row


def check_task_options(options: Mapping[str, Any], tool_names: tuple[str, ...], lanes: int | None) -> TaskOptions:
    """The task options of a reset's ``options`` (``TASK_OPTIONS``; absent or None: not given), each checked with an
    error naming the option, the index and the allowed values (docs/task_options.md):

    - ``preference``: T + 3 finite numbers (one per tool in spec order, then outcome, cost, latency: the
      ``toolorchestra`` reward's vector for this episode);
    - ``tools_available``: T bools, or the names of the offered tools (at least one);
    - ``tool_prices``: T prices in USD per call, each in [0, 1e6] or None (the pool's own figure for that tool), or
      a dict tool name -> price (the others: the pool's).

    A vector env (``lanes``) takes one value for all lanes or a sequence of ``lanes`` values, one per lane."""
    t = len(tool_names)
    out: dict[str, np.ndarray | None] = {}
    for key in TASK_OPTIONS:
        value = options.get(key)
        if value is None:
            out[key] = None
            continue
        if key == "preference":
            def row(name: str, v: Any) -> np.ndarray:
                return _real_row(name, v, t + 3, f"one per tool ({', '.join(tool_names)}), then outcome, cost, "
                                 "latency", -math.inf, math.inf, False)

            def one(items: list) -> bool:
                return all(isinstance(x, int | float | np.integer | np.floating) for x in items)
        elif key == "tools_available":
            def row(name: str, v: Any) -> np.ndarray:
                return _tool_row(name, v, tool_names)

            def one(items: list) -> bool:
                return all(isinstance(x, bool | np.bool_ | str) for x in items)
        else:
            def row(name: str, v: Any) -> np.ndarray:
                if isinstance(v, Mapping):
                    unknown = sorted(str(k) for k in set(v) - set(tool_names))
                    if unknown:
                        raise ValueError(f"{name}: unknown tool(s) {unknown}; the tool spec's tools: "
                                         f"{', '.join(tool_names)}")
                    v = [v.get(n) for n in tool_names]
                return _real_row(name, v, t, f"USD per call of each tool ({', '.join(tool_names)}), None: the "
                                 "pool's", 0.0, PRICE_LIMIT, True)

            def one(items: list) -> bool:
                return all(x is None or isinstance(x, int | float | np.integer | np.floating) for x in items)
        name = f"options[{key!r}]"
        if isinstance(value, np.ndarray) and value.ndim == 2:
            value = list(value)
        if _per_lane(value, lanes, one):
            out[key] = np.stack([row(f"{name}[{i}]", v) for i, v in enumerate(value)])
        else:
            out[key] = np.repeat(row(name, value)[None], 1 if lanes is None else lanes, axis=0)
    return TaskOptions(**out)
