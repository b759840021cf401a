"""Group-relative advantages over a flat batch of rewards: one C++ call for the whole batch.

Methods live in a registry (as verl's ``core_algos`` registers estimators by name); each names the
baseline it subtracts and the scaling it uses when ``scale`` is not given. Statistics are accumulated in
float64 with a two-pass variance whatever the input dtype; group ids may come in any order and groups
may differ in size (a group of one gets advantage 0). Contiguous equal-size groups with increasing ids
(G rollouts of a task side by side, the usual GRPO layout) take a streaming fast path in the core.

Every finite reward is valid, up to the float64 maximum: the core takes each group's statistics of the
rewards scaled by a power of two (exact, so ordinary rewards get the plain formulas' results bit for
bit), so no sum of squares overflows into a silent all-zero group. An advantage that does not fit the
output dtype (``dr_grpo`` of rewards near the float64 maximum) is an error unless ``clip`` bounds it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parasim import _core
from parasim.config.fields import opt
from parasim.scoring.batch import check_no_overlap, int_array, real_array, real_scalar

__all__ = ["ADV_SCALES", "ADV_STDS", "METHODS", "SCALES", "AdvantageConfig", "AdvantageMethod", "group_advantages"]

SCALES: tuple[str, ...] = ("group", "batch", "none")


@dataclass(frozen=True)
class AdvantageMethod:
    """A registered estimator: its core code, its default scale and where it comes from."""

    code: int
    default_scale: str
    needs_roles: bool
    source: str


METHODS: dict[str, AdvantageMethod] = {
    "grpo": AdvantageMethod(0, "group", False,
                            "GRPO (Shao et al., DeepSeekMath, arXiv 2402.03300): (r - mean_g) / (std_g + eps)."),
    "dr_grpo": AdvantageMethod(1, "none", False,
                               "Dr. GRPO (Liu et al., arXiv 2503.20783): r - mean_g, no std division (it biases "
                               "towards easy and hard questions)."),
    "rloo": AdvantageMethod(2, "none", False,
                            "RLOO (Ahmadian et al., arXiv 2402.14740): r_i - mean of the other G-1 rewards."),
    "per_role": AdvantageMethod(3, "group", True,
                                "Per-role normalization (Dr. MAS): GRPO statistics per (group, role) pair, so that "
                                "agents with different reward scales do not share a baseline."),
}


def _ids(values: np.ndarray, name: str, n: int, dtype: type, *, lo: int | None = None,
         keep: tuple[type, ...] = ()) -> np.ndarray:
    """Ids of the N rewards as the core's integer dtype; values it cannot hold are errors, not wrapped."""
    a = np.asarray(values)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},) like rewards, got {a.shape}")
    return int_array(a, name, dtype, lo=lo, keep=keep)


