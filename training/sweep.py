"""Reward / budget sweeps: a grid of training configs, run on local processes or on Ray, resumable.

A grid is a list of axes ``name=v1,v2,...`` over any ``TrainConfig`` option (see ``config.resolve``),
crossed with seeds. With ``population`` (the default; local processes) and ``ray-population`` (Ray tasks) each
worker trains a chunk of points as one population (``population.run_population``: one vector env, one stacked
policy pass per step), which shares the per-call overhead of the small policy among the chunk's points; with
``local`` and ``ray`` each point trains (expert -> SFT -> GRPO) and evaluates in its own process. Every worker runs
one torch thread. A point's result depends only on its config and seed, so every backend gives identical numbers.
A crash loses at most the work in flight: ``population`` checkpoints each of its points under
``OUT/work/<point key>`` (the files of ``parasim train``: SFT weights, then the GRPO state every
``grpo.checkpoint_every`` steps) and a rerun resumes each point there, whatever chunk it lands in; a per-point
process restarts its point. Finished points live in a ``ResultsStore``; a rerun with the same grid skips them.
Local workers die with the sweep, even a SIGKILLed one (``procgroup``), and every result is checked against
``result_schema`` both when a worker hands it back and when the store reads it again.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import shutil
import threading
import time
import traceback
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parasim.config.fields import check, spec_of
from parasim.config.writes import StoreError, atomic_write_json
from training import procgroup, result_schema
from training.config import ABLATIONS, TrainConfig, make_config, resolve
from training.config import options_table as config_options_table
from training.expert import demonstrations_key
from training.loggers import Progress
from training.population import population_key, split_population
from training.rollout import set_env_threads, threads_per_worker
from training.store import ResultsStore
from training.sweep_backends import BACKENDS, DEFAULT_BACKEND

DEFAULT_GRID = ("c_tar=4,8,12,16",)
DEFAULT_SEEDS = 3
# Share of a population's wall time in each phase (measured on the default recipe), for its progress as a fraction.
PHASE_SHARES = {"expert": 0.03, "sft": 0.25, "eval sft": 0.02, "grpo": 0.68, "eval": 0.02}
PROGRESS_EVERY_S = 1.0  # how often a population worker rewrites its progress file, and the bar re-reads them


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
    A grid whose points repeat one config (``c_tar=4,4``, ``c_tar=4,4.0``, two equal seeds) is refused: a repeated
    run would be counted twice in its point's mean and spread. The seed of a point is ``seeds``' alone: a ``seed``
    axis or ``--set seed`` would be silently overridden, so each is refused (the command turns a ``seed`` axis into
    ``seeds``, ``seed_axis``).
    """
    names = [n for n, _ in axes]
    for name in [*names, *(fixed or {})]:
        if name != "preset" and resolve(name) == ("", "seed"):
            raise ValueError(f"option {name!r}: a point's seed comes from the seeds (--seeds N: 0..N-1, or a "
                             "--grid seed=... axis alone); it cannot also be a grid or --set value")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"seeds {list(seeds)}: a seed is repeated; each run would count twice")
    points = []
    seen: dict[str, str] = {}
    for values in itertools.product(*(v for _, v in axes)):
        coords = dict(zip(names, values))
        point_preset = coords.pop("preset", preset)
        for seed in seeds:
            point = GridPoint(point_preset, tuple(coords.items()), int(seed), tuple(sorted((fixed or {}).items())))
            key = json.dumps(point.config().to_dict(), sort_keys=True, default=str)  # validated; c_tar 4 = 4.0
            if key in seen:
                raise ValueError(f"--grid: points {seen[key]!r} and {point.label!r} are the same config (seed "
                                 f"{seed}); each grid point must differ, or its run is counted twice")
            seen[key] = point.label
            points.append(point)
    return points


def seed_axis(axes: list[tuple[str, list[str]]], seeds: int | None) -> tuple[list[tuple[str, list[str]]],
                                                                           list[int] | None]:
    """A ``seed`` axis as the sweep's seeds: (the other axes, its seeds), or (axes, None) when there is none. With
    ``--seeds`` given too it is an error: the two would disagree, and one would silently win."""
    for i, (name, values) in enumerate(axes):
        if name != "preset" and resolve(name) == ("", "seed"):
            if seeds is not None:
                raise ValueError(f"--grid {name}={','.join(values)} conflicts with --seeds {seeds}; give the seeds "
                                 "one way")
            spec = spec_of(TrainConfig, "seed")
            return axes[:i] + axes[i + 1:], [check(spec, v, f"--grid {name}", text=True) for v in values]
    return axes, None


