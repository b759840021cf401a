"""Reward / budget sweeps: a grid of training configs, run on local processes or on Ray, resumable.

A grid is a list of axes ``name=v1,v2,...`` over any ``TrainConfig`` option (see ``config.resolve``),
crossed with seeds. Each point trains (expert -> SFT -> GRPO) and evaluates in its own process with
one torch thread, so a point's result depends only on its config and seed: the local and Ray backends
give identical numbers, and a crash loses at most the points in flight. Finished points live in a
``ResultsStore``; a rerun with the same grid skips them. Local workers die with the sweep, even a
SIGKILLed one (``procgroup``), and every result is checked against ``result_schema`` both when a worker
hands it back and when the store reads it again.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import time
import traceback
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parasim.training import procgroup, result_schema
from parasim.training.config import ABLATIONS, TrainConfig, make_config, resolve
from parasim.training.config import options_table as config_options_table
from parasim.training.loggers import Progress
from parasim.training.store import ResultsStore, StoreError

DEFAULT_GRID = ("c_tar=4,8,12,16",)
DEFAULT_SEEDS = 3


@dataclass(frozen=True)
class GridPoint:
    """One training run of a sweep: an ablation preset, option overrides and a seed."""

    preset: str
    overrides: tuple[tuple[str, str], ...]  # the grid coordinates
    seed: int
    fixed: tuple[tuple[str, str], ...] = ()  # options set for every point (``--set``)

    @property
    def label(self) -> str:
        """The grid coordinates without the seed, e.g. ``c_tar=4``; seeds of a label are averaged."""
        parts = [f"{k}={v}" for k, v in self.overrides]
        return ",".join(([self.preset] if self.preset != "default" else []) + parts) or self.preset

    def config(self) -> TrainConfig:
        """The validated config of this point."""
        return make_config(self.preset, {**dict(self.fixed), **dict(self.overrides), "seed": self.seed})

    @property
    def key(self) -> str:
        """A file-safe key that changes whenever the point's full config does (code defaults included)."""
        digest = hashlib.sha256(json.dumps(self.config().to_dict(), sort_keys=True, default=str).encode())
        safe = "".join(c if c.isalnum() or c in "=.-_" else "_" for c in self.label.replace(",", "__"))
        return f"{safe}__seed{self.seed}__{digest.hexdigest()[:10]}"


