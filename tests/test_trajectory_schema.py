"""One trajectory schema: the compiled core, TrajectoryBatch, the simulator's gather and the single-episode row
builders all take their fields from ``parasim.scoring.trajectory_schema`` (checked here against each of them)."""
from __future__ import annotations

import inspect
import pickle

import numpy as np
import pytest

from parasim import _core
from parasim.protocol.schema import MAX_TOOLS, NUM_TOOLS
from parasim.scoring.batch import BatchValidationError, TrajectoryBatch
from parasim.scoring.trajectory_schema import CORE_FIELDS, FIELD, FIELDS, TRAJECTORY_FIELDS, new_rows
from parasim.sim import Simulator
from parasim.sim.gather import gather_trajectories, lane_selection_fields, trajectory_fields
from parasim.sim.kernel import F_COST, F_LAT, F_OUTCOME, F_TOKENS, F_USD, I_CALLS, I_EPISODE, I_FINAL, I_FMT, I_ROUND


def test_compiled_core_reads_exactly_the_schemas_core_fields() -> None:
    got = [(name, np.dtype(dtype), ndim) for name, dtype, ndim in _core.trajectory_fields()]
    want = [(f.name, np.dtype(f.dtype), f.ndim) for f in TRAJECTORY_FIELDS if f.core]
    assert got == want
    assert [f.name for f in TRAJECTORY_FIELDS if not f.core] == ["role_id"]  # reaches the core as its own argument
    assert _core.max_tools == MAX_TOOLS


def test_core_names_a_missing_or_mistyped_schema_field() -> None:
    arrays = TrajectoryBatch.from_arrays(outcome=[1.0, 0.0]).as_dict()
    params = np.zeros((1, len(_core.reward_param_names(NUM_TOOLS))))
    for name in CORE_FIELDS[1:]:
        broken = {k: v for k, v in arrays.items() if k != name}
        with pytest.raises(ValueError, match=f"missing field {name}"):
            _core.score_rewards(broken, params, np.empty((1, 2)), None)
        wrong = {**arrays, name: arrays[name].astype(np.float32)}
        with pytest.raises(TypeError, match=f"{name}: expected a C-contiguous array of dtype"):
            _core.score_rewards(wrong, params, np.empty((1, 2)), None)


def test_batch_takes_its_fields_dtypes_and_defaults_from_the_schema() -> None:
    assert TrajectoryBatch.__slots__ == FIELDS
    b = TrajectoryBatch.from_arrays(outcome=[1.0, 0.0, 1.0])
    assert list(b.as_dict()) == list(FIELDS)
    for name, want in new_rows(3).items():
        if name == "outcome":
            continue
        got = getattr(b, name)
        assert got.dtype == FIELD[name].dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    np.testing.assert_array_equal(b.group_id, [0, 1, 2])  # each trajectory its own group


def test_new_rows_shapes_follow_the_tool_count() -> None:
    rows = new_rows(4, 9, fill=False)
    assert list(rows) == list(FIELDS)
    assert rows["tool_counts"].shape == (4, 9) and rows["outcome"].shape == (4,)
    assert all(rows[f.name].dtype == f.dtype for f in TRAJECTORY_FIELDS)


def test_batch_is_immutable_and_pickles() -> None:
    b = TrajectoryBatch.from_arrays(outcome=[1.0, 0.0], tokens=[3.0, 4.0], num_tools=9)
    with pytest.raises(AttributeError, match="immutable"):
        b.tokens = np.zeros(2)  # type: ignore[misc]
    c = pickle.loads(pickle.dumps(b))
    assert c.num_tools == 9
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(c, name), getattr(b, name))
    with pytest.raises(TypeError, match=r"missing \['usd'\]"):
        TrajectoryBatch(**{k: v for k, v in b.as_dict().items() if k != "usd"})