def run_point(point: GridPoint) -> dict[str, Any]:
    """Train and evaluate one grid point (runs in a worker process or a Ray task).

    A failure comes back as a result with an ``error`` (the traceback, or how the result breaks the
    result schema), so one bad point neither stops the others nor is stored as finished.
    """
    import torch

    from training.pipeline import run_pipeline

    torch.set_num_threads(1)
    set_env_threads(1)  # the per-point backend runs a worker per core
    start = time.perf_counter()
    history: list[dict[str, Any]] = []
    try:
        result = run_pipeline(point.config(), log=history.append)
    except Exception:  # noqa: BLE001 - reported with its traceback, the sweep goes on
        return {**_identity(point), "error": traceback.format_exc()}
    result = {**result, **_identity(point), "history": history, "wall_s": time.perf_counter() - start}
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


@dataclass(frozen=True)
class Chunk:
    """Points one worker trains as one population; with a ``workdir`` each point checkpoints under
    ``workdir/<point key>`` and the worker writes its progress (a fraction of the chunk) to ``progress_file``."""

    points: tuple[GridPoint, ...]
    workdir: str | None = None
    progress_file: str | None = None
    env_threads: int = 1  # numba threads of the chunk's vector env (``rollout.threads_per_worker``)


def plan_chunks(points: Sequence[GridPoint], workers: int, workdir: Path | None = None) -> list[Chunk]:
    """The points as populations (points that share their env options and policy size), each cut into chunks so
    that about ``workers`` chunks run at once; points that share their expert demonstrations stay together."""
    groups: dict[str, list[GridPoint]] = {}
    for p in points:
        groups.setdefault(population_key(p.config()), []).append(p)
    chunks = []
    for group in groups.values():
        parts = 1 if len(groups) >= workers else math.ceil(workers * len(group) / len(points))
        for idx in split_population([demonstrations_key(p.config()) for p in group], parts):
            chunks.append(tuple(group[i] for i in idx))
    threads = threads_per_worker(workers)
    return [Chunk(c, str(workdir) if workdir else None, str(workdir / f"progress-{i}.json") if workdir else None,
                  threads)
            for i, c in enumerate(chunks)]


def _fraction(phase: str, done: int, total: int) -> float:
    """How much of a population's work is behind it in ``phase`` at ``done`` of ``total``."""
    names = list(PHASE_SHARES)
    before = sum(PHASE_SHARES[n] for n in names[: names.index(phase)])
    return before + PHASE_SHARES[phase] * (done / total if total else 1.0)


def grpo_history(workdir: Path | None) -> list[dict[str, Any]]:
    """The GRPO rows a point's checkpoint in ``workdir`` already holds (a resumed point's steps before the resume;
    none for a fresh point): its result's ``history`` starts with them and goes on with the rows the trainer
    logs, so a stored point carries every step's record (``parasim sweep --loggers`` logs them as ``train``)."""
    import torch

    ckpt = workdir / "grpo.pt" if workdir is not None else None
    return list(torch.load(ckpt, weights_only=False)["history"]) if ckpt is not None and ckpt.exists() else []


def run_chunk(chunk: Chunk) -> list[dict[str, Any]]:
    """Train and evaluate a chunk of points as one population (runs in a worker process or a Ray task); one
    result per point, or its failure (``error``), as ``run_point`` returns them. The points finish together, so each
    one's ``wall_s`` is the chunk's."""
    import torch

    from training.population import run_population

    torch.set_num_threads(1)
    set_env_threads(chunk.env_threads)
    start = time.perf_counter()
    last = [0.0]

    def progress(phase: str, done: int, total: int) -> None:
        if chunk.progress_file and (time.perf_counter() - last[0] >= PROGRESS_EVERY_S or done == total):
            last[0] = time.perf_counter()
            atomic_write_json(Path(chunk.progress_file), {"fraction": _fraction(phase, done, total)})

    workdirs = [Path(chunk.workdir) / p.key for p in chunk.points] if chunk.workdir else None
    histories = [grpo_history(wd) for wd in workdirs or [None] * len(chunk.points)]
    try:
        results = run_population([p.config() for p in chunk.points], workdirs, [h.append for h in histories],
                                 progress=progress)
    except Exception:  # noqa: BLE001 - reported with its traceback, the sweep goes on
        return [{**_identity(p), "error": traceback.format_exc()} for p in chunk.points]
    wall = time.perf_counter() - start
    out = []
    for point, result, history in zip(chunk.points, results, histories):
        result = {**result, **_identity(point), "history": history, "wall_s": wall}
        problems = result_schema.problems(result)
        out.append(result if not problems else
                   {**_identity(point), "error": "the result breaks the result schema: " + "; ".join(problems)})
    return out


def _lost_chunk(chunk: Chunk, exit_code: int | None) -> list[dict[str, Any]]:
    """The failures of a chunk whose worker process died under it."""
    return [_lost(p, exit_code) for p in chunk.points]


def run_populations(chunks: Sequence[Chunk], workers: int) -> Generator[dict[str, Any], None, None]:
    """The chunks on ``spawn`` processes (as ``run_local``), each point's result as its chunk finishes."""
    stream = procgroup.imap_unordered(f"{__name__}:run_chunk", chunks, workers, _lost_chunk)
    with contextlib.closing(stream):
        for results in stream:
            yield from results


