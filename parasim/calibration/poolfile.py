"""Read a base pool file and write a fitted one that ``parasim.pools.pool.load_pool`` accepts.

A pool file holds more than a call log can identify (prices, cost units, protocol constants, the
distractor structure), so a fit starts from a base pool and replaces only the groups it estimated,
whose ``source`` then names the log (``"fit:calls.jsonl"``). Accuracy targets are the fitted model's
accuracies, under the difficulty spread sigma_b the fit estimated; the loader solves them back to skills
(``parasim.pools.pool.solve_skill``) under the task catalogue's spread, which is what the simulator draws (a
pool holds no spread of its own), so the pool keeps each fitted accuracy, and its skill where the two spreads
agree. Values outside the loader's range are clipped and reported.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np

from parasim.pools.pool import (
    effective_spread,
    expected_accuracy,
    parse_pool,
    pool_file,
    read_pool_file,
    solve_skill,
)
from parasim.protocol.schema import Tool
from parasim.tasks.suites import BENCHMARKS, FREE_FORM

DOMAINS = ("math", "science", "knowledge", "code")


def read_raw(base: str | Path) -> tuple[dict[str, Any], str]:
    """The parsed JSON of a shipped pool (by name) or a pool file, read and validated as ``load_pool`` does
    (``parasim.pools.pool.read_pool_file``), and its name."""
    path = pool_file(base)
    raw, _ = read_pool_file(path)
    return raw, path.stem


# The keys of a model's groups that place it in a family or kind (``interaction``, ``errors``): the calls fit has no
# families or kinds, so a group it fits, or a model it copies from another, keeps none of them, unless a per-query
# fit gave the model its own (``fitted["groups"]``).
GROUP_KEYS = {"interaction": ("family", "family_share", "kind", "kind_share"), "errors": ("family_share",)}


def without_groups(entry: dict[str, Any], groups: tuple[str, ...] = tuple(GROUP_KEYS)) -> None:
    """Drop ``entry``'s family and kind keys from ``groups`` (every group that has them, by default; in place)."""
    for group in groups:
        for key in GROUP_KEYS[group]:
            entry.get(group, {}).pop(key, None)


