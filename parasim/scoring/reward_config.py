"""RewardConfig: every term, weight and threshold of the reward formulas as one frozen, validated record.

Sweeps address these fields by name (``parasim sweep --grid c_tar=4,8``), so each field carries its
allowed range, and :meth:`RewardConfig.replace` refuses a field that the chosen formula never reads
(a sweep over such a field would silently change nothing).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from parasim import _core
from parasim.config.fields import check, opt, spec_of, validate
from parasim.protocol.schema import MAX_PARALLEL, MAX_TOOLS, NUM_TOOLS
from parasim.scoring.trajectory_schema import MAX_REWARD_MAGNITUDE


@dataclass(frozen=True)
class FormulaSpec:
    """One reward family: the config fields it reads (the others are ignored, and a grid over them is refused), and
    the weights whose absolute sum bounds its |reward| (its other terms are at most 1), which validation caps."""

    fields: tuple[str, ...]
    magnitude: tuple[str, ...]


_COMMON = ("formula", "correct_threshold")
# the one table of the reward families, keyed by the names the C++ core gives its formula codes (checked below)
FORMULA_SPECS: dict[str, FormulaSpec] = {
    "paramanager": FormulaSpec(_COMMON + (
        "w_outcome", "w_protocol", "format_penalty", "no_final_penalty", "w_diversity", "theta_par",
        "theta_tool", "par_share", "diversity_needs_correct", "w_length", "l_tar", "w_cost", "c_tar",
        "budget_max_factor"), ("w_outcome", "w_protocol", "w_diversity", "w_length", "w_cost")),
    "toolorchestra": FormulaSpec(_COMMON + ("num_tools", "pref_tools", "pref_outcome", "pref_cost", "pref_latency"),
                                 ("pref_tools", "pref_outcome", "pref_cost", "pref_latency")),
    "xrouter": FormulaSpec(_COMMON + ("usd_scale", "max_cost_penalty"), ()),
    "router_r1": FormulaSpec(_COMMON + ("alpha_cost", "format_reward", "cost_lo", "cost_hi", "cost_pct_lo",
                                        "cost_pct_hi"), ("format_reward",)),
}
FORMULAS: tuple[str, ...] = tuple(_core.reward_formulas())  # in code order: a parameter row's formula column
if set(FORMULAS) != set(FORMULA_SPECS):
    raise ImportError(f"the C++ core's reward formulas {FORMULAS} are not this table's {tuple(FORMULA_SPECS)}: the "
                      "core and parasim.scoring.reward_config are from different builds")

INF = math.inf


@dataclass(frozen=True)
class RewardConfig:
    """One reward formula and its constants (see :mod:`parasim.scoring.rewards` for the formulas and sources).

    ``formula`` picks the family; the fields each family reads are listed in ``FORMULA_SPECS``.
    Defaults are the ``paramanager`` reconstruction's constants. Each field declares its range
    (:func:`parasim.config.fields.opt`), so a bad value is refused with the field, the value and the range.
    """

    formula: str = opt("paramanager", choices=FORMULAS, help="reward family")
    correct_threshold: float = opt(1.0, lo=0.0, hi=1.0, lo_open=True, help="outcome at or above this counts correct")
    # paramanager (a reconstruction): outcome + protocol + diversity + soft length / cost budgets
    w_outcome: float = opt(1.0, lo=0.0, hi=INF, help="weight of the outcome term")
    w_protocol: float = opt(0.5, lo=0.0, hi=INF, help="weight of the protocol (format / final answer) term")
    format_penalty: float = opt(0.25, lo=0.0, hi=1.0, help="protocol penalty per format violation")
    no_final_penalty: float = opt(1.0, lo=0.0, hi=1.0, help="protocol penalty for ending without final_answer")
    w_diversity: float = opt(0.2, lo=0.0, hi=INF, help="weight of the diversity bonus")
    theta_par: float = opt(1.25, lo=0.0, hi=float(MAX_PARALLEL), lo_open=True,
                           help="parallel calls per round the diversity bonus asks for")
    theta_tool: float = opt(3.0, lo=0.0, hi=float(NUM_TOOLS), lo_open=True,
                            help="distinct tools per trajectory the diversity bonus asks for")
    par_share: float = opt(0.5, lo=0.0, hi=1.0, help="share of the diversity bonus for parallelism (rest: tools)")
    diversity_needs_correct: bool = opt(True, help="the diversity bonus only for correct trajectories")
    w_length: float = opt(0.5, lo=0.0, hi=INF, help="weight of the soft length budget")
    l_tar: float = opt(12288.0, lo=0.0, hi=INF, lo_open=True, help="target trajectory length in tokens (L_tar)")
    w_cost: float = opt(0.5, lo=0.0, hi=INF, help="weight of the soft cost budget")
    c_tar: float = opt(8.0, lo=0.0, hi=INF, lo_open=True, help="target cost in cost units (C_tar)")
    budget_max_factor: float = opt(2.0, lo=1.0, hi=INF, lo_open=True,
                                   help="the length / cost penalty is full at this multiple of the target")
    # toolorchestra: preference vector over group-min-max-normalized features
    num_tools: int = opt(NUM_TOOLS, lo=1, hi=MAX_TOOLS,
                         help="tools of the tool spec scored (tool_counts columns); pref_tools has one weight each")
    pref_tools: tuple[float, ...] = opt((0.0,) * NUM_TOOLS,
                                        help="preference per tool, tool spec order (CLI: a:b:c:...)")
    pref_outcome: float = opt(1.0, help="preference for the outcome")
    pref_cost: float = opt(0.5, help="preference for low cost")
    pref_latency: float = opt(0.5, help="preference for low latency")
    # xrouter: outcome * (1 - min(usd_scale * usd, max_cost_penalty))
    usd_scale: float = opt(3.0, lo=0.0, hi=INF, help="cost penalty per USD")
    max_cost_penalty: float = opt(0.8, lo=0.0, hi=1.0, help="cap of the cost penalty")
    # router_r1: format -1, else (1 - alpha) * outcome + alpha * normalized sqrt-cost reward when correct
    alpha_cost: float = opt(0.6, lo=0.0, hi=1.0, help="weight of the cost reward")
    format_reward: float = opt(-1.0, lo=-INF, hi=0.0, help="reward of a trajectory with a format failure")
    cost_lo: float | None = opt(None, lo=0.0, hi=INF, help="fixed lower cost bound (none: batch percentile)")
    cost_hi: float | None = opt(None, lo=0.0, hi=INF, help="fixed upper cost bound (none: batch percentile)")
    cost_pct_lo: float = opt(5.0, lo=0.0, hi=100.0, help="lower batch percentile of the cost bounds")
    cost_pct_hi: float = opt(95.0, lo=0.0, hi=100.0, help="upper batch percentile of the cost bounds")

    def __post_init__(self) -> None:
        validate(self)
        if len(self.pref_tools) != self.num_tools:
            raise ValueError(f"RewardConfig.pref_tools = {self.pref_tools}: expected num_tools = {self.num_tools} "
                             f"weights (one per tool of the tool spec, in its order), got {len(self.pref_tools)}")
        if self.cost_pct_lo >= self.cost_pct_hi:
            raise ValueError(
                f"RewardConfig.cost_pct_lo = {self.cost_pct_lo}: must be < cost_pct_hi = {self.cost_pct_hi}")
        if (self.cost_lo is None) != (self.cost_hi is None):
            raise ValueError("RewardConfig.cost_lo / cost_hi: set both (fixed bounds) or neither (batch percentiles)")
        if self.cost_lo is not None and self.cost_lo >= self.cost_hi:  # type: ignore[operator]
            raise ValueError(f"RewardConfig.cost_lo = {self.cost_lo}: must be < cost_hi = {self.cost_hi}")
        self._check_magnitude()

    def _check_magnitude(self) -> None:
        """Refuse weights whose rewards could overflow: the absolute weights the formula reads, summed (scaled by
        2**-1000, so the sum itself cannot overflow), bound |reward| and must stay <= ``MAX_REWARD_MAGNITUDE``;
        w_outcome = w_diversity = 1e308 each pass their own range but their total is inf."""
        names = FORMULA_SPECS[self.formula].magnitude
        weights = [w for n in names for w in np.atleast_1d(np.asarray(getattr(self, n), np.float64))]
        if math.fsum(math.ldexp(abs(w), -1000) for w in weights) > math.ldexp(MAX_REWARD_MAGNITUDE, -1000):
            shown = ", ".join(f"{n} = {getattr(self, n)}" for n in names)
            raise ValueError(f"RewardConfig: {shown}: the sum of their absolute values bounds the reward and must be "
                             f"<= 2**1000 (~{MAX_REWARD_MAGNITUDE:.3g}) so that rewards, their sums and advantages "
                             "stay finite")

    def replace(self, **changes: Any) -> RewardConfig:
        """A copy with ``changes`` applied (strings are parsed, e.g. from a ``--grid`` flag).

        Raises when a changed field is not read by the resulting formula, so that a sweep cannot vary
        a constant that has no effect.
        """
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"RewardConfig: unknown field(s) {unknown}; fields: {sorted(names)}")
        parsed = {k: parse_field(k, v) for k, v in changes.items()}
        new = dataclasses.replace(self, **parsed)
        unused = sorted(k for k in changes if k not in FORMULA_SPECS[new.formula].fields)
        if unused:
            raise ValueError(f"RewardConfig: field(s) {unused} are not read by formula {new.formula!r} "
                             f"(it reads: {list(FORMULA_SPECS[new.formula].fields)})")
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
        ``parasim._core.reward_param_names(num_tools)``: the fixed parameters, then ``pref_tools``), packed once
        per config. The config is frozen, and packing it
        field by field on every call cost ~100 us, which dominated scoring a small batch (an env's terminal
        step). ``cost_lo`` / ``cost_hi`` stay 0 here: Router-R1's bounds may depend on the batch, so
        ``compute_rewards`` fills them per call."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["formula"] = FORMULAS.index(self.formula)
        values.update({f"pref_tool_{t}": p for t, p in enumerate(self.pref_tools)})
        values["cost_lo"], values["cost_hi"] = 0.0, 0.0
        row = np.array([float(values[name]) for name in _core.reward_param_names(self.num_tools)])
        row.flags.writeable = False
        return row

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RewardConfig:
        """Build from a mapping (e.g. JSON); a ``preset`` key starts from that preset, other keys override it."""
        data = dict(data)
        base = preset(data.pop("preset")) if "preset" in data else cls(formula=data.get("formula", "paramanager"))
        # a full dump (dataclasses.asdict) carries every field: only values that differ count as changes
        changes = {k: v for k, v in data.items() if k not in base.__dataclass_fields__
                   or parse_field(k, v) != getattr(base, k)}
        return base.replace(**changes) if changes else base

    def to_dict(self) -> dict[str, Any]:
        """The fields this config's formula reads (JSON-serializable)."""
        return {k: (list(v) if isinstance(v, tuple) else v)
                for k, v in dataclasses.asdict(self).items() if k in FORMULA_SPECS[self.formula].fields}


