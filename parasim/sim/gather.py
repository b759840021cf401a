"""Compiled gathering of finished episodes' trajectory rows from the lane records.

The rows are a dozen columns of the lane state; gathered with NumPy they cost a fancy index per field and a
copy or cast per field (~15 us for one lane, most of an env's terminal step besides the reward), while one
compiled pass writes all of them into arrays allocated from the trajectory schema (``new_rows``). The
compiled function takes one output per schema field, in schema order (a test checks its parameter names
against ``parasim.scoring.trajectory_schema.FIELDS``), so a field added to the schema cannot be silently left unset.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from parasim.scoring.trajectory_schema import new_rows
from parasim.sim.kernel import F_COST, F_LAT, F_OUTCOME, F_TOKENS, F_USD, I_CALLS, I_EPISODE, I_FINAL, I_FMT, I_ROUND


@njit(cache=True, boundscheck=True)  # a bad lane raises IndexError, as NumPy indexing would
def gather_trajectories(idx, lanes, outcome, format_violations, ended_with_final, rounds, tool_calls, distinct_tools,
                        tool_counts, tokens, cost_units, usd, latency_s, group_id, preference, has_preference,
                        role_id):
    """Row ``j`` of each output array from the record of lane ``idx[j]`` (casts as NumPy's ``astype``).

    ``group_id`` is the lane's episode number since it was seeded; ``preference`` the episode's preference vector
    (the lane's NaN, none, becomes zeros with ``has_preference`` 0); ``role_id`` 0 (the simulator plays one role).
    """
    num_tools = tool_counts.shape[1]
    for j in range(idx.shape[0]):
        lane = lanes[idx[j]]
        st_i, st_f, counts_t = lane.st_i, lane.st_f, lane.counts_t
        outcome[j] = st_f[F_OUTCOME]
        format_violations[j] = st_i[I_FMT]
        ended_with_final[j] = st_i[I_FINAL]
        rounds[j] = st_i[I_ROUND]
        tool_calls[j] = st_i[I_CALLS]
        distinct = 0
        for t in range(num_tools):
            tool_counts[j, t] = counts_t[t]
            distinct += counts_t[t] > 0
        distinct_tools[j] = distinct
        tokens[j] = st_f[F_TOKENS]
        cost_units[j] = st_f[F_COST]
        usd[j] = st_f[F_USD]
        latency_s[j] = st_f[F_LAT]
        group_id[j] = st_i[I_EPISODE]
        own = not math.isnan(lane.preference[0])
        for f in range(preference.shape[1]):
            preference[j, f] = lane.preference[f] if own else 0.0
        has_preference[j] = own
        role_id[j] = 0


def trajectory_fields(idx: np.ndarray, lanes: np.ndarray) -> dict[str, np.ndarray]:
    """The trajectory rows (schema dtypes and order) of lanes ``idx`` (int64[n], valid lane indices) of the lane
    records ``lanes``; ``tool_counts`` has one column per tool the lane records count."""
    out = new_rows(idx.shape[0], lanes.dtype["counts_t"].shape[0], fill=False)
    gather_trajectories(idx, lanes, *out.values())
    return out


def lane_selection_fields(lanes: object, num_lanes: int, records: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`trajectory_fields` of any NumPy selection of lanes (a slice, a list, a scalar, a boolean mask):
    the rows of ``np.arange(num_lanes)[lanes]``, shaped as that selection (a scalar lane gives 0-d fields and a
    1-d ``tool_counts``)."""
    idx = np.arange(num_lanes, dtype=np.int64)[lanes]
    flat = trajectory_fields(np.ascontiguousarray(idx.reshape(-1)), records)
    if idx.ndim == 1:
        return flat
    return {k: v.reshape(idx.shape + v.shape[1:]) for k, v in flat.items()}