def parse_grid(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Parse repeated ``--grid name=v1,v2`` into axes; names are checked against the config."""
    axes: list[tuple[str, list[str]]] = []
    seen: set[tuple[str, str]] = set()
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--grid {spec!r}: expected NAME=V1,V2,... (e.g. c_tar=4,8,12,16)")
        target = ("", "preset") if name.strip() == "preset" else resolve(name)
        if target in seen:
            raise ValueError(f"--grid {spec!r}: option {name!r} appears in two axes")
        seen.add(target)
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not items:
            raise ValueError(f"--grid {spec!r}: no values after '='")
        bad = [v for v in items if target == ("", "preset") and v not in ABLATIONS]
        if bad:
            raise ValueError(f"--grid {spec!r}: unknown preset {bad[0]!r}; allowed: {', '.join(ABLATIONS)}")
        axes.append((name.strip(), items))
    return axes


def expand(axes: Sequence[tuple[str, Sequence[str]]], seeds: Sequence[int], preset: str = "default",
           fixed: dict[str, str] | None = None) -> list[GridPoint]:
    """The cross product of the axes and the seeds; every point's config is validated up front.

    An axis named ``preset`` varies the ablation preset itself (``preset=default,serial,mono``).
    """
    names = [n for n, _ in axes]
    points = []
    for values in itertools.product(*(v for _, v in axes)):
        coords = dict(zip(names, values))
        point_preset = coords.pop("preset", preset)
        for seed in seeds:
            point = GridPoint(point_preset, tuple(coords.items()), int(seed), tuple(sorted((fixed or {}).items())))
            point.config()
            points.append(point)
    return points


def run_point(point: GridPoint) -> dict[str, Any]:
    """Train and evaluate one grid point (runs in a worker process or a Ray task).

    A failure comes back as a result with an ``error`` (the traceback, or how the result breaks the
    result schema), so one bad point neither stops the others nor is stored as finished.
    """
    import torch

    from parasim.training.pipeline import run_pipeline

    torch.set_num_threads(1)
    start = time.perf_counter()
    try:
        result = run_pipeline(point.config())
    except Exception:  # noqa: BLE001 - reported with its traceback, the sweep goes on
        return {**_identity(point), "error": traceback.format_exc()}
    result = {**result, **_identity(point), "wall_s": time.perf_counter() - start}
    problems = result_schema.problems(result)
    if problems:
        return {**_identity(point), "error": "the result breaks the result schema: " + "; ".join(problems)}
    return result


def _identity(point: GridPoint) -> dict[str, Any]:
    """The fields that tie a result, or a failure, to its grid point."""
    return {"key": point.key, "label": point.label, "preset": point.preset, "overrides": dict(point.overrides),
            "seed": point.seed}


def _lost(point: GridPoint, exit_code: int | None) -> dict[str, Any]:
    """The failure of a point whose worker process died under it (killed, out of memory, a crash in C)."""
    return {**_identity(point), "error": f"its worker process died with exit code {exit_code}"}


class SweepError(RuntimeError):
    """Some grid points failed; the finished ones are stored and a rerun retries only the failed."""


def run_local(points: Sequence[GridPoint], workers: int) -> Generator[dict[str, Any], None, None]:
    """The points on ``spawn`` processes (no forked torch state) that die with this one, results as they finish."""
    return procgroup.imap_unordered(f"{__name__}:run_point", points, workers, _lost)


def run_ray(points: Sequence[GridPoint], address: str | None = None,
            num_cpus: int | None = None) -> Generator[dict[str, Any], None, None]:
    """Each point a Ray task on the cluster ``ray.init`` finds (a new local instance by default)."""
    if not points:  # nothing to run: no Ray instance to start
        return
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    task = ray.remote(num_cpus=1, max_retries=0)(run_point)
    try:
        pending = [task.remote(p) for p in points]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        if started:
            ray.shutdown()


def run_sweep(points: Sequence[GridPoint], out: str | Path, backend: str = "local", workers: int = 2,
              progress: bool = True, ray_address: str | None = None) -> list[dict[str, Any]]:
    """Run the unfinished points, store each as it finishes, and return all results in grid order.

    Raises ``StoreError`` (path and reason) when ``out`` cannot hold the results: not a directory, or not
    writable while points remain (a finished sweep reruns on a read-only ``out``).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise StoreError(f"{out}: not a directory (the sweep's output folder)")
    store = ResultsStore(out / "store", validate=result_schema.problems)
    todo = [p for p in points if not store.done(p.key)]
    if todo:
        store.check_writable()
    if backend == "local":
        stream = run_local(todo, workers)
    elif backend == "ray":
        stream = run_ray(todo, ray_address, num_cpus=workers if ray_address is None else None)
    else:
        raise ValueError(f"backend={backend!r}: allowed one of local, ray")
    failed = []
    done = len(points) - len(todo)
    with contextlib.closing(stream), Progress(enabled=progress) as bar:
        bar.update("sweep", done, len(points), f"{done} already done" if done else "")
        for result in stream:  # an exception here closes the stream, which kills the workers
            if "error" in result:
                failed.append(result)
                continue
            store.put(result)
            done += 1
            bar.update("sweep", done, len(points), f"{result['label']} seed {result['seed']}: "
                                                   f"acc {result['accuracy']:.3f}")
    if failed:
        detail = "\n".join(f"--- {r['label']} seed {r['seed']}:\n{r['error']}" for r in failed)
        raise SweepError(f"{len(failed)} of {len(todo)} points failed (finished points are stored; rerun to "
                         f"retry the failed ones):\n{detail}")
    return store.results([p.key for p in points])


def options_table() -> str:
    """Every option a grid axis may name, once, with type, default, allowed values and help (``--list-options``)."""
    preset = ("preset", "str", "'default'", "one of " + ", ".join(repr(a) for a in ABLATIONS),
              "ablation preset (a grid axis over presets: preset=default,serial)")
    return config_options_table([preset])
