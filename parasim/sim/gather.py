"""Compiled gathering of finished episodes' TrajectoryBatch fields from the lane state.

The fields are a dozen columns of three state arrays; gathered with NumPy they cost a fancy index per array
and a copy or cast per field (~15 us for one lane, most of an env's terminal step besides the reward), while
one compiled pass writes all of them into freshly allocated arrays.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from parasim.sim.kernel import F_COST, F_LAT, F_OUTCOME, F_TOKENS, F_USD, I_CALLS, I_EPISODE, I_FINAL, I_FMT, I_ROUND


@njit(cache=True, boundscheck=True)  # a bad lane raises IndexError, as NumPy indexing would
def gather_trajectories(lanes, st_i, st_f, counts_t, outcome, format_violations, ended_with_final, rounds,
                        tool_calls, distinct_tools, tool_counts, tokens, cost_units, usd, latency_s, group_id):
    """Row ``j`` of each output array from lane ``lanes[j]`` (casts as NumPy's ``astype``)."""
    for j in range(lanes.shape[0]):
        i = lanes[j]
        outcome[j] = st_f[i, F_OUTCOME]
        format_violations[j] = st_i[i, I_FMT]
        ended_with_final[j] = st_i[i, I_FINAL]
        rounds[j] = st_i[i, I_ROUND]
        tool_calls[j] = st_i[i, I_CALLS]
        distinct = 0
        for t in range(counts_t.shape[1]):
            tool_counts[j, t] = counts_t[i, t]
            distinct += counts_t[i, t] > 0
        distinct_tools[j] = distinct
        tokens[j] = st_f[i, F_TOKENS]
        cost_units[j] = st_f[i, F_COST]
        usd[j] = st_f[i, F_USD]
        latency_s[j] = st_f[i, F_LAT]
        group_id[j] = st_i[i, I_EPISODE]


def trajectory_fields(lanes: np.ndarray, st_i: np.ndarray, st_f: np.ndarray, counts_t: np.ndarray
                      ) -> dict[str, np.ndarray]:
    """The TrajectoryBatch fields (contract dtypes) of ``lanes`` (int64[n], valid lane indices)."""
    n = lanes.shape[0]
    out = {"outcome": np.empty(n), "format_violations": np.empty(n, np.int32),
           "ended_with_final": np.empty(n, np.uint8), "rounds": np.empty(n, np.int32),
           "tool_calls": np.empty(n, np.int32), "distinct_tools": np.empty(n, np.int32),
           "tool_counts": np.empty((n, counts_t.shape[1]), counts_t.dtype), "tokens": np.empty(n),
           "cost_units": np.empty(n), "usd": np.empty(n), "latency_s": np.empty(n),
           "group_id": np.empty(n, st_i.dtype)}
    gather_trajectories(lanes, st_i, st_f, counts_t, *out.values())
    out["role_id"] = np.zeros(n, np.int32)
    return out