def group_advantages(rewards: np.ndarray, group_ids: np.ndarray, method: str = "grpo", *, eps: float = 1e-6,
                     std: str = "unbiased", scale: str | None = None, clip: float | None = None,
                     role_ids: np.ndarray | None = None, min_group_std: float | None = None,
                     out: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Advantages (rewards' dtype, float32 or float64) and a keep mask (bool) for N trajectories.

    ``scale``: ``group`` divides by the statistics unit's std + eps, ``batch`` by the std of all rewards +
    eps (group mean, batch std: the Lite PPO recipe, arXiv 2508.08221), ``none`` not at all; ``None`` uses
    the method's default (grpo and per_role: group; dr_grpo and rloo: none). ``std`` is ``unbiased``
    (ddof 1, as torch.std in verl) or ``biased``. ``min_group_std`` marks groups whose reward std is below
    it as not kept, with advantage 0 (ToolOrchestra drops groups with std < 0.1). ``clip`` bounds the
    result to [-clip, clip]. ``out`` = (advantages, keep) preallocated buffers, filled in place; they may not share
    memory with an input or each other (ValueError: the core reads the rewards while it writes the advantages).

    Rewards of another real dtype become float64 where that is exact (integers up to 2**53); ids become
    int64 (``group_ids``, int32 kept) and int32 (``role_ids``) only where every value fits. Bools, floats
    as ids and out-of-range values raise TypeError / ValueError naming the argument, index and range.
    """
    if method not in METHODS:
        raise ValueError(f"method = {method!r}: must be one of {sorted(METHODS)}")
    spec = METHODS[method]
    scale = spec.default_scale if scale is None else scale
    if scale not in SCALES:
        raise ValueError(f"scale = {scale!r}: must be one of {list(SCALES)} or None")
    if std not in ("unbiased", "biased"):
        raise ValueError(f"std = {std!r}: must be 'unbiased' or 'biased'")
    eps = real_scalar("eps", eps, 0.0)
    clip = None if clip is None else real_scalar("clip", clip, 0.0, lo_open=True)
    min_group_std = None if min_group_std is None else real_scalar("min_group_std", min_group_std, 0.0)
    r = real_array(rewards, "rewards")
    if r.ndim != 1:
        raise ValueError(f"rewards: expected a 1-d array, got shape {r.shape}")
    g = _ids(group_ids, "group_ids", r.shape[0], np.int64, keep=(np.int64, np.int32))
    roles = None
    if role_ids is not None:
        roles = _ids(role_ids, "role_ids", r.shape[0], np.int32, lo=0)
    elif spec.needs_roles:
        raise ValueError(f"role_ids: required by method {method!r}")
    if out is None:
        adv, keep = np.empty_like(r), np.empty(r.shape, np.bool_)
    else:
        adv, keep = out
        if adv.shape != r.shape or adv.dtype != r.dtype or not adv.flags.c_contiguous:
            raise ValueError(f"out[0]: expected a C-contiguous {r.dtype} array of shape {r.shape}")
        if keep.shape != r.shape or keep.dtype != np.bool_ or not keep.flags.c_contiguous:
            raise ValueError(f"out[1]: expected a C-contiguous bool array of shape {r.shape}")
        check_no_overlap({"out[0]": adv, "out[1]": keep}, {"rewards": r, "group_ids": g, "role_ids": roles})
    _core.group_advantages(r, g, roles, spec.code, SCALES.index(scale), std == "unbiased", eps, clip,
                           min_group_std, adv, keep.view(np.uint8))
    return adv, keep


ADV_STDS: tuple[str, ...] = ("unbiased", "biased")
ADV_SCALES: tuple[str, ...] = ("default", *SCALES)  # "default": the estimator's own scale (``METHODS``)


@dataclass(frozen=True)
class AdvantageConfig:
    """The advantage settings of both GRPO trainers, declared once: the small policy's ``training.grpo.GRPOConfig``
    and the LLM manager's ``training.llm.grpo.GRPOArgs`` inherit them, so the estimator a sweep studies is the one an
    LLM run trains with, under the same names and ranges."""

    adv_method: str = opt("grpo", choices=tuple(METHODS), help="core advantage estimator (parasim.scoring.advantages)")
    adv_std: str = opt("unbiased", choices=ADV_STDS, help="std estimator of grpo")
    adv_scale: str = opt("default", choices=ADV_SCALES, help="advantage scaling (default: the method's own)")
    adv_clip: float = opt(0.0, lo=0.0, hi=1e6, help="clip advantages to +-adv_clip (0 = off)")
    min_group_std: float = opt(0.0, lo=0.0, hi=1e6, help="drop groups with reward std below (ToolOrchestra 0.1)")

    def advantages(self, rewards: np.ndarray, group_ids: np.ndarray,
                   role_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``group_advantages`` of ``rewards`` under these settings: (advantages, kept-group mask)."""
        return group_advantages(rewards, group_ids, self.adv_method, std=self.adv_std, role_ids=role_ids,
                                scale=None if self.adv_scale == "default" else self.adv_scale,
                                clip=self.adv_clip or None, min_group_std=self.min_group_std or None)
