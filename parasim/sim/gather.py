"""Compiled gathering of finished episodes' TrajectoryBatch fields from the lane records.

The fields are a dozen columns of the lane state; gathered with NumPy they cost a fancy index per field
and a copy or cast per field (~15 us for one lane, most of an env's terminal step besides the reward), while
one compiled pass writes all of them into freshly allocated arrays.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from parasim.protocol.schema import NUM_TOOLS
from parasim.sim.kernel import F_COST, F_LAT, F_OUTCOME, F_TOKENS, F_USD, I_CALLS, I_EPISODE, I_FINAL, I_FMT, I_ROUND


@njit(cache=True, boundscheck=True)  # a bad lane raises IndexError, as NumPy indexing would
def gather_trajectories(idx, lanes, outcome, format_violations, ended_with_final, rounds, tool_calls, distinct_tools,
                        tool_counts, tokens, cost_units, usd, latency_s, group_id):
    """Row ``j`` of each output array from the record of lane ``idx[j]`` (casts as NumPy's ``astype``)."""
    for j in range(idx.shape[0]):
        lane = lanes[idx[j]]
        st_i, st_f, counts_t = lane.st_i, lane.st_f, lane.counts_t
        outcome[j] = st_f[F_OUTCOME]
        format_violations[j] = st_i[I_FMT]
        ended_with_final[j] = st_i[I_FINAL]
        rounds[j] = st_i[I_ROUND]
        tool_calls[j] = st_i[I_CALLS]
        distinct = 0
        for t in range(NUM_TOOLS):
            tool_counts[j, t] = counts_t[t]
            distinct += counts_t[t] > 0
        distinct_tools[j] = distinct
        tokens[j] = st_f[F_TOKENS]
        cost_units[j] = st_f[F_COST]
        usd[j] = st_f[F_USD]
        latency_s[j] = st_f[F_LAT]
        group_id[j] = st_i[I_EPISODE]


def trajectory_fields(idx: np.ndarray, lanes: np.ndarray) -> dict[str, np.ndarray]:
    """The TrajectoryBatch fields (contract dtypes) of lanes ``idx`` (int64[n], valid lane indices) of the lane
    records ``lanes``."""
    n = idx.shape[0]
    out = {"outcome": np.empty(n), "format_violations": np.empty(n, np.int32),
           "ended_with_final": np.empty(n, np.uint8), "rounds": np.empty(n, np.int32),
           "tool_calls": np.empty(n, np.int32), "distinct_tools": np.empty(n, np.int32),
           "tool_counts": np.empty((n, NUM_TOOLS), np.int32), "tokens": np.empty(n),
           "cost_units": np.empty(n), "usd": np.empty(n), "latency_s": np.empty(n),
           "group_id": np.empty(n, np.int64)}
    gather_trajectories(idx, lanes, *out.values())
    out["role_id"] = np.zeros(n, np.int32)
    return out