class _ChunkProgress:
    """Points done, counting the finished fraction of each running chunk (read from its progress file)."""

    def __init__(self, chunks: Sequence[Chunk], done: int) -> None:
        self.chunks = [c for c in chunks if c.progress_file]
        self.base = done
        self.finished: set[str] = set()

    def value(self) -> float:
        """Points stored, plus each running chunk's finished fraction of the points it has not handed back yet."""
        partial = 0.0
        for c in self.chunks:
            left = sum(p.key not in self.finished for p in c.points)
            if left:
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    partial += left * float(json.loads(Path(c.progress_file).read_text())["fraction"])
        return self.base + len(self.finished) + min(partial, sum(len(c.points) for c in self.chunks))


@contextlib.contextmanager
def _watch(bar: Progress, tracker: _ChunkProgress, total: int) -> Iterator[None]:
    """Refresh the bar from the chunks' progress files while the sweep waits for results."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            bar.update("sweep", tracker.value(), total)

    thread = threading.Thread(target=loop, daemon=True, name="sweep-progress")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class SweepError(RuntimeError):
    """Some grid points failed; the finished ones are stored and a rerun retries only the failed."""


def run_local(points: Sequence[GridPoint], workers: int) -> Generator[dict[str, Any], None, None]:
    """The points on ``spawn`` processes (no forked torch state) that die with this one, results as they finish."""
    return procgroup.imap_unordered(f"{__name__}:run_point", points, workers, _lost)


def run_ray(points: Sequence[Any], address: str | None = None, num_cpus: int | None = None,
            fn: Any = run_point) -> Generator[Any, None, None]:
    """``fn(point)`` (default ``run_point``) for each point as a Ray task on the cluster ``ray.init`` finds (a new
    local instance by default), results as they finish."""
    if not points:  # nothing to run: no Ray instance to start
        return
    import ray

    started = not ray.is_initialized()
    if started:
        if address:
            reach_ray(address)
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    task = ray.remote(num_cpus=1, max_retries=0)(fn)
    try:
        pending = [task.remote(p) for p in points]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        if started:
            ray.shutdown()


RAY_CONNECT_TIMEOUT_S = 10.0  # how long a cluster address may take to accept a connection


def reach_ray(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Fail within ``timeout_s`` when a Ray cluster address (``host:port`` or ``ray://host:port``) does not accept a
    connection: ``ray.init`` itself keeps retrying an unreachable cluster for minutes. Named addresses (``auto``,
    ``local``) are left to Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        reason = "no answer" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise SweepError(f"--ray-address {address}: cannot reach the Ray cluster ({reason}; connect deadline "
                         f"{timeout_s:g} s)") from None


def run_ray_populations(chunks: Sequence[Chunk], address: str | None = None,
                        num_cpus: int | None = None) -> Generator[dict[str, Any], None, None]:
    """Each chunk a Ray task (``run_ray`` over chunks), each point's result as its chunk finishes."""
    for results in run_ray(chunks, address, num_cpus, fn=run_chunk):
        yield from results


def run_sweep(points: Sequence[GridPoint], out: str | Path, backend: str = DEFAULT_BACKEND, workers: int = 2,
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
    chunks: list[Chunk] = []
    if backend == "local":
        stream = run_local(todo, workers)
    elif backend == "ray":
        stream = run_ray(todo, ray_address, num_cpus=workers if ray_address is None else None)
    elif backend == "population":
        chunks = plan_chunks(todo, workers, out / "work")
        for chunk in chunks:  # a killed sweep's progress is not this one's
            Path(str(chunk.progress_file)).unlink(missing_ok=True)
        stream = run_populations(chunks, workers)
    elif backend == "ray-population":
        chunks = plan_chunks(todo, workers)
        stream = run_ray_populations(chunks, ray_address, num_cpus=workers if ray_address is None else None)
    else:
        raise ValueError(f"backend={backend!r}: allowed one of {', '.join(BACKENDS)}")
    failed = []
    done = len(points) - len(todo)
    tracker = _ChunkProgress(chunks, done)
    with contextlib.closing(stream), Progress(enabled=progress) as bar:
        bar.update("sweep", done, len(points), f"{done} already done" if done else "")
        watch = _watch(bar, tracker, len(points)) if progress and tracker.chunks else contextlib.nullcontext()
        with watch:
            for result in stream:  # an exception here closes the stream, which kills the workers
                if "error" in result:
                    failed.append(result)
                    continue
                store.put(result)
                shutil.rmtree(out / "work" / result["key"], ignore_errors=True)
                tracker.finished.add(result["key"])
                done += 1
                bar.update("sweep", tracker.value() if tracker.chunks else done, len(points),
                           f"{result['label']} seed {result['seed']}: acc {result['accuracy']:.3f}")
    for chunk in chunks:
        if chunk.progress_file:
            Path(chunk.progress_file).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (out / "work").rmdir()  # only when empty: the checkpoints of failed points stay for the rerun
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
