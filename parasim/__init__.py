"""parasim: a calibrated testbed for training LLM managers that orchestrate parallel tool calls.

Public names are resolved lazily (PEP 562) so that ``import parasim`` stays cheap: the C++ core,
numba and torch load only when something that needs them is touched.
"""
from __future__ import annotations

from parasim.lazy_exports import lazy_getattr

__version__ = "0.1.0"

# A source checkout's ``parasim`` (e.g. the working directory when python runs from the checkout root)
# shadows the installed one, which alone holds the compiled ``_core``: extending the package path lets
# ``parasim._core`` (and nothing else) come from the installed wheel's copy.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

_LAZY: dict[str, str] = {
    "TrajectoryBatch": "parasim.batch",
    "RewardConfig": "parasim.rewards",
    "compute_rewards": "parasim.rewards",
    "compute_rewards_grid": "parasim.rewards",
    "group_advantages": "parasim.advantages",
    "loss_mask_from_spans": "parasim.masks",
    "loss_normalizers": "parasim.masks",
    "broadcast_to_tokens": "parasim.masks",
    "PoolSpec": "parasim.pools",
    "load_pool": "parasim.pools",
}

__all__ = sorted(_LAZY) + ["__version__"]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


def _register() -> None:
    from parasim.envs.registration import register_envs

    register_envs()


_register()
