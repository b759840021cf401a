"""Turn a pytest-benchmark JSON file into the ratio tables of docs/performance.md.

    pytest benchmarks/bench_core.py --benchmark-only --benchmark-json=.benchmarks/core.json
    python benchmarks/report.py .benchmarks/core.json --update docs/performance.md

Each group is one comparison measured in the same run; every row is shown as a multiple of the group's
``core`` row. The targets of the core's issue are checked at the end, on best-of (min) and median times.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- bench_core:begin -->", "<!-- bench_core:end -->"


def _impl(bench: dict[str, Any]) -> str:
    return str((bench.get("params") or {}).get("impl", bench["name"]))


def _fmt(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def load_groups(path: Path) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, Any]]:
    data = json.loads(path.read_text())
    groups: dict[str, dict[str, dict[str, float]]] = {}
    for bench in data["benchmarks"]:
        groups.setdefault(bench["group"] or bench["name"], {})[_impl(bench)] = bench["stats"]
    return groups, data


def _group_key(name: str) -> tuple[str, float]:
    m = re.search(r"N=([0-9.e+]+)", name)
    return (re.sub(r"N=[0-9.e+]+", "", name), float(m.group(1)) if m else 0.0)


def tables(groups: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    lines: list[str] = []
    for group in sorted(groups, key=_group_key):
        rows = groups[group]
        core = rows.get("core")
        lines += [f"**{group}**", "", "| implementation | min | median | median / core median |",
                  "| --- | ---: | ---: | ---: |"]
        for impl, st in sorted(rows.items(), key=lambda kv: kv[1]["median"]):
            ratio = f"{st['median'] / core['median']:.2f}x" if core else "-"
            lines.append(f"| {impl} | {_fmt(st['min'])} | {_fmt(st['median'])} | {ratio} |")
        lines.append("")
    return lines


def targets(groups: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    out = ["| target (issue 2) | best-of (min) | median | met (median) |", "| --- | ---: | ---: | :---: |"]

    def row(label: str, group: str, num: str, den: str, ok: Any, unit: str = "x") -> None:
        g = groups.get(group, {})
        if num not in g or den not in g:
            return
        vals = [g[num][k] / g[den][k] for k in ("min", "median")]
        out.append(f"| {label} | {vals[0]:.2f}{unit} | {vals[1]:.2f}{unit} | {'yes' if ok(vals[1]) else 'no'} |")

    adv = next((g for g in groups if g.startswith("advantages N=1e+07")), "")
    row("advantages N=1e7: NumPy reshape time / core time (>= 20x)", adv, "numpy_reshape", "core", lambda v: v >= 20)
    row("advantages N=1e7: core time / memcpy of the rewards (<= 2x)", adv, "core", "memcpy", lambda v: v <= 2)
    row("advantages N=1e7: core time / memcpy of rewards + ids (<= 2x)", adv, "core", "memcpy_rewards_and_ids",
        lambda v: v <= 2)
    masks = next((g for g in groups if g.startswith("masks")), "")
    row("masks 4096x8192: core time / memset (<= 2x)", masks, "core", "memset", lambda v: v <= 2)
    row("masks 4096x8192: core time / fill with ones", masks, "core", "memset_ones", lambda v: v <= 2)
    grid = groups.get("reward grid 64 configs x N=1e6", {})
    if "core" in grid:
        st = grid["core"]
        out.append(f"| reward grid 64 x 1e6 (< 1 s) | {st['min']:.3f} s | {st['median']:.3f} s | "
                   f"{'yes' if st['median'] < 1 else 'no'} |")
    return out


def render(path: Path) -> str:
    groups, data = load_groups(path)
    info = data.get("machine_info", {})
    cpu = info.get("cpu", {}).get("brand_raw", "unknown CPU")
    cores = info.get("cpu", {}).get("count", "?")
    when = data.get("datetime", "")[:19]
    commit = data.get("commit_info", {}).get("id", "?")[:10]
    python = info.get("python_version", "?")
    stamp = f"Measured {when} UTC on {cpu}, {cores} logical CPUs, Python {python}; commit {commit}."
    head = [BEGIN, "", stamp, ""]
    return "\n".join(head + targets(groups) + [""] + tables(groups) + [END]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="pytest-benchmark --benchmark-json output")
    parser.add_argument("--update", type=Path, help="replace the generated section of this markdown file")
    args = parser.parse_args()
    text = render(args.json)
    if args.update is None:
        print(text, end="")
        return
    doc = args.update.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{args.update}: no {BEGIN} ... {END} section to replace")
    start, stop = doc.index(BEGIN), doc.index(END) + len(END)
    args.update.write_text(doc[:start] + text.rstrip("\n") + doc[stop:])


if __name__ == "__main__":
    main()
