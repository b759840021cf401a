"""Re-score stored trajectories under a grid of reward configs with one batched core call.

Trajectories are Parquet, one row per trajectory, one column per ``TrajectoryBatch`` field
(``tool_counts`` and ``preference`` list columns, one entry per tool of the batch's tool spec, ``preference``
three more: see ``parasim.scoring.trajectory_schema``). The grid crosses reward options like a sweep
grid (``--grid c_tar=4,8 --grid w_div=0,1``); all configs are scored by ONE
``compute_rewards_grid`` call, which is what makes millions of trajectories times dozens of configs
a matter of seconds. The report says how the mean reward moves and how the ranking of trajectories
changes against the base config: Kendall's tau-b and the overlap of the top-k sets.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parasim.protocol.schema import NUM_TOOLS
from parasim.scoring.batch import TrajectoryBatch
from parasim.scoring.rewards import FORMULA_SPECS, RewardConfig, compute_rewards_grid, mean_std, preset
from parasim.scoring.trajectory_schema import FIELD, FIELDS

# fields older trajectory files may lack: the ids default to 0 (one group, one role), no row has a preference
OPTIONAL_FIELDS = ("group_id", "role_id", "preference", "has_preference")


def write_parquet(batch: TrajectoryBatch, path: str | Path) -> Path:
    """Store a batch as Parquet, one row per trajectory and one column per ``TRAJECTORY_FIELDS`` entry (the per-tool
    fields as list columns): what ``evaluate`` and ``parasim train`` dump."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {}
    for name in FIELDS:
        arr = np.asarray(getattr(batch, name))
        cols[name] = pa.array(list(arr)) if arr.ndim == 2 else pa.array(arr)
    path = Path(path)
    pq.write_table(pa.table(cols), path)
    return path


def read_parquet(path: str | Path) -> TrajectoryBatch:
    """Load a Parquet file of trajectories (its tool count is ``tool_counts``'s width); missing ``OPTIONAL_FIELDS``
    take their defaults, any other missing field is an error."""
    import pyarrow.parquet as pq

    if not Path(path).is_file():
        raise ValueError(f"{path}: no such file (expected a Parquet file of trajectories)")
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"{path}: not a readable Parquet file ({' '.join(str(err).split())[:200]})") from None
    n = table.num_rows
    if n == 0:
        raise ValueError(f"{path}: no rows (expected at least one trajectory)")
    arrays: dict[str, np.ndarray] = {}
    for name in FIELDS:
        if name not in table.column_names:
            if name in ("group_id", "role_id"):
                arrays[name] = np.zeros(n, dtype=FIELD[name].dtype)
            elif name not in OPTIONAL_FIELDS:
                raise ValueError(f"{path}: column {name!r} missing (TrajectoryBatch fields: {', '.join(FIELDS)})")
            continue
        col = table.column(name)
        if col.null_count:  # a null would become NaN, None or a TypeError below, never a value
            row = next(i for i, v in enumerate(col.is_null().to_pylist()) if v)
            raise ValueError(f"{path}: row {row}: {name} is null (every trajectory needs a value)")
        if FIELD[name].per_tool:
            rows = col.to_pylist()
            for i, r in enumerate(rows):
                if not isinstance(r, list) or any(x is None for x in r):
                    raise ValueError(f"{path}: row {i}: {name} holds a null element (expected one number per tool)")
            widths = {len(r) for r in rows}
            if len(widths) > 1:
                raise ValueError(f"{path}: {name} rows have different lengths {sorted(widths)}")
            arrays[name] = np.asarray(rows, dtype=FIELD[name].dtype).reshape(n, -1)
        else:
            arrays[name] = col.to_numpy()
    num_tools = arrays["tool_counts"].shape[1] if "tool_counts" in arrays else NUM_TOOLS
    return TrajectoryBatch.from_arrays(num_tools=num_tools, **arrays)