def model_entries(raw: dict[str, Any], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Raw model objects for pool rows ``names`` (agents then the manager); new names copy the first model, without
    its family and kind (which are the first model's, not the new one's)."""
    by_name = {m["name"]: m for m in raw["models"]}
    out = []
    for name in names[:-1]:
        entry = copy.deepcopy(by_name.get(name, raw["models"][0]))
        if name not in by_name:
            without_groups(entry)
        entry["name"] = name
        out.append(entry)
    return out + [copy.deepcopy(raw["manager"])]


def _set(group: dict[str, Any], key: str, value: float, lo: float, hi: float, path: str, clipped: list[str],
         source: str, owner: dict[str, Any] | None = None) -> None:
    """Write a fitted value and mark its parameter group's ``source``: ``owner`` when ``group`` is a per-domain
    table inside the group (``review.sensitivity``, ``tokens_out.log_median``), which holds no source itself."""
    clipped_value = min(max(float(value), lo), hi)
    if clipped_value != value:
        clipped.append(f"{path}.{key}: fitted {value:.4g} clipped to the pool range [{lo:g}, {hi:g}]")
    group[key] = round(clipped_value, 6)
    (group if owner is None else owner)["source"] = source


def _uncap_targets(raw: dict[str, Any], names: tuple[str, ...], entries: list[dict[str, Any]]) -> None:
    """Targets published under a generation cap (``cap_tokens``) restated, in place, as the uncapped accuracy of the
    base pool's skill: that skill was solved against the base pool's output lengths, which the fit may move, and a
    capped target re-solved under fitted lengths would move the skill (or have no solution)."""
    base = parse_pool(raw)
    row = {n: i for i, n in enumerate(base.model_names[:-1])}
    for m, entry in enumerate(entries):
        b_row = len(base.model_names) - 1 if m == len(names) - 1 else row.get(names[m], 0)
        for bname, target in entry.get("accuracy", {}).items():
            if "cap_tokens" not in target:
                continue
            b = next(i for i, bench in enumerate(BENCHMARKS) if bench.name == bname)
            bench = BENCHMARKS[b]
            theta = base.skill[b_row, b] + base.bonus[int(Tool.STANDARD_REASONER), bench.domain]
            tau = float(base.tau[b_row])
            target["value"] = round(100 * float(expected_accuracy(np.array(theta), np.array(bench.mu),
                                                                  effective_spread(bench.sigma, tau))), 6)
            del target["cap_tokens"]


def write_pool(raw: dict[str, Any], fitted: dict[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """The base pool with fitted groups replaced; returns the pool dict and what had to be clipped.

    ``fitted`` keys: ``models`` (row names), ``free`` (per array, which entries were fitted), ``groups`` (optional:
    per model name, the ``interaction`` keys of its family and kind, ``Calibration.groups``) and the
    natural-scale arrays of ``parasim.calibration.fit`` (skill, bonus, lambda, rho, interaction_sd, tok_*, ttft,
    speed, lat_sd, overhead, rates: the proportions and the kappa / affinity moments...). The fitted interaction
    sd is written before the accuracy targets, which are solved back to skills under it.
    """
    names = fitted["models"]
    out = copy.deepcopy(raw)
    entries = model_entries(raw, names)
    _uncap_targets(raw, names, entries)
    clipped: list[str] = []
    free, v = fitted["free"], fitted["values"]
    for m, entry in enumerate(entries):
        path = "manager" if m == len(names) - 1 else f"models[{m}]"
        sr_bonus = v["bonus"][int(Tool.STANDARD_REASONER)]
        if "interaction_sd" in free and free["interaction_sd"][m]:
            without_groups(entry, ("interaction",))  # the base's groups are not this model's; ``groups`` below
            _set(entry.setdefault("interaction", {}), "sd", v["interaction_sd"][m], 0, 5, f"{path}.interaction",
                 clipped, source)
        # the sd the skills were fitted under (a base model's sd below the fit's start value was fitted at that value)
        fit_tau = (float(v["interaction_sd"][m]) if "interaction_sd" in v
                   else entry.get("interaction", {}).get("sd", 0.0))
        groups = fitted.get("groups", {}).get(names[m])
        if groups and ("sd" in groups or "sd" in entry.get("interaction", {})):  # shares of no sd would split nothing
            # the family, kind and shares fitted beside the sd; the fitted skills become accuracies under
            # ``fit_tau``, which the pool solves back to skills under the sd it ends with
            inter = entry.setdefault("interaction", {})
            for key, value in groups.items():
                if isinstance(value, str):
                    inter[key] = value
                else:  # the shares, and the joint fit's sd where the model has none of its own
                    _set(inter, key, value, 0, 5 if key == "sd" else 1, f"{path}.interaction", clipped, source)
        final_tau = entry.get("interaction", {}).get("sd", 0.0)  # the sd the pool's skill solve uses
        for b, bench in enumerate(BENCHMARKS):
            if not free["skill"][m, b]:
                continue
            # the fitted model's accuracy, under the difficulty mean and spread it was fitted with: the pool
            # simulates the catalogue's (a pool holds none of its own), so it keeps the accuracy, not the skill
            acc = 100 * float(expected_accuracy(np.array(v["skill"][m, b] + sr_bonus[bench.domain]),
                                                np.array(v["mu"][b]), effective_spread(v["sigma"][b], fit_tau)))
            if bench.name.startswith("generic_"):  # no accuracy target: the domain skill that gives it
                skill = solve_skill(np.array(acc / 100), np.array(bench.mu),
                                    effective_spread(bench.sigma, final_tau)) - sr_bonus[bench.domain]
                _set(entry["skill"], DOMAINS[bench.domain], float(skill), -10, 10, f"{path}.skill", clipped, source)
                continue
            floor = 100.0 / bench.options if bench.options != FREE_FORM else 0.0
            target = entry.setdefault("accuracy", {}).setdefault(bench.name, {})
            target.pop("cap_tokens", None)  # the fitted skill's accuracy is the uncapped one
            _set(target, "value", acc, floor + 0.1, 99.9, f"{path}.accuracy.{bench.name}", clipped, source)
        for key, group, field in (("lambda", "long_context", "lambda"), ("rho", "anchoring", "rho")):
            if free[key][m]:
                _set(entry[group], field, v[key][m], 0, 5 if key == "lambda" else 1, f"{path}.{group}", clipped,
                     source)
        tok = entry["tokens_out"]
        for d, dname in enumerate(DOMAINS):
            if free["tok_log_median"][m, d]:
                _set(tok["log_median"], dname, v["tok_log_median"][m, d], 0, 12, f"{path}.tokens_out.log_median",
                     clipped, source, owner=tok)
        if free["tok_log_sd"][m]:
            _set(tok, "log_sd", v["tok_log_sd"][m], 0, 3, f"{path}.tokens_out", clipped, source)
            _set(tok, "difficulty_slope", v["tok_alpha"][m], -2, 2, f"{path}.tokens_out", clipped, source)
        if "ttft" in free and free["ttft"][m]:
            lat = entry["latency"]
            _set(lat, "ttft_s", v["ttft"][m], 0, 600, f"{path}.latency", clipped, source)
            _set(lat, "tokens_per_s", v["speed"][m], 0.1, 1e5, f"{path}.latency", clipped, source)
            _set(lat, "log_sd", v["lat_sd"][m], 0, 3, f"{path}.latency", clipped, source)
        if "lat_slope" in free and free["lat_slope"][m]:
            _set(entry["latency"], "concurrency_slope", v["lat_slope"][m], 0, 10, f"{path}.latency", clipped, source)
        for key in ("kappa", "affinity"):
            rate = v["rates"].get(f"{key}[{names[m]}]")
            if rate is not None:
                without_groups(entry, ("errors",))
                _set(entry["errors"], key, rate, 0, 1, f"{path}.errors", clipped, source)
        rate = v["rates"].get(f"code_exec_error[{names[m]}]")
        if rate is not None:
            _set(entry["code_exec_error"], "rate", rate, 0, 1, f"{path}.code_exec_error", clipped, source)
        for kind in ("sensitivity", "specificity"):
            for dname in DOMAINS:
                rate = v["rates"].get(f"{kind}[{names[m]},{dname}]")
                if rate is not None:
                    _set(entry["review"][kind], dname, rate, 0, 1, f"{path}.review.{kind}", clipped, source,
                         owner=entry["review"])
    out["models"], out["manager"] = entries[:-1], entries[-1]
    for t in Tool:
        if t is Tool.FINAL_ANSWER:
            continue
        tool = out["tools"][t.wire_name]
        path = f"tools.{t.wire_name}"
        for d, dname in enumerate(DOMAINS):
            if free["bonus"][t, d]:
                _set(tool["bonus"], dname, v["bonus"][t, d], -10, 10, f"{path}.bonus", clipped, source)
        runtime = tool["runtime"]
        if t.is_agent and free["tok_scale"][t]:
            _set(runtime, "tokens_scale", math.exp(v["tok_scale"][t]), 0.01, 100, f"{path}.runtime", clipped, source)
        if t.is_agent and "overhead" in free and free["overhead"][t]:
            _set(runtime, "overhead_s", v["overhead"][t], 0, 3600, f"{path}.runtime", clipped, source)
        if not t.is_agent:
            j = 0 if t is Tool.PYTHON else 1
            output = tool["output"]
            if "latency_log_median" in free and free["latency_log_median"][j]:
                seconds = math.exp(v["latency_log_median"][j]) - runtime["overhead_s"]
                if seconds <= 0:
                    clipped.append(f"{path}.output.latency_log_median_s: fitted median is below the overhead")
                    seconds = 1e-3
                _set(output, "latency_log_median_s", math.log(seconds), -10, 10, f"{path}.output", clipped, source)
                _set(output, "latency_log_sd", v["latency_log_sd"][j], 0, 3, f"{path}.output", clipped, source)
            if "tokens_log_median" in free and free["tokens_log_median"][j]:
                log_median = v["tokens_log_median"][j] - math.log(runtime["tokens_scale"])
                _set(output, "log_median_tokens", log_median, 0, 12, f"{path}.output", clipped, source)
                _set(output, "log_sd", v["tokens_log_sd"][j], 0, 3, f"{path}.output", clipped, source)
            if t is Tool.PYTHON and "python_exec_error" in v["rates"]:
                _set(tool["exec_error"], "rate", v["rates"]["python_exec_error"], 0, 1, f"{path}.exec_error",
                     clipped, source)
    out["name"] = f"{raw.get('name', 'pool')}-fit"
    out["description"] = f"{raw.get('description', '')} Refitted by parasim calibrate ({source})."
    parse_pool(out, name=out["name"])
    return out, clipped
