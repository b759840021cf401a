"""The benchmark policy: pre-sampled random actions, shared by the env benchmarks and by the comparison against
another checkout (``against_checkout.py``), whose worker imports this module only (NumPy, no parasim), so both
checkouts step the same actions whatever their own benchmark code says."""
from __future__ import annotations

import numpy as np

STOP_P = 1 / 6  # a policy that runs about five rounds before answering


def policy_actions(nvec: np.ndarray, lanes: int, steps: int, seed: int = 0) -> np.ndarray:
    """Pre-sampled actions [steps, lanes, D]: random calls, stop with prob STOP_P."""
    rng = np.random.default_rng(seed)
    acts = rng.integers(0, nvec, size=(steps, lanes, len(nvec)))
    acts[..., 0] = rng.random((steps, lanes)) < STOP_P
    acts[..., 3::3] = 0  # fresh-question targets keep most calls valid, as a trained policy would
    return acts
