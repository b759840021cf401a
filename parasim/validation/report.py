"""validate-sim's outputs: the table on the terminal (rich), the plot (matplotlib, Agg) and the JSON report.

Files are written atomically (``parasim.config.writes.publish``): a reader sees the old report or the new one.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from parasim.config.writes import publish
from parasim.validation.compare import HEADLINE
from parasim.validation.replay import STATUS_GROUPS

PLOTTED = (("accuracy", "accuracy"), ("tokens", "tool-output tokens / episode"), ("cost_units", "cost units / episode"),
           ("latency_s", "latency s / episode (critical path)"))


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}" if abs(x) < 100 else f"{x:.0f}"


def _cell(value: float | None, ci: list[float | None]) -> str:
    return f"{_fmt(value)} [{_fmt(ci[0])}, {_fmt(ci[1])}]"


def print_table(report: dict[str, Any], *, all_figures: bool = False) -> None:
    """One row per benchmark and figure: real and simulated with their intervals, the difference, the verdict.
    Without ``all_figures`` only the headline figures and status rates are shown (the JSON has every figure)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"parasim validate-sim: simulated vs real ({report['level']:.0%} intervals, "
                        f"{report['replicas']} replicas per episode)")
    for name in ("benchmark", "figure", "real [interval]", "simulated [replicas' range]", "sim - real", "p",
                 "verdict"):
        table.add_column(name, justify="left" if name in ("benchmark", "figure", "verdict") else "right")
    shown = set(HEADLINE) | {f"status.{g}" for g in STATUS_GROUPS}
    for bench, group in report["benchmarks"].items():
        first = True
        for name, m in group["metrics"].items():
            if not all_figures and name not in shown:
                continue
            label = f"{bench} ({group['episodes']} ep, {group['tasks']} tasks)" if first else ""
            first = False
            verdict = {True: "ok", False: "[bold red]differs[/]", None: "-"}[m["consistent"]]
            p = "-" if m["p"] is None else f"{m['p']:.3f}"
            table.add_row(label, name, _cell(m["real"], m["real_ci"]), _cell(m["sim"], m["sim_range"]),
                          _fmt(m["diff"]), p, verdict)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # logs and pipes: do not squeeze the table to 80 columns
    console.print(table)
    s = report["summary"]
    console.print(f"{s['flagged']} of {s['figures']} figures fail the predictive check (about "
                  f"{s['expected_by_chance']:g} would by chance)"
                  + (f": {', '.join(s['flagged_figures'][:12])}" if s["flagged_figures"] else ""))


def _errorbar(ax: Any, x: np.ndarray, metric: list[dict[str, Any] | None], side: str, **style: Any) -> None:
    """Points with their interval: the real figure's bootstrap interval, the replicas' range for the simulated."""
    span = "real_ci" if side == "real" else "sim_range"
    value = np.array([np.nan if m is None or m[side] is None else m[side] for m in metric])
    lo = np.array([np.nan if m is None or m[span][0] is None else m[span][0] for m in metric])
    hi = np.array([np.nan if m is None or m[span][1] is None else m[span][1] for m in metric])
    yerr = np.nan_to_num(np.vstack([value - lo, hi - value]).clip(min=0))
    ax.errorbar(x, value, yerr=yerr, fmt="o", capsize=3, **style)


def plot_png(report: dict[str, Any]) -> bytes:
    """Real against simulated per benchmark for the plotted figures, and the pooled status and tool shares."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = report["benchmarks"]
    names = list(groups)
    x = np.arange(len(names))
    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    for ax, (key, title) in zip(axes.flat, PLOTTED):
        metric = [groups[b]["metrics"].get(key) for b in names]
        _errorbar(ax, x - 0.1, metric, "real", color="tab:blue", label="real")
        _errorbar(ax, x + 0.1, metric, "sim", color="tab:orange", label="simulated")
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    pooled = groups["all"] if "all" in groups else groups[names[0]]
    for ax, prefix, title in ((axes.flat[4], "status.", "status shares of issued slots"),
                              (axes.flat[5], "tool.", "tool shares of OK calls")):
        keys = [k for k in pooled["metrics"] if k.startswith(prefix)]
        metric = [pooled["metrics"][k] for k in keys]
        xs = np.arange(len(keys))
        _errorbar(ax, xs - 0.1, metric, "real", color="tab:blue", label="real")
        _errorbar(ax, xs + 0.1, metric, "sim", color="tab:orange", label="simulated")
        ax.set_xticks(xs, [k.removeprefix(prefix) for k in keys], rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{title} ({'all' if 'all' in groups else names[0]})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"validate-sim: {report['episodes']} logged episodes, {report['replicas']} simulated replicas each, "
                 f"{report['level']:.0%} intervals (real: bootstrap over tasks; simulated: replicas' range)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_outputs(report: dict[str, Any], out: Path) -> list[Path]:
    """``validate_sim.json`` and ``validate_sim.png`` in ``out``, each replaced atomically."""
    paths = [out / "validate_sim.json", out / "validate_sim.png"]
    publish(paths[0], (json.dumps(report, indent=1, sort_keys=True) + "\n").encode())
    publish(paths[1], plot_png(report))
    return paths


def print_per_query(report: dict[str, Any]) -> None:
    """One row per benchmark and joint statistic of a per-query comparison: items within tolerance, means, worst."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"parasim validate-sim: simulated vs real per-query joint statistics ({report['rows']} rows, "
                        f"pool {report['pool']['name']} {report['pool']['source']})")
    for name in ("benchmark", "statistic", "items within", "tolerance", "real mean", "sim mean", "max |sim - real|"):
        table.add_column(name, justify="left" if name in ("benchmark", "statistic") else "right")
    for row in report["summary"].values():
        within = f"{row['within']}/{row['items']}"
        table.add_row(row["benchmark"], row["statistic"], within if row["within"] == row["items"] else
                      f"[bold red]{within}[/]", _fmt(row["tolerance"]), _fmt(row["real_mean"]), _fmt(row["sim_mean"]),
                      _fmt(row["max_abs_diff"]))
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)
    t = report["totals"]
    console.print(f"{t['within']} of {t['items']} items within their tolerance (validate_sim.json lists each item)")


def write_per_query(report: dict[str, Any], out: Path) -> list[Path]:
    """``validate_sim.json`` of a per-query comparison in ``out``, replaced atomically."""
    path = out / "validate_sim.json"
    out.mkdir(parents=True, exist_ok=True)
    publish(path, (json.dumps(report, indent=1, sort_keys=True) + "\n").encode())
    return [path]