def parse_field(name: str, text: Any) -> Any:
    """Field ``name``'s value from a string (command line, grid: numbers, ``true``/``false``, ``none``, ``a:b:...``
    tuples) or an already typed value, checked against the field's declaration."""
    return check(spec_of(RewardConfig, name), text, f"RewardConfig.{name}", text=True)


# ----------------------------------------------------------------------------------------- presets
# The preset registry lives beside the config it builds, so that ``RewardConfig.from_dict`` can start from a
# preset without importing the scoring module (which imports this one).
PRESETS: dict[str, RewardConfig] = {}
PRESET_SOURCES: dict[str, str] = {}


def register_preset(name: str) -> Callable[[Callable[[], RewardConfig]], Callable[[], RewardConfig]]:
    """Register a preset factory under ``name``; its docstring is the preset's source note."""

    def wrap(factory: Callable[[], RewardConfig]) -> Callable[[], RewardConfig]:
        PRESETS[name] = factory()
        PRESET_SOURCES[name] = (factory.__doc__ or "").strip()
        return factory

    return wrap


@register_preset("paramanager")
def paramanager() -> RewardConfig:
    """ParaManager (Qwen3-4B manager over a tool pool, 12 rounds x 4 parallel calls). A RECONSTRUCTION:
    the paper names the terms (outcome, protocol compliance, diversity with theta_par = 1.25 parallel calls
    per round and theta_tool = 3 distinct tools, soft length and cost budgets with L_tar = 12,288 tokens and
    C_tar = 8 cost units, maximum = 2 x target) but its equations are not public; the weights
    (w_protocol 0.5, w_diversity 0.2, w_length 0.5, w_cost 0.5), the per-round format penalty (0.25) and
    gating diversity on correctness are our choices. The soft budget follows DAPO (arXiv 2503.14476)."""
    return RewardConfig(formula="paramanager")


