"""ParaOrch-v0's action mask in the two formats consumers read.

The observation's ``action_mask`` (and ``env.action_masks()``) is flat: the per-dimension masks of the
``MultiDiscrete(nvec)`` action concatenated in ``nvec`` order, which is what sb3-contrib's MaskablePPO takes (its
``MaskableMultiCategoricalDistribution`` splits a flat mask of length ``sum(nvec)`` by ``nvec``). Gymnasium's
``MultiDiscrete.sample(mask=...)`` wants one int8 array per dimension instead; ``tuple_mask`` converts::

    env.action_space.sample(mask=tuple_mask(obs["action_mask"], env.action_space.nvec))
"""
from __future__ import annotations

from typing import Any

import numpy as np


def tuple_mask(flat_mask: Any, nvec: Any) -> tuple[np.ndarray, ...]:
    """The per-dimension masks (int8, 1 = allowed) of a flat mask over the dimensions of ``MultiDiscrete(nvec)``.

    ``flat_mask`` is one observation's mask (shape ``[sum(nvec)]``, bool or integers in {0, 1}); ``nvec`` the
    action's sizes (1-D). A batch of masks is not taken: Gymnasium samples a batched space with nested masks.
    """
    sizes = np.asarray(nvec)
    if sizes.ndim != 1 or sizes.dtype.kind not in "iu" or not (sizes > 0).all():
        raise ValueError(f"nvec: expected a 1-D array of positive integers, got {nvec!r}")
    mask = np.asarray(flat_mask)
    total = int(sizes.sum())
    if mask.shape != (total,) or mask.dtype.kind not in "biu":
        raise ValueError(f"flat_mask: expected a bool or integer array of shape ({total},) (sum of nvec "
                         f"{sizes.tolist()}), got dtype {mask.dtype} shape {mask.shape}")
    if mask.dtype.kind != "b" and not np.isin(mask, (0, 1)).all():
        raise ValueError(f"flat_mask: expected values in {{0, 1}}, got {np.unique(mask).tolist()}")
    return tuple(np.split(mask.astype(np.int8), np.cumsum(sizes)[:-1]))
