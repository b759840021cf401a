"""A sweep's outputs: the terminal table, CSV and JSON, and the plots (matplotlib, Agg backend).

Seeds of one grid label are averaged (the table shows mean +- std over seeds). Points evaluated on a second pool
(``eval.pool``) get that pool's scalars (``EVAL_POOL_SCALARS``, prefixed ``eval_pool_``) beside the training pool's,
in the summary files and as columns of the tables. Plots put each label
on accuracy against tokens, cost and latency with the Pareto front (higher accuracy, lower
spend) drawn through the non-dominated labels, and stack the tool and model distributions per label.
A file is rewritten only when its content changes (``parasim.config.writes.publish``), so rerunning a finished sweep
writes nothing and works on a read-only output folder; a file that must change but cannot raises
``StoreError`` with its path and the reason.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parasim.config.writes import publish, publish_json
from parasim.protocol.schema import Tool

SCALARS = ("accuracy", "reward", "sft_accuracy", "sft_reward", "train_reward_start", "train_reward_end", "tokens",
           "cost_units", "usd", "latency_s",
           "rounds", "calls_per_round", "distinct_tools", "format_failure_rate", "wall_s")
EVAL_POOL_SCALARS = ("accuracy", "reward", "tokens", "cost_units", "usd", "latency_s")
SPEND_AXES = (("tokens", "tokens per trajectory"), ("cost_units", "cost units per trajectory"),
              ("latency_s", "latency (critical path, s)"))


def aggregate(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per grid label (in first-seen order): mean and std of each scalar over seeds."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(r["label"], []).append(r)
    rows = []
    for label, rs in groups.items():
        row: dict[str, Any] = {"label": label, "seeds": sorted(r["seed"] for r in rs)}
        for name in SCALARS:
            vals = np.array([r[name] for r in rs if r.get(name) is not None], dtype=float)
            row[name] = float(vals.mean()) if vals.size else float("nan")
            row[f"{name}_std"] = float(vals.std()) if vals.size else float("nan")
        shifted = [r["eval_pool"] for r in rs if r.get("eval_pool")]
        if shifted:
            row["eval_pool"] = " ".join(dict.fromkeys(e["pool"] for e in shifted))
            for name in EVAL_POOL_SCALARS:
                vals = np.array([e[name] for e in shifted], dtype=float)
                row[f"eval_pool_{name}"], row[f"eval_pool_{name}_std"] = float(vals.mean()), float(vals.std())
        row["tool_dist"] = np.mean([r["tool_dist"] for r in rs], axis=0).tolist()
        models = sorted({m for r in rs for m in r["model_dist"]})
        row["model_dist"] = {m: float(np.mean([r["model_dist"].get(m, 0.0) for r in rs])) for m in models}
        rows.append(row)
    return rows


def pareto_front(acc: np.ndarray, spend: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both axes (higher accuracy, lower spend), by spend."""
    order = np.lexsort((-acc, spend))
    front, best = [], -np.inf
    for i in order:
        if acc[i] > best:
            front.append(int(i))
            best = acc[i]
    return np.array(front, dtype=int)


def print_table(rows: Sequence[dict[str, Any]], title: str = "parasim sweep") -> None:
    """The sweep table on the terminal (rich)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    cols = [("point", None), ("seeds", None), ("accuracy", "accuracy"), ("acc SFT", None), ("reward SFT->final", None),
            ("tokens", "tokens"), ("cost", "cost_units"), ("USD", "usd"), ("latency s", "latency_s"),
            ("calls/round", "calls_per_round"), ("tools/traj", "distinct_tools"),
            ("format fail", "format_failure_rate")]
    shifted = any("eval_pool" in r for r in rows)
    if shifted:
        cols += [("eval pool", None), ("acc eval pool", None), ("tokens eval pool", None), ("cost eval pool", None)]
    for name, _ in cols:
        table.add_column(name, justify="left" if name == "point" else "right", no_wrap=name == "point")
    for r in rows:
        cells = [r["label"], str(len(r["seeds"]))]
        cells.append(f"{r['accuracy']:.3f} ± {r['accuracy_std']:.3f}")
        cells.append(f"{r['sft_accuracy']:.3f}")
        cells.append(f"{r['sft_reward']:+.3f} -> {r['reward']:+.3f}")
        cells += [f"{r['tokens']:.0f}", f"{r['cost_units']:.2f}", f"{r['usd']:.4f}", f"{r['latency_s']:.1f}",
                  f"{r['calls_per_round']:.2f}", f"{r['distinct_tools']:.2f}", f"{r['format_failure_rate']:.3f}"]
        if shifted:
            cells += _eval_pool_cells(r)
        table.add_row(*cells)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # logs and pipes: do not squeeze the table to 80 columns
    console.print(table)


def _eval_pool_cells(row: dict[str, Any]) -> list[str]:
    """A row's eval-pool columns (pool, accuracy mean ± std, tokens, cost units); dashes for a row without one."""
    if "eval_pool" not in row:
        return ["-"] * 4
    return [row["eval_pool"], f"{row['eval_pool_accuracy']:.3f} ± {row['eval_pool_accuracy_std']:.3f}",
            f"{row['eval_pool_tokens']:.0f}", f"{row['eval_pool_cost_units']:.2f}"]


