"""Trajectory rewards: the preset registry and the batched scoring API over the C++ core.

Formulas (``parasim.scoring.reference.reward_components`` spells each one out; o = outcome, "correct" means
o >= correct_threshold):

* ``paramanager``: w_outcome*o - w_protocol*min(1, format_penalty*format_violations + no_final_penalty*(1 -
  ended_with_final)) + w_diversity*[par_share*min(1, calls_per_round/theta_par) + (1 - par_share)*min(1,
  distinct_tools/theta_tool)] (times "correct" when diversity_needs_correct) + w_length*soft(tokens, l_tar)
  + w_cost*soft(cost_units, c_tar), soft = DAPO's soft budget (0 to target, linear to -1 at
  budget_max_factor x target, -1 beyond).
* ``toolorchestra``: 0 unless correct; else P . normalized([tool_counts, o, -usd, -latency_s]) with each
  feature min-max normalized within the trajectory's group (0 where it is constant in the group). P is the
  trajectory's own preference vector (the batch's ``preference`` row: the episode's, e.g. from the env's
  ``preference`` reset option or ``task_options="random"``, docs/task_options.md) where it has one, else the
  config's (pref_tools, pref_outcome, pref_cost, pref_latency). The other formulas ignore ``preference``.
* ``xrouter``: o * (1 - min(usd_scale*usd, max_cost_penalty)).
* ``router_r1``: format_reward if a round broke the format or no final answer was given; else
  (1 - alpha_cost)*o + alpha_cost*correct*(1 - clip((sqrt(usd) - lo)/(hi - lo), 0, 1)), lo/hi fixed or
  batch percentiles of sqrt(usd) (a trainer passes its rolling percentiles as cost_lo/cost_hi).

Every result keeps its components (outcome, protocol, diversity, length, cost, latency, tools), which
sum to ``total``, so that a sweep can report what each term contributed.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parasim import _core
from parasim.scoring.batch import FIELDS as BATCH_FIELDS
from parasim.scoring.batch import TrajectoryBatch, check_no_overlap
from parasim.scoring.reward_config import (
    FORMULA_SPECS,
    FORMULAS,
    PRESET_SOURCES,
    PRESETS,
    RewardConfig,
    parse_field,
    preset,
    register_preset,
    resolve_config,
)

__all__ = ["COMPONENTS", "FORMULAS", "FORMULA_SPECS", "PRESETS", "PRESET_SOURCES", "RewardConfig", "RewardResult",
           "compute_rewards", "compute_rewards_grid", "mean_std", "parse_field", "preset", "register_preset",
           "resolve_config"]

# the reward's parts, which sum to ``total`` (the core's component rows, in this order)
COMPONENTS: tuple[str, ...] = tuple(_core.reward_components())  # the core's order (cpp/rewards.hpp's one table)
# the core's parameter row: these fixed columns, then one tool preference per tool of the batch
_FIXED_PARAMS: tuple[str, ...] = tuple(_core.reward_param_names(1)[:-1])
_COST_LO, _COST_HI = _FIXED_PARAMS.index("cost_lo"), _FIXED_PARAMS.index("cost_hi")
@dataclass(frozen=True)
class RewardResult:
    """The total reward and its components, each float64[N]; the components sum to ``total``."""

    total: np.ndarray
    outcome: np.ndarray
    protocol: np.ndarray
    diversity: np.ndarray
    length: np.ndarray
    cost: np.ndarray
    latency: np.ndarray
    tools: np.ndarray

    def as_dict(self) -> dict[str, np.ndarray]:
        return {"total": self.total, **{k: getattr(self, k) for k in COMPONENTS}}


def mean_std(x: np.ndarray) -> tuple[float, float]:
    """Mean and (biased) std of rewards ``x``, computed on their power-of-two rescaling (exact), so that neither the
    sum nor the squares overflow for any finite rewards (a plain mean of N rewards near 1e301 is inf); 0, 0 when
    empty."""
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return 0.0, 0.0
    e = int(np.frexp(np.max(np.abs(x)))[1])
    scaled = np.ldexp(x, -e)
    return float(np.ldexp(scaled.mean(), e)), float(np.ldexp(scaled.std(), e))


def _check_batch(batch: TrajectoryBatch) -> None:
    if not isinstance(batch, TrajectoryBatch):
        raise TypeError(f"batch must be a TrajectoryBatch (build one with TrajectoryBatch.from_arrays), "
                        f"got {type(batch).__name__}")


def _param_rows(batch: TrajectoryBatch, cfgs: Sequence[RewardConfig]) -> np.ndarray:
    """Pack configs into the core's parameter rows (columns named by ``_core.reward_param_names(T)`` for the
    batch's T tools): each config's cached row, plus Router-R1's cost bounds, which may depend on the batch. A
    config for another tool count fits when its formula reads no tool preference (those columns stay 0)."""
    num_tools = batch.num_tools
    rows = np.empty((len(cfgs), len(_FIXED_PARAMS) + num_tools))
    bounds: dict[tuple[float, float], tuple[float, float]] = {}
    for c, cfg in enumerate(cfgs):
        if cfg.num_tools == num_tools:
            rows[c] = cfg.core_params
        elif "pref_tools" in FORMULA_SPECS[cfg.formula].fields:
            raise ValueError(f"RewardConfig.num_tools = {cfg.num_tools}: the batch has {num_tools} tools "
                             f"(tool_counts columns); formula {cfg.formula!r} needs one pref_tools weight per tool "
                             f"(set num_tools={num_tools} and pref_tools)")
        else:
            rows[c, :len(_FIXED_PARAMS)] = cfg.core_params[:len(_FIXED_PARAMS)]
            rows[c, len(_FIXED_PARAMS):] = 0.0
        if cfg.formula == "router_r1":
            key = (cfg.cost_pct_lo, cfg.cost_pct_hi) if cfg.cost_lo is None else (cfg.cost_lo, cfg.cost_hi)
            if key not in bounds:  # percentiles of the batch are computed once per distinct pair
                bounds[key] = router_r1_cost_bounds(batch, cfg)
            rows[c, _COST_LO], rows[c, _COST_HI] = bounds[key]
    return rows


def router_r1_cost_bounds(batch: TrajectoryBatch, cfg: RewardConfig) -> tuple[float, float]:
    """Router-R1's bounds of sqrt(usd): the config's fixed ones, else the batch's percentiles (0, 0 when empty). The
    NumPy reference takes them from here too: they are the batch's input to the formula, not a kernel."""
    if cfg.cost_lo is not None and cfg.cost_hi is not None:
        return cfg.cost_lo, cfg.cost_hi
    if len(batch) == 0:
        return 0.0, 0.0
    lo, hi = np.percentile(np.sqrt(batch.usd), [cfg.cost_pct_lo, cfg.cost_pct_hi])
    return float(lo), float(hi)


