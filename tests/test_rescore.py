"""Re-scoring stored trajectories: Parquet round trip, one batched core call, ranking statistics, CLI."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parasim.cli import main
from parasim.scoring.batch import TrajectoryBatch
from parasim.scoring.rewards import compute_rewards
from training import rescore


def _batch(n: int = 400, seed: int = 0) -> TrajectoryBatch:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, (n, 7))
    return TrajectoryBatch.from_arrays(
        outcome=rng.integers(0, 2, n).astype(float), format_violations=rng.integers(0, 2, n),
        ended_with_final=rng.integers(0, 2, n), rounds=rng.integers(1, 12, n), tool_calls=counts.sum(1),
        distinct_tools=(counts > 0).sum(1), tool_counts=counts, tokens=rng.uniform(100, 30_000, n),
        cost_units=rng.uniform(0, 20, n), usd=rng.uniform(0, 0.1, n), latency_s=rng.uniform(1, 300, n),
        group_id=np.arange(n) // 8)


def test_parquet_round_trip(tmp_path):
    b = _batch()
    back = rescore.read_parquet(rescore.write_parquet(b, tmp_path / "t.parquet"))
    for name in rescore.FIELDS:
        np.testing.assert_array_equal(getattr(back, name), getattr(b, name), err_msg=name)


def test_preferences_and_other_tool_counts_round_trip_and_old_files_read_as_none(tmp_path):
    """Every schema field is stored, per-episode preference vectors included (the toolorchestra reward of a rescore
    must be the episodes' own), the tool count is the file's (a 9-tool spec), and a file written before the
    preference fields existed reads as rows without one."""
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    n, tools = 16, 9
    pref = np.where(rng.random((n, 1)) < 0.5, rng.uniform(0, 1, (n, tools + 3)), np.nan)
    b = TrajectoryBatch.from_arrays(num_tools=tools, outcome=rng.integers(0, 2, n).astype(float),
                                    tool_counts=rng.integers(0, 3, (n, tools)), preference=pref)
    path = rescore.write_parquet(b, tmp_path / "p.parquet")
    back = rescore.read_parquet(path)
    assert back.num_tools == tools
    for name in rescore.FIELDS:
        np.testing.assert_array_equal(getattr(back, name), getattr(b, name), err_msg=name)
    assert back.has_preference.sum() == np.isfinite(pref[:, 0]).sum() > 0
    table = pq.read_table(path).drop(["preference", "has_preference"])
    pq.write_table(table, tmp_path / "old.parquet")
    old = rescore.read_parquet(tmp_path / "old.parquet")
    assert not old.has_preference.any() and not old.preference.any()


def test_missing_column_is_named(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"outcome": [1.0, 0.0]}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="format_violations"):
        rescore.read_parquet(tmp_path / "x.parquet")


def test_one_grid_call_matches_per_config_rewards(monkeypatch):
    b = _batch()
    calls = []
    real = rescore.compute_rewards_grid
    monkeypatch.setattr(rescore, "compute_rewards_grid",
                        lambda batch, cfgs: calls.append(len(cfgs)) or real(batch, cfgs))
    configs = rescore.reward_grid(rescore.parse_axes(["c_tar=4,16", "w_diversity=0,0.5"]))
    rows = rescore.rescore(b, configs, top_k=50)
    assert calls == [5]
    assert rows[0]["kendall_tau_vs_base"] == pytest.approx(1.0) and rows[0]["top50_overlap_vs_base"] == 1.0
    for (label, cfg), row in zip(configs, rows):
        assert row["mean_reward"] == pytest.approx(compute_rewards(b, cfg).total.mean()), label
    assert rows[1]["config"] == "c_tar=4,w_diversity=0"
    assert rows[1]["mean_reward"] < rows[3]["mean_reward"]  # a tighter cost budget never raises the reward


def test_preset_axis_and_bad_names():
    configs = rescore.reward_grid(rescore.parse_axes(["reward=xrouter,toolorchestra"]))
    assert [c.formula for _, c in configs] == ["paramanager", "xrouter", "toolorchestra"]
    with pytest.raises(ValueError, match="not a reward option"):
        rescore.reward_grid(rescore.parse_axes(["grpo.lr=0.1"]))
    with pytest.raises(ValueError, match="c_tar"):
        rescore.reward_grid(rescore.parse_axes(["c_tar=-1"]))
    with pytest.raises(ValueError, match="NAME=V1"):
        rescore.parse_axes(["c_tar"])


def test_rank_changes_detects_reversal():
    x = np.arange(100, dtype=float)
    tau, overlap = rescore.rank_changes(x, -x, 10)
    assert tau == pytest.approx(-1.0) and overlap == 0.0


def test_cli(tmp_path, capsys):
    path = rescore.write_parquet(_batch(), tmp_path / "t.parquet")
    assert main(["rescore", str(path), "--grid", "c_tar=4,16", "--out", str(tmp_path / "r.json")]) == 0
    rows = json.loads((tmp_path / "r.json").read_text())
    assert [r["config"] for r in rows] == ["paramanager (base)", "c_tar=4", "c_tar=16"]
    assert "rescore of 400 trajectories" in capsys.readouterr().out
    assert main(["rescore", str(path), "--grid", "nope=1"]) == 2


def test_cli_writes_csv_with_the_json_rows(tmp_path):
    import csv

    path = rescore.write_parquet(_batch(), tmp_path / "t.parquet")
    assert main(["rescore", str(path), "--grid", "c_tar=4,16", "--out", str(tmp_path / "r.json")]) == 0
    assert main(["rescore", str(path), "--grid", "c_tar=4,16", "--out", str(tmp_path / "r.csv")]) == 0
    rows = json.loads((tmp_path / "r.json").read_text())
    with open(tmp_path / "r.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["config"] for r in table] == [r["config"] for r in rows]
    assert "reward_config" not in table[0] and float(table[1]["mean_reward"]) == pytest.approx(rows[1]["mean_reward"])


# ------------------------------------------------------------------ trajectories with holes (issue 24, findings 12, 14)
def _with(tmp_path, column: str, change):
    path = rescore.write_parquet(_batch(8), tmp_path / "t.parquet")
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    change(values)
    i = table.column_names.index(column)
    table = table.set_column(i, column, pa.array(values, type=table.schema.field(column).type))
    pq.write_table(table, path)
    return path


def test_a_null_tool_counts_row_names_the_row(tmp_path):
    path = _with(tmp_path, "tool_counts", lambda v: v.__setitem__(3, None))
    with pytest.raises(ValueError, match=r"t.parquet: row 3: tool_counts is null"):
        rescore.read_parquet(path)


def test_a_null_tool_counts_element_names_the_row(tmp_path):
    path = _with(tmp_path, "tool_counts", lambda v: v[5].__setitem__(2, None))
    with pytest.raises(ValueError, match=r"t.parquet: row 5: tool_counts holds a null element"):
        rescore.read_parquet(path)


def test_a_null_scalar_names_the_row(tmp_path):
    path = _with(tmp_path, "tokens", lambda v: v.__setitem__(0, None))
    with pytest.raises(ValueError, match=r"t.parquet: row 0: tokens is null"):
        rescore.read_parquet(path)


def test_a_file_without_rows_says_so(tmp_path):
    path = rescore.write_parquet(_batch(8), tmp_path / "t.parquet")
    pq.write_table(pq.read_table(path).slice(0, 0), path)
    with pytest.raises(ValueError, match=r"t.parquet: no rows \(expected at least one trajectory\)$"):
        rescore.read_parquet(path)


def test_a_file_that_is_not_parquet_is_a_value_error(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_text("not parquet")
    with pytest.raises(ValueError, match=r"t.parquet: not a readable Parquet file"):
        rescore.read_parquet(path)