def test_tool_count_is_explicit_and_bounds_distinct_tools() -> None:
    b = TrajectoryBatch.from_arrays(outcome=[1.0], tool_counts=np.ones((1, 9), int), distinct_tools=[9], num_tools=9)
    assert b.num_tools == 9 and b.tool_counts.shape == (1, 9)
    with pytest.raises(BatchValidationError, match=r"distinct_tools\[0\] = 10: must be in \[0, 9\]"):
        TrajectoryBatch.from_arrays(outcome=[1.0], distinct_tools=[10], num_tools=9)
    with pytest.raises(BatchValidationError, match=r"tool_counts: expected shape \(N, 9\)"):
        TrajectoryBatch.from_arrays(outcome=[1.0], tool_counts=np.ones((1, 7), int), num_tools=9)
    with pytest.raises(BatchValidationError, match=r"num_tools = 0: must be an integer >= 1"):
        TrajectoryBatch.from_arrays(outcome=[1.0], num_tools=0)
    with pytest.raises(BatchValidationError, match=r"different tool counts \[7, 9\]"):
        TrajectoryBatch.concat([b, TrajectoryBatch.from_arrays(outcome=[0.0])])


# --------------------------------------------------------------------------------------- the simulator's gather
def test_gather_takes_one_output_per_schema_field_in_order() -> None:
    params = list(inspect.signature(gather_trajectories.py_func).parameters)
    assert params[:2] == ["idx", "lanes"] and tuple(params[2:]) == FIELDS


@pytest.fixture(scope="module")
def sim() -> Simulator:
    s = Simulator("paramanager", "paramanager", 24)
    s.seed(list(range(24)))
    s.reset()
    rng = np.random.default_rng(1)
    for _ in range(5):
        acts = rng.integers(0, s.nvec, size=(24, len(s.nvec)))
        acts[:, 0] = rng.random(24) < 0.2
        s.step(acts, np.zeros(24, np.uint8))
    return s


def _numpy_rows(sim: Simulator, idx: np.ndarray) -> dict[str, np.ndarray]:
    """The rows written out field by field from the lane state views (the oracle of the compiled gather)."""
    st_i, st_f, counts = sim.state.st_i[idx], sim.state.st_f[idx], sim.state.counts_t[idx]
    return {"outcome": st_f[:, F_OUTCOME], "format_violations": st_i[:, I_FMT], "ended_with_final": st_i[:, I_FINAL],
            "rounds": st_i[:, I_ROUND], "tool_calls": st_i[:, I_CALLS], "distinct_tools": (counts > 0).sum(1),
            "tool_counts": counts, "tokens": st_f[:, F_TOKENS], "cost_units": st_f[:, F_COST], "usd": st_f[:, F_USD],
            "latency_s": st_f[:, F_LAT], "group_id": st_i[:, I_EPISODE],
            "preference": np.nan_to_num(sim.lane_records["preference"][idx]),
            "has_preference": ~np.isnan(sim.lane_records["preference"][idx, 0]), "role_id": np.zeros(len(idx))}


def test_gather_writes_every_field_in_its_schema_dtype(sim: Simulator) -> None:
    idx = np.array([3, 0, 23, 3, 11], np.int64)
    got = trajectory_fields(idx, sim._lanes.lanes)
    want = _numpy_rows(sim, idx)
    assert list(got) == list(FIELDS) and got["tool_calls"].sum() > 0
    for f in TRAJECTORY_FIELDS:
        assert got[f.name].dtype == f.dtype and got[f.name].shape == f.shape(len(idx), NUM_TOOLS), f.name
        np.testing.assert_array_equal(got[f.name], want[f.name], err_msg=f.name)
    TrajectoryBatch.from_arrays(**got)  # and in its range


@pytest.mark.parametrize("lanes", [slice(None), slice(2, 9, 3), [4, 1], np.arange(24) % 3 == 0, 5])
def test_any_lane_selection_gathers_the_same_rows(sim: Simulator, lanes: object) -> None:
    got = lane_selection_fields(lanes, sim.num_lanes, sim._lanes.lanes)
    idx = np.arange(sim.num_lanes)[lanes]
    flat = trajectory_fields(np.atleast_1d(idx).astype(np.int64), sim._lanes.lanes)
    for name in FIELDS:
        assert got[name].shape == np.shape(idx) + flat[name].shape[1:], name
        np.testing.assert_array_equal(np.reshape(got[name], flat[name].shape), flat[name], err_msg=name)
    np.testing.assert_array_equal(got["rounds"], sim.trajectory(lanes)["rounds"])
