"""Per-episode random streams for the compiled simulator (splitmix64, one uint64 state per lane).

Each lane owns its stream, so a lane's trajectory depends only on its own seed and actions: the single
env seeded with ``s + i`` and lane ``i`` of a vector env seeded with ``s`` draw identical numbers
(Gymnasium's SyncVectorEnv seeds its envs the same way). numba's global ``np.random`` state cannot give
that, and splitmix64 (Steele, Lea, Flood 2014) passes BigCrush with one add, two multiplies per draw.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def seed_state(seed: int) -> np.uint64:
    """The initial stream state of an episode seeded with ``seed`` (any Python int)."""
    return np.uint64(_mix((int(seed) * _GOLDEN + 0x632BE59BD9B4E019) & _MASK))


@njit(cache=True)
def next_u64(state: np.ndarray, i: int) -> np.uint64:
    s = state[i] + np.uint64(_GOLDEN)
    state[i] = s
    z = (s ^ (s >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def uniform(state: np.ndarray, i: int) -> float:
    """A float in [0, 1) with 53 random bits."""
    return float(next_u64(state, i) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def normal(state: np.ndarray, i: int) -> float:
    """A standard normal draw (Box-Muller, one of the pair)."""
    u1 = uniform(state, i)
    u2 = uniform(state, i)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)
