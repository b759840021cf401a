"""RewardConfig: every term, weight and threshold of the reward formulas as one frozen, validated record.

Sweeps address these fields by name (``parasim sweep --grid c_tar=4,8``), so each field carries its
allowed range, and :meth:`RewardConfig.replace` refuses a field that the chosen formula never reads
(a sweep over such a field would silently change nothing).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from parasim.protocol.schema import MAX_PARALLEL, NUM_TOOLS

FORMULAS: tuple[str, ...] = ("paramanager", "toolorchestra", "xrouter", "router_r1")

_COMMON = ("formula", "correct_threshold")
FORMULA_FIELDS: dict[str, tuple[str, ...]] = {
    "paramanager": _COMMON + (
        "w_outcome", "w_protocol", "format_penalty", "no_final_penalty", "w_diversity", "theta_par",
        "theta_tool", "par_share", "diversity_needs_correct", "w_length", "l_tar", "w_cost", "c_tar",
        "budget_max_factor"),
    "toolorchestra": _COMMON + ("pref_tools", "pref_outcome", "pref_cost", "pref_latency"),
    "xrouter": _COMMON + ("usd_scale", "max_cost_penalty"),
    "router_r1": _COMMON + ("alpha_cost", "format_reward", "cost_lo", "cost_hi", "cost_pct_lo", "cost_pct_hi"),
}

INF = math.inf
# field -> (lo, hi, lo_open): the allowed closed range, lo excluded when lo_open.
_RANGES: dict[str, tuple[float, float, bool]] = {
    "correct_threshold": (0.0, 1.0, True),
    "w_outcome": (0.0, INF, False), "w_protocol": (0.0, INF, False),
    "format_penalty": (0.0, 1.0, False), "no_final_penalty": (0.0, 1.0, False),
    "w_diversity": (0.0, INF, False), "theta_par": (0.0, float(MAX_PARALLEL), True),
    "theta_tool": (0.0, float(NUM_TOOLS), True), "par_share": (0.0, 1.0, False),
    "w_length": (0.0, INF, False), "l_tar": (0.0, INF, True), "w_cost": (0.0, INF, False),
    "c_tar": (0.0, INF, True), "budget_max_factor": (1.0, INF, True),
    "pref_outcome": (-INF, INF, False), "pref_cost": (-INF, INF, False), "pref_latency": (-INF, INF, False),
    "usd_scale": (0.0, INF, False), "max_cost_penalty": (0.0, 1.0, False),
    "alpha_cost": (0.0, 1.0, False), "format_reward": (-INF, 0.0, False),
    "cost_lo": (0.0, INF, False), "cost_hi": (0.0, INF, False),
    "cost_pct_lo": (0.0, 100.0, False), "cost_pct_hi": (0.0, 100.0, False),
}


@dataclass(frozen=True)
class RewardConfig:
    """One reward formula and its constants (see :mod:`parasim.rewards` for the formulas and sources).

    ``formula`` picks the family; the fields each family reads are listed in ``FORMULA_FIELDS``.
    Defaults are the ``paramanager`` reconstruction's constants.
    """

    formula: str = "paramanager"
    correct_threshold: float = 1.0
    # paramanager (a reconstruction): outcome + protocol + diversity + soft length / cost budgets
    w_outcome: float = 1.0
    w_protocol: float = 0.5
    format_penalty: float = 0.25
    no_final_penalty: float = 1.0
    w_diversity: float = 0.2
    theta_par: float = 1.25
    theta_tool: float = 3.0
    par_share: float = 0.5
    diversity_needs_correct: bool = True
    w_length: float = 0.5
    l_tar: float = 12288.0
    w_cost: float = 0.5
    c_tar: float = 8.0
    budget_max_factor: float = 2.0
    # toolorchestra: preference vector over group-min-max-normalized features
    pref_tools: tuple[float, ...] = field(default=(0.0,) * NUM_TOOLS)
    pref_outcome: float = 1.0
    pref_cost: float = 0.5
    pref_latency: float = 0.5
    # xrouter: outcome * (1 - min(usd_scale * usd, max_cost_penalty))
    usd_scale: float = 3.0
    max_cost_penalty: float = 0.8
    # router_r1: format -1, else (1 - alpha) * outcome + alpha * normalized sqrt-cost reward when correct
    alpha_cost: float = 0.6
    format_reward: float = -1.0
    cost_lo: float | None = None
    cost_hi: float | None = None
    cost_pct_lo: float = 5.0
    cost_pct_hi: float = 95.0

    def __post_init__(self) -> None:
        if self.formula not in FORMULAS:
            raise ValueError(f"RewardConfig.formula = {self.formula!r}: must be one of {list(FORMULAS)}")
        for name, (lo, hi, lo_open) in _RANGES.items():
            value = getattr(self, name)
            if value is None and name in ("cost_lo", "cost_hi"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"RewardConfig.{name} = {value!r}: must be a real number")
            ok = math.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi
            if not ok:
                left = "(" if lo_open else "["
                raise ValueError(f"RewardConfig.{name} = {value!r}: must be finite and in {left}{lo}, {hi}]")
            object.__setattr__(self, name, float(value))
        if not isinstance(self.diversity_needs_correct, bool):
            raise TypeError(f"RewardConfig.diversity_needs_correct = {self.diversity_needs_correct!r}: must be a bool")
        prefs = tuple(self.pref_tools)
        if len(prefs) != NUM_TOOLS or not all(
                isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) for p in prefs):
            raise ValueError(f"RewardConfig.pref_tools = {self.pref_tools!r}: must be {NUM_TOOLS} finite reals "
                             "(Tool enum order)")
        object.__setattr__(self, "pref_tools", tuple(float(p) for p in prefs))
        if self.cost_pct_lo >= self.cost_pct_hi:
            raise ValueError(
                f"RewardConfig.cost_pct_lo = {self.cost_pct_lo}: must be < cost_pct_hi = {self.cost_pct_hi}")
        if (self.cost_lo is None) != (self.cost_hi is None):
            raise ValueError("RewardConfig.cost_lo / cost_hi: set both (fixed bounds) or neither (batch percentiles)")
        if self.cost_lo is not None and self.cost_lo >= self.cost_hi:  # type: ignore[operator]
            raise ValueError(f"RewardConfig.cost_lo = {self.cost_lo}: must be < cost_hi = {self.cost_hi}")

    def replace(self, **changes: Any) -> RewardConfig:
        """A copy with ``changes`` applied (strings are parsed, e.g. from a ``--grid`` flag).

        Raises when a changed field is not read by the resulting formula, so that a sweep cannot vary
        a constant that has no effect.
        """
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"RewardConfig: unknown field(s) {unknown}; fields: {sorted(names)}")
        parsed = {k: parse_field(k, v) if isinstance(v, str) else v for k, v in changes.items()}
        new = dataclasses.replace(self, **parsed)
        unused = sorted(k for k in changes if k not in FORMULA_FIELDS[new.formula])
        if unused:
            raise ValueError(f"RewardConfig: field(s) {unused} are not read by formula {new.formula!r} "
                             f"(it reads: {list(FORMULA_FIELDS[new.formula])})")
        return new

    @property
    def batch_dependent(self) -> bool:
        """Whether a trajectory's reward depends on the others it is scored with: ToolOrchestra min-max normalizes
        within the group, Router-R1 without fixed ``cost_lo`` / ``cost_hi`` takes the batch's percentiles. An env
        scores each finished episode alone, so for these formulas only a trainer that scores whole groups has the
        training reward; for every other formula the env's score is it."""
        return self.formula == "toolorchestra" or (self.formula == "router_r1" and self.cost_lo is None)

    @cached_property
    def core_params(self) -> np.ndarray:
        """This config as the C++ core's parameter row (float64, read-only; columns named by
        ``parasim._core.reward_param_names()``), packed once per config. The config is frozen, and packing it
        field by field on every call cost ~100 us, which dominated scoring a small batch (an env's terminal
        step). ``cost_lo`` / ``cost_hi`` stay 0 here: Router-R1's bounds may depend on the batch, so
        ``compute_rewards`` fills them per call."""
        from parasim import _core

        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["formula"] = FORMULAS.index(self.formula)
        values.update({f"pref_tool_{t}": p for t, p in enumerate(self.pref_tools)})
        values["cost_lo"], values["cost_hi"] = 0.0, 0.0
        row = np.array([float(values[name]) for name in _core.reward_param_names()])
        row.flags.writeable = False
        return row

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RewardConfig:
        """Build from a mapping (e.g. JSON); a ``preset`` key starts from that preset, other keys override it."""
        from parasim.rewards import PRESETS

        data = dict(data)
        base = PRESETS[data.pop("preset")] if "preset" in data else cls(formula=data.get("formula", "paramanager"))
        # a full dump (dataclasses.asdict) carries every field: only values that differ count as changes
        changes = {k: v for k, v in data.items() if k not in base.__dataclass_fields__
                   or _normalized(k, v) != getattr(base, k)}
        return base.replace(**changes) if changes else base

    def to_dict(self) -> dict[str, Any]:
        """The fields this config's formula reads (JSON-serializable)."""
        return {k: (list(v) if isinstance(v, tuple) else v)
                for k, v in dataclasses.asdict(self).items() if k in FORMULA_FIELDS[self.formula]}


def _normalized(name: str, value: Any) -> Any:
    if isinstance(value, str):
        return parse_field(name, value)
    return tuple(value) if isinstance(value, list) else value


def parse_field(name: str, text: str) -> Any:
    """Parse a command-line value for field ``name`` (numbers, ``true``/``false``, ``none``, ``a:b:...`` tuples)."""
    text = text.strip()
    if name == "formula":
        return text
    if name == "diversity_needs_correct":
        low = text.lower()
        if low in ("1", "true", "yes"):
            return True
        if low in ("0", "false", "no"):
            return False
        raise ValueError(f"RewardConfig.{name} = {text!r}: must be true or false")
    if name in ("cost_lo", "cost_hi") and text.lower() == "none":
        return None
    try:
        if name == "pref_tools":
            return tuple(float(x) for x in text.split(":"))
        return float(text)
    except ValueError:
        raise ValueError(f"RewardConfig.{name} = {text!r}: not a number") from None