def write_tables(results: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """``results.json`` (every point, every field), ``summary.json`` and ``summary.csv`` (per label)."""
    publish_json(out / "results.json", list(results))
    publish_json(out / "summary.json", list(rows))
    fields = ["label", "seeds"] + [n for s in SCALARS for n in (s, f"{s}_std")]
    if any("eval_pool" in r for r in rows):
        fields += ["eval_pool"] + [n for s in EVAL_POOL_SCALARS for n in (f"eval_pool_{s}", f"eval_pool_{s}_std")]
    fields += [f"tool_{t.wire_name}" for t in Tool if t != Tool.FINAL_ANSWER]
    lines: list[dict[str, Any]] = []
    for r in rows:
        line = {k: r[k] for k in fields if k in r}
        line["seeds"] = " ".join(map(str, r["seeds"]))
        line.update({f"tool_{Tool(i).wire_name}": v for i, v in enumerate(r["tool_dist"])})
        lines.append(line)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    publish(out / "summary.csv", buf.getvalue().encode())
    publish(out / "summary.md", markdown_table(rows).encode())
    return [out / "results.json", out / "summary.json", out / "summary.csv", out / "summary.md"]


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The summary as a Markdown table (mean ± std over seeds), for docs and reports."""
    shifted = any("eval_pool" in r for r in rows)
    head = ("| point | seeds | accuracy | SFT accuracy | reward SFT -> final | tokens | cost units | USD | latency s "
            "| calls/round | tools/traj | format fail |")
    if shifted:
        head += " eval pool | accuracy (eval pool) | tokens (eval pool) | cost units (eval pool) |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['label']} | {' '.join(map(str, r['seeds']))} | {r['accuracy']:.3f} ± {r['accuracy_std']:.3f} "
            f"| {r['sft_accuracy']:.3f} | {r['sft_reward']:+.3f} -> {r['reward']:+.3f} | {r['tokens']:.0f} "
            f"| {r['cost_units']:.2f} | {r['usd']:.4f} | {r['latency_s']:.1f} | {r['calls_per_round']:.2f} "
            f"| {r['distinct_tools']:.2f} | {r['format_failure_rate']:.3f} |"
            + ("".join(f" {c} |" for c in _eval_pool_cells(r)) if shifted else ""))
    return "\n".join(lines) + "\n"


def write_plots(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """``pareto.png`` (accuracy vs tokens / cost / latency, error bars = std over seeds) and
    ``distributions.png`` (tool and model shares per label)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["label"] for r in rows]
    acc = np.array([r["accuracy"] for r in rows])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, (key, title) in zip(axes, SPEND_AXES):
        spend = np.array([r[key] for r in rows])
        ax.errorbar(spend, acc, xerr=[r[f"{key}_std"] for r in rows], yerr=[r["accuracy_std"] for r in rows],
                    fmt="o", ms=6, capsize=3, zorder=3, label="mean ± std over seeds")
        for x, y, lab in zip(spend, acc, labels):
            ax.annotate(lab, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        front = pareto_front(acc, spend)
        ax.step(spend[front], acc[front], where="post", color="tab:red", lw=1.2, label="Pareto front")
        ax.set_xlabel(title)
        ax.set_ylabel("accuracy (mean@k)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    pareto = out / "pareto.png"
    publish(pareto, _png(fig))

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(14, 4.5))
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for i, tool in enumerate(t for t in Tool if t != Tool.FINAL_ANSWER):
        vals = np.array([r["tool_dist"][i] for r in rows])
        ax_t.bar(x, vals, bottom=bottom, label=tool.wire_name)
        bottom += vals
    models = sorted({m for r in rows for m in r["model_dist"]})
    bottom = np.zeros(len(rows))
    for m in models:
        vals = np.array([r["model_dist"].get(m, 0.0) for r in rows])
        ax_m.bar(x, vals, bottom=bottom, label=m)
        bottom += vals
    titles = ((ax_t, "tool distribution (share of calls)"), (ax_m, "model distribution (share of agent calls)"))
    for ax, title in titles:
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(title)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    dists = out / "distributions.png"
    publish(dists, _png(fig))
    return [pareto, dists]


def _png(fig: Any) -> bytes:
    """The figure as PNG bytes (closed afterwards): the same rows give the same bytes, so ``publish`` can skip them."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()


def write_report(results: Sequence[dict[str, Any]], out: str | Path, show: bool = True) -> list[Path]:
    """Everything a finished sweep writes; returns the report's paths (each rewritten only if it changed)."""
    out = Path(out)
    rows = aggregate(results)
    if show:
        print_table(rows)
    paths = write_tables(results, rows, out) + write_plots(rows, out)
    return paths
