"""parasim: a calibrated testbed for training LLM managers that orchestrate parallel tool calls.

Public names are resolved lazily (PEP 562) so that ``import parasim`` stays cheap: the C++ core,
numba and torch load only when something that needs them is touched.
"""
from __future__ import annotations

from parasim.lazy_exports import lazy_getattr

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "TrajectoryBatch": "parasim.scoring.batch",
    "RewardConfig": "parasim.scoring.rewards",
    "compute_rewards": "parasim.scoring.rewards",
    "compute_rewards_grid": "parasim.scoring.rewards",
    "group_advantages": "parasim.scoring.advantages",
    "loss_mask_from_spans": "parasim.scoring.masks",
    "loss_normalizers": "parasim.scoring.masks",
    "broadcast_to_tokens": "parasim.scoring.masks",
    "PoolSpec": "parasim.pools.pool",
    "load_pool": "parasim.pools.pool",
}

__all__ = sorted(_LAZY) + ["__version__"]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


def _register() -> None:
    from envs.registration import register_envs

    register_envs()


_register()