@register_preset("toolorchestra")
def toolorchestra() -> RewardConfig:
    """ToolOrchestra (Su et al., arXiv 2511.21689, section 3): outcome-gated preference reward
    R = P . M_norm when the answer is correct, else 0, with M = [per-tool call counts, outcome,
    -cost ($), -latency] min-max normalized over the rollouts of the same task. The paper samples the
    preference vector P per training instance; the default here (outcome 1, cost 0.5, latency 0.5,
    no tool preference) is ours."""
    return RewardConfig(formula="toolorchestra")


@register_preset("xrouter")
def xrouter() -> RewardConfig:
    """xRouter (arXiv 2510.08439): cost-aware success reward, score x (1 - min(3 x usd, 0.8)), i.e. a
    correct answer keeps at least 20% of its reward however expensive it was."""
    return RewardConfig(formula="xrouter", usd_scale=3.0, max_cost_penalty=0.8)


@register_preset("router_r1")
def router_r1() -> RewardConfig:
    """Router-R1 (Zhang et al., arXiv 2506.09033): hierarchical rule reward; a format error gives -1 and
    voids the rest, else (1 - alpha) x outcome + alpha x cost reward, the cost reward being the sqrt of
    the $ cost normalized by (rolling) percentiles and paid only when correct. alpha = 0.6 is our default."""
    return RewardConfig(formula="router_r1", alpha_cost=0.6, format_reward=-1.0)


def preset(name: str) -> RewardConfig:
    """The preset called ``name``, with a clear error for unknown names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown reward preset {name!r}; presets: {sorted(PRESETS)}") from None


def resolve_config(config: RewardConfig | str) -> RewardConfig:
    """Accept a config or a preset name."""
    if isinstance(config, RewardConfig):
        return config
    if isinstance(config, str):
        return preset(config)
    raise TypeError(f"reward config must be a RewardConfig or a preset name, got {type(config).__name__}")
