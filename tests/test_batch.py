"""TrajectoryBatch: conversion, defaults, and errors that name the field and the index."""
from __future__ import annotations

import numpy as np
import pytest

from parasim.protocol.schema import NUM_TOOLS, Tool
from parasim.scoring.batch import FIELDS, BatchValidationError, TrajectoryBatch


def _arrays(n: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "outcome": rng.integers(0, 2, n).astype(float), "format_violations": rng.integers(0, 3, n),
        "ended_with_final": rng.integers(0, 2, n), "rounds": rng.integers(0, 12, n),
        "tool_calls": rng.integers(0, 40, n), "distinct_tools": rng.integers(0, NUM_TOOLS + 1, n),
        "tool_counts": rng.integers(0, 5, (n, NUM_TOOLS)), "tokens": rng.uniform(0, 3e4, n),
        "cost_units": rng.uniform(0, 20, n), "usd": rng.uniform(0, 1, n), "latency_s": rng.uniform(0, 100, n),
        "group_id": np.repeat(np.arange(n // 2), 2), "role_id": np.zeros(n, int),
    }


def test_from_arrays_fixes_dtypes_and_contiguity():
    arrays = _arrays(6)
    arrays["tokens"] = np.arange(12.0)[::2]  # a strided view must come out contiguous
    b = TrajectoryBatch.from_arrays(**arrays)
    assert len(b) == 6
    want = {"outcome": np.float64, "format_violations": np.int32, "ended_with_final": np.uint8,
            "tool_counts": np.int32, "group_id": np.int64, "role_id": np.int32, "usd": np.float64}
    for name, dtype in want.items():
        assert getattr(b, name).dtype == dtype, name
    assert all(v.flags.c_contiguous for v in b.as_dict().values())
    np.testing.assert_array_equal(b.tokens, np.arange(0.0, 12.0, 2.0))


def test_defaults_make_each_trajectory_its_own_group():
    b = TrajectoryBatch.from_arrays(outcome=[1, 0, 1])
    np.testing.assert_array_equal(b.group_id, [0, 1, 2])
    assert b.tool_counts.shape == (3, NUM_TOOLS) and not b.tool_counts.any()
    assert len(TrajectoryBatch.from_arrays(outcome=np.zeros(0))) == 0


@pytest.mark.parametrize(("field", "value", "message"), [
    ("outcome", [0.0, np.nan, 1.0, 0.0], r"outcome\[1\] = nan: must be finite"),
    ("outcome", [0.0, 0.0, 1.5, 0.0], r"outcome\[2\] = 1.5: must be in \[0.0, 1.0\]"),
    ("rounds", [1, 2, -3, 4], r"rounds\[2\] = -3: must be in \[0,"),
    ("tokens", [1.0, np.inf, 0.0, 0.0], r"tokens\[1\] = inf: must be finite"),
    ("usd", [0.0, 0.0, 0.0, -1e-3], r"usd\[3\] = -0.001: must be in \[0.0, inf\]"),
    ("distinct_tools", [0, 8, 1, 1], r"distinct_tools\[1\] = 8: must be in \[0, 7\]"),
    ("ended_with_final", [0, 1, 2, 1], r"ended_with_final\[2\] = 2: must be in \[0, 1\]"),
    ("tool_calls", [1.0, 2.5, 0.0, 0.0], r"tool_calls\[1\] = 2.5: must be an integer"),
    ("rounds", ["a", "b", "c", "d"], r"rounds: dtype <U1 is not numeric"),
    ("group_id", [0.5, 1, 2, 3], r"group_id\[0\] = 0.5: must be an integer"),
    ("latency_s", [1.0, 2.0], r"latency_s: length 2 differs from outcome's length 4 \(ragged"),
    ("tool_counts", np.zeros((4, 3)), r"tool_counts: expected shape \(N, 7\)"),
    ("role_id", [0, 0, -1, 0], r"role_id\[2\] = -1"),
])
def test_bad_fields_are_named_with_their_index(field, value, message):
    arrays = _arrays(4)
    arrays[field] = np.asarray(value)
    with pytest.raises(BatchValidationError, match=message):
        TrajectoryBatch.from_arrays(**arrays)


def test_bad_tool_count_names_row_and_column():
    arrays = _arrays(4)
    arrays["tool_counts"][2, 5] = -1
    with pytest.raises(BatchValidationError, match=r"tool_counts\[2, 5\] = -1"):
        TrajectoryBatch.from_arrays(**arrays)


def test_unknown_and_missing_fields_are_rejected():
    with pytest.raises(BatchValidationError, match="unknown field"):
        TrajectoryBatch.from_arrays(outcome=[1.0], tokenz=[3.0])
    with pytest.raises(BatchValidationError, match="outcome is required"):
        TrajectoryBatch.from_arrays(tokens=[3.0])


def test_from_records_matches_from_arrays_and_accepts_tool_count_mappings():
    arrays = _arrays(4)
    records = [{k: (v[i].tolist() if np.ndim(v) > 1 else v[i].item()) for k, v in arrays.items()} for i in range(4)]
    records[1]["tool_counts"] = {Tool(t).wire_name: int(c) for t, c in enumerate(arrays["tool_counts"][1])}
    records[2]["tool_counts"] = {Tool(t): int(c) for t, c in enumerate(arrays["tool_counts"][2])}
    a, b = TrajectoryBatch.from_arrays(**arrays), TrajectoryBatch.from_records(records)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_from_records_errors_name_the_record():
    with pytest.raises(BatchValidationError, match=r"outcome\[1\]: missing"):
        TrajectoryBatch.from_records([{"outcome": 1.0}, {"tokens": 3.0}])
    with pytest.raises(BatchValidationError, match=r"tokens\[0\]: missing while other records set it"):
        TrajectoryBatch.from_records([{"outcome": 1.0}, {"outcome": 0.0, "tokens": 3.0}])
    with pytest.raises(BatchValidationError, match=r"tool_counts\[0\]: unknown tool 'hammer'"):
        TrajectoryBatch.from_records([{"outcome": 1.0, "tool_counts": {"hammer": 1}}])
    with pytest.raises(BatchValidationError, match=r"tool_counts\[0\]: FINAL_ANSWER is not a counted tool"):
        TrajectoryBatch.from_records([{"outcome": 1.0, "tool_counts": {"final_answer": 1}}])
    with pytest.raises(BatchValidationError, match=r"record\[0\]: unknown field"):
        TrajectoryBatch.from_records([{"outcome": 1.0, "colour": 3}])
    assert len(TrajectoryBatch.from_records([])) == 0


def test_subset_and_concat_roundtrip():
    b = TrajectoryBatch.from_arrays(**_arrays(6))
    parts = [b.subset(slice(0, 2)), b.subset(np.array([2, 3, 4, 5]))]
    joined = TrajectoryBatch.concat(parts)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(joined, name), getattr(b, name))
    mask = b.outcome > 0
    assert len(b.subset(mask)) == int(mask.sum())


def test_replace_validates_the_new_fields_and_keeps_the_rest():
    batch = TrajectoryBatch.from_arrays(outcome=np.array([1.0, 0.0]), tokens=np.array([3.0, 4.0]))
    moved = batch.replace(group_id=np.array([5, 5]))
    assert moved.group_id.tolist() == [5, 5] and batch.group_id.tolist() == [0, 1]
    assert moved.tokens is batch.tokens and moved.group_id.dtype == np.int64
    with pytest.raises(BatchValidationError, match="group_id"):
        batch.replace(group_id=np.array([0.5, 1.0]))
    with pytest.raises(BatchValidationError, match="unknown field"):
        batch.replace(tokenz=np.array([1.0, 2.0]))