def _core_fields(batch: TrajectoryBatch) -> dict[str, np.ndarray]:
    """The batch's arrays by field name for the core (``as_dict`` without re-reading the dataclass fields)."""
    return {name: getattr(batch, name) for name in BATCH_FIELDS}


def compute_rewards(batch: TrajectoryBatch, config: RewardConfig | str = "paramanager") -> RewardResult:
    """Score every trajectory of ``batch`` under one config (or preset name), in one core call."""
    _check_batch(batch)
    cfg = resolve_config(config)
    totals = np.empty((1, len(batch)))
    comps = np.empty((len(COMPONENTS), len(batch)))
    _core.score_rewards(_core_fields(batch), _param_rows(batch, [cfg]), totals, comps)
    return RewardResult(total=totals[0], **dict(zip(COMPONENTS, comps)))


def compute_rewards_grid(batch: TrajectoryBatch, configs: Sequence[RewardConfig | str],
                         out: np.ndarray | None = None) -> np.ndarray:
    """Totals of ``batch`` under each config: float64[C, N], one pass over the batch for all configs.

    ``out`` (float64[C, N], C-contiguous) is filled in place when given, e.g. to reuse a buffer in a sweep; it may
    not share memory with the batch (ValueError naming the field: the core reads the batch while it writes ``out``).
    """
    _check_batch(batch)
    cfgs = [resolve_config(c) for c in configs]
    shape = (len(cfgs), len(batch))
    if out is None:
        out = np.empty(shape)
    elif out.shape != shape or out.dtype != np.float64 or not out.flags.c_contiguous:
        raise ValueError(f"out: expected a C-contiguous float64 array of shape {shape}, got {out.dtype} {out.shape}")
    else:
        check_no_overlap({"out": out}, {f"batch.{name}": arr for name, arr in _core_fields(batch).items()})
    if cfgs:
        _core.score_rewards(_core_fields(batch), _param_rows(batch, cfgs), out)
    return out