def parse_axes(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Parse repeated ``--grid name=v1,v2`` (names are checked by ``reward_grid``)."""
    axes = []
    for spec in specs:
        name, sep, values = spec.partition("=")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name.strip() or not items:
            raise ValueError(f"--grid {spec!r}: expected NAME=V1,V2,... (e.g. c_tar=4,8,16)")
        axes.append((name.strip(), items))
    return axes


def reward_grid(axes: Sequence[tuple[str, Sequence[str]]], base: str = "paramanager") -> list[tuple[str, RewardConfig]]:
    """(label, RewardConfig) for the base preset followed by every point of the grid.

    Axis names are reward fields (``c_tar`` or ``reward.c_tar``) or ``preset`` / ``reward`` to switch
    the preset; the core's ``RewardConfig.replace`` parses and range-checks each value. Crossing presets
    with a field applies the field only to the formulas that read it: ``--grid c_tar=4,8 --grid
    reward=paramanager,xrouter`` scores paramanager at each c_tar and xrouter once, its label saying that
    it does not read c_tar. A field that no formula on the grid reads is an error (the axis would change
    nothing).
    """
    fields = {f.name for f in dataclasses.fields(RewardConfig)}
    names = []
    for name, _ in axes:
        short = name.strip().removeprefix("reward.")
        if short not in fields and short not in ("preset", "reward"):
            raise ValueError(f"--grid {name}: not a reward option; reward fields: {', '.join(sorted(fields))}")
        names.append("preset" if short == "reward" else short)
        if names.count(names[-1]) > 1:
            raise ValueError(f"--grid {name}: option {names[-1]!r} appears in two axes")
    labels = dict(zip(names, (n for n, _ in axes)))
    points = [dict(zip(names, values)) for values in itertools.product(*(v for _, v in axes))]
    formulas = {preset(p.get("preset", base)).formula for p in points}
    for name in names:
        if name != "preset" and not any(name in FORMULA_SPECS[f].fields for f in formulas):
            raise ValueError(f"--grid {labels[name]}: {name} is not read by formula {' or '.join(sorted(formulas))} "
                             f"(it reads: {', '.join(FORMULA_SPECS[sorted(formulas)[0]].fields)})")
    configs = [(f"{base} (base)", preset(base))]
    seen: set[str] = set()
    for point in points:
        cfg = preset(point.get("preset", base))
        unread = [n for n in names if n != "preset" and n not in FORMULA_SPECS[cfg.formula].fields]
        used = {n: v for n, v in point.items() if n not in unread}
        label = ",".join(f"{labels[n]}={v}" for n, v in used.items())
        if unread:
            label += f" ({', '.join(unread)}: not read by {cfg.formula})"
        if label in seen:
            continue
        seen.add(label)
        changes = {n: v for n, v in used.items() if n != "preset"}
        configs.append((label, cfg.replace(**changes) if changes else cfg))
    return configs


def rank_changes(base: np.ndarray, other: np.ndarray, k: int) -> tuple[float, float]:
    """Kendall's tau-b of two reward vectors and the overlap of their top-k trajectory sets."""
    from scipy.stats import kendalltau

    tau = kendalltau(base, other).statistic if np.ptp(base) > 0 and np.ptp(other) > 0 else float("nan")
    top_a = np.argsort(-base, kind="stable")[:k]
    top_b = np.argsort(-other, kind="stable")[:k]
    return float(tau), len(np.intersect1d(top_a, top_b)) / max(k, 1)


def rescore(batch: TrajectoryBatch, configs: Sequence[tuple[str, Any]], top_k: int = 100) -> list[dict[str, Any]]:
    """Score ``batch`` under every config in one core call and compare each ranking with the first. Every figure is
    finite or None (Kendall's tau where a ranking is constant), so the rows are strict JSON."""
    rewards = compute_rewards_grid(batch, [c for _, c in configs])
    k = min(top_k, rewards.shape[1])
    rows = []
    for (label, cfg), r in zip(configs, rewards):
        tau, overlap = rank_changes(rewards[0], r, k)
        mean, std = mean_std(r)
        rows.append({"config": label, "mean_reward": mean, "std_reward": std,
                     "kendall_tau_vs_base": None if np.isnan(tau) else tau, f"top{k}_overlap_vs_base": overlap,
                     "reward_config": dataclasses.asdict(cfg)})
    return rows


def print_rescore(rows: Sequence[dict[str, Any]], n: int) -> None:
    """The rescore table on the terminal."""
    from rich.console import Console
    from rich.table import Table

    overlap_key = next(k for k in rows[0] if k.startswith("top"))
    table = Table(title=f"rescore of {n} trajectories")
    for col in ("config", "mean reward", "std", "Kendall tau vs base", overlap_key.replace("_", " ")):
        table.add_column(col, justify="left" if col == "config" else "right", overflow="fold")
    for r in rows:
        table.add_row(r["config"], f"{r['mean_reward']:.4f}", f"{r['std_reward']:.4f}",
                      "n/a" if r["kendall_tau_vs_base"] is None else f"{r['kendall_tau_vs_base']:.3f}",
                      f"{r[overlap_key]:.2f}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # logs and pipes: do not squeeze the table to 80 columns
    console.print(table)
