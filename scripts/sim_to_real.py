"""The sim-to-real loop on a real pool of small CPU models: serve, log, calibrate, train in simulation, evaluate.

    python scripts/sim_to_real.py --out parasim_out/sim_to_real       # the full run (its time: docs/sim_to_real.md)
    python scripts/sim_to_real.py --out parasim_out/s2r_ci --quick    # the CI tier: a few dozen real episodes
    python scripts/sim_to_real.py --update docs/sim_to_real.md        # also rewrite the page's generated tables

Each stage is what a user runs by hand, in this order (the commands are printed as they run):

1. ``pool``: the pool's models, trained from fixed seeds by ``scripts/cpu_pool.py`` (cached), its tasks and its serving
   file; then a base pool file for ``calibrate`` (the pool's model ids, prices by parameter count). Episodes play the
   default tools without ``search`` (``without_search``: the pool serves no retriever).
2. ``log``: ``parasim serve-pool``, then real episodes of ParaOrch-v0 (``envs.real_vector.RealVectorEnv``) played by the
   scripted expert (with its exploration) and by an untrained policy (random choices), every call logged
   (``parasim.real.calllog``).
3. ``calibrate``: ``parasim calibrate log/calls.jsonl -o pool_fit.json --base base_pool.json``; ``pool.json`` is that
   fit without ``search``, ``pool_mono.json`` keeps its most accurate model only (the mono ablation).
4. ``train``: ``parasim train`` on the simulator of ``pool.json`` for each manager config (the default recipe, a second
   C_tar, the serial and the mono ablations).
5. ``evaluate``: each trained manager and the scripted baselines, on the same evaluation tasks, in simulation
   (predicted: ``training.evaluate.evaluate_on`` over ``make_envs``) and on the served pool (measured: the same call
   over ``RealVectorEnv``, logged), then ``parasim validate-sim`` on each real evaluation's log.
6. ``report``: ``results.json``, a table (stdout and ``report.md``), a plot (``gap.png``), and with ``--update`` the
   generated section of docs/sim_to_real.md.

Resumable: a stage whose outputs exist is skipped (a killed run reruns with the same command and continues where it
stopped; every output is written atomically). The served pool is stopped on exit, on an error and on SIGTERM.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from parasim.config.writes import atomic_write_bytes, atomic_write_json
from parasim.real.serve_pool import stop_process_groups
from training.procgroup import die_with_parent

REPO = Path(__file__).resolve().parents[1]

BEGIN, END = "<!-- sim_to_real:begin -->", "<!-- sim_to_real:end -->"


@dataclass(frozen=True)
class LoopConfig:
    """The sizes of one run of the loop (``--quick``: the CI tier's)."""

    log_expert: int = 240  # real episodes of the scripted expert for calibration
    log_random: int = 120  # real episodes of an untrained policy for calibration
    eval_tasks: int = 160  # evaluation tasks on real tools, one episode each (the same tasks for every manager)
    sim_tasks: int = 4096  # evaluation tasks in simulation (the predicted figures' own error is then small)
    lanes: int = 32  # real episodes in flight at once
    grpo_steps: int | None = None  # None: the recipe's own
    expert_episodes: int | None = None  # None: the recipe's own demonstrations
    bootstrap: int = 2000  # resamples of the evaluation tasks for the intervals
    seed: int = 0

    @classmethod
    def quick(cls) -> LoopConfig:
        return cls(log_expert=48, log_random=24, eval_tasks=24, sim_tasks=512, lanes=24, grpo_steps=4,
                   expert_episodes=512, bootstrap=200)  # the real pool's models: a fit needs models that answer


# the manager configs trained in simulation: name -> `parasim train` arguments (the pool and suite are added)
MANAGERS: dict[str, list[str]] = {
    "default": [],
    "c_tar=2": ["--set", "reward.c_tar=2"],
    "serial": ["--config", "serial"],
    "mono": [],  # the mono pool replaces env.pool
}
RANKED = (("default", "c_tar=2"), ("default", "serial"), ("default", "mono"))  # pairs whose order is compared


def say(message: str) -> None:
    print(f"[sim_to_real] {message}", file=sys.stderr, flush=True)


def run_command(argv: Sequence[str], log: Path | None = None) -> None:
    """Run one CLI step as a user would (printed first); its output to ``log`` when given; raise on failure."""
    say("$ " + " ".join(str(a) for a in argv))
    with open(log, "w") if log is not None else contextlib.nullcontext() as out:  # type: ignore[attr-defined]
        proc = subprocess.run([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT if out else None,
                              cwd=REPO)
    if proc.returncode:
        tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
        raise RuntimeError(f"{argv[0]} ... exited with {proc.returncode}\n{tail}")


# ------------------------------------------------------------------------------------------------ stage 1: the pool
def write_base_pool(serving: Path, out: Path) -> Path:
    """A base pool for ``calibrate``: one model per served model, in the serving file's order (the endpoint map's,
    which the manager's model index follows) and at its endpoint prices (what a log cannot identify, and what the
    real backend charges), over the default tool spec (the one ``calibrate`` fits)."""
    import yaml

    from parasim.calibration.poolfile import without_groups
    from parasim.pools.pool import pool_file

    raw = json.loads(pool_file("paramanager").read_text())
    models = []
    for served_model in yaml.safe_load(serving.read_text())["models"]:
        entry = json.loads(json.dumps(raw["models"][0]))
        without_groups(entry)  # the template's family and kind are a Qwen model's, not the served model's
        price = served_model.get("endpoint", {})
        entry.update(name=served_model["id"], price={"input_per_mtok": price.get("input_per_mtok", 0.0),
                                                     "output_per_mtok": price.get("output_per_mtok", 0.0),
                                                     "source": "assumed"})
        models.append(entry)
    raw.update(name="cpu_pool_base", description="the CPU pool's models before calibration", models=models)
    base = out / "base_pool.json"
    atomic_write_json(base, raw)
    return base


def hide_difficulty(src: Path, dst: Path) -> Path:
    """``src``'s tasks without their ``difficulty``: a real log has no difficulty to give ``calibrate``, which would
    take a logged one as the task's true value, nor would a user's task suite; each task's ``level`` stays (for the
    per-level tables)."""
    lines = []
    for line in src.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            rec.pop("difficulty", None)
            lines.append(json.dumps(rec) + "\n")
    atomic_write_bytes(dst, "".join(lines).encode())
    return dst


def without_search(pool: Path, out: Path) -> Path:
    """``pool`` over the default tools without ``search`` (written beside it as ``out``): the CPU pool serves no
    retriever, and a tool that the simulator lets answer while every real call of it fails would be a gap of this
    setup, not of the simulator. The other tools' parameters are the pool's."""
    from parasim.tools.spec import TOOL_SPEC_DIR

    spec_path = out.parent / "tools_no_search.json"
    if not spec_path.exists():
        spec = json.loads((TOOL_SPEC_DIR / "default.json").read_text())
        spec.update(name="no_search", description="the default tools without search (no retriever served)",
                    tools=[t for t in spec["tools"] if t["name"] != "search"])
        atomic_write_json(spec_path, spec)
    raw = json.loads(pool.read_text())
    raw.update(tool_spec=str(spec_path.resolve()), tools={k: v for k, v in raw["tools"].items() if k != "search"})
    atomic_write_json(out, raw)
    return out


# ------------------------------------------------------------------------------------------- serving the real pool
def free_ports(n: int) -> int:
    """The first of ``n`` consecutive free local ports (a pool served by someone else on the file's ports, or a run
    started twice, must not collide with this one)."""
    import socket

    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            start = probe.getsockname()[1]
        if start + n > 65535:
            continue
        try:
            held = []
            for port in range(start, start + n):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return start
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError(f"no {n} consecutive free local ports")


def serving_here(serving: Path, out: Path) -> Path:
    """The pool's serving file with free ports and its server logs under ``out`` (written as ``out/serving.yaml``)."""
    import yaml

    config = yaml.safe_load(serving.read_text())
    config["base_port"] = free_ports(len(config["models"]))
    for model in config["models"]:
        model.pop("port", None)
    config["log_dir"] = str(out / "serve_logs")
    path = out / "serving.yaml"
    atomic_write_bytes(path, yaml.safe_dump(config, sort_keys=False).encode())
    return path


@contextlib.contextmanager
def served(serving: Path, out: Path, timeout_s: float = 900.0) -> Iterator[Path]:
    """``parasim serve-pool`` in a session of its own for the block's duration, on free ports; yields the endpoint
    map's path. Stopped with SIGTERM (then SIGKILL) on exit, on an exception and on a SIGTERM to this script."""
    serving = serving_here(serving, out)
    endpoints = out / "endpoints.json"
    endpoints.unlink(missing_ok=True)
    log = open(out / "serve_pool.log", "w")
    argv = [sys.executable, "-m", "parasim", "serve-pool", "--config", str(serving), "--endpoints-out", str(endpoints)]
    say("$ " + " ".join(argv[1:]))
    # SIGTERM to serve-pool when this script dies, even by SIGKILL, so that it stops its servers: none outlives the run
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True, cwd=REPO,
                            preexec_fn=functools.partial(die_with_parent, os.getpid(), signal.SIGTERM))
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        deadline = time.monotonic() + timeout_s
        while not endpoints.exists():
            if proc.poll() is not None:
                tail = (out / "serve_pool.log").read_text()[-3000:]
                raise RuntimeError(f"serve-pool exited with {proc.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve-pool not ready after {timeout_s:.0f} s (log: {out / 'serve_pool.log'})")
            time.sleep(1.0)
        time.sleep(0.5)  # the file is written before the map is printed: let the write finish
        say(f"pool served: {endpoints}")
        yield endpoints
    finally:
        stop_process_groups([proc], grace_s=60.0)
        log.close()
        signal.signal(signal.SIGTERM, previous)


def backend_for(endpoints: Path, pool: Path, models: Sequence[str] | None = None) -> Any:
    """A ``RealToolBackend`` over the served endpoints (``models``: only these), with the bubblewrap python tool."""
    from parasim.real.backend import RealToolBackend

    emap = json.loads(endpoints.read_text())
    if models is not None:
        emap["endpoints"] = {k: v for k, v in emap["endpoints"].items() if k in models}
        emap["termination"] = {**emap.get("termination", {}), "model": next(iter(emap["endpoints"]))}
    emap.setdefault("python", {})
    return RealToolBackend.from_config(emap, str(pool))


# --------------------------------------------------------------------------------------------- playing episodes
def train_config(pool: Path, suite: Path, extra: Sequence[str] = ()) -> Any:
    """The ``TrainConfig`` of ``parasim train --set env.pool=pool --set env.suite=suite EXTRA``."""
    from training import config as config_mod

    preset = extra[extra.index("--config") + 1] if "--config" in extra else "default"
    sets = [extra[i + 1] for i, a in enumerate(extra) if a == "--set"]
    cfg = config_mod.load_config(preset)
    return config_mod.apply_overrides(cfg, config_mod.parse_sets(
        [f"env.pool={pool}", f"env.suite={suite}", *sets])).validate()


def expert_actor(explore: float, seed: int, pool: Path) -> Callable[[Any], Any]:
    """The scripted expert as ``evaluate_on``'s actor factory (``explore`` 0: its rules only) over ``pool``'s tools."""
    from parasim.pools.pool import load_pool
    from training.expert import ExpertConfig, ScriptedExpert

    names = load_pool(str(pool)).tools.names

    def make(envs: Any) -> Any:
        nvec = [int(v) for v in envs.single_action_space.nvec]
        return ScriptedExpert(envs.num_envs, nvec, ExpertConfig(explore=explore), np.random.default_rng(seed), names)
    return make


def play(manager: Any, cfg: Any, envs: Any, seed: int) -> dict[str, Any]:
    """``evaluate_on`` of ``manager`` on ``envs`` (closed after)."""
    from training.evaluate import evaluate_on

    try:
        return evaluate_on(manager, envs, cfg, seed)
    finally:
        envs.close()


def play_real(manager: Any, cfg: Any, endpoints: Path, tasks: Sequence[Any], episodes: int, lanes: int,
              log: Path, seed: int, bar: Any, phase: str, models: Sequence[str] | None = None) -> dict[str, Any]:
    """``evaluate_on`` of ``manager`` over ``episodes`` real lanes (``cfg.eval`` draws their tasks, one episode each),
    ``lanes`` of them in flight at once, every call and episode logged to ``log``."""
    from parasim.real.calllog import CallLogger
    from training.real_eval import real_envs

    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        bar.update(phase, done[0], episodes)

    cfg = replace(cfg, eval=replace(cfg.eval, tasks=episodes, k=1))
    bar.update(phase, 0, episodes)
    with backend_for(endpoints, Path(cfg.env.pool), models) as backend:
        logger = CallLogger(log)
        try:
            envs = real_envs(cfg, backend, tasks, episodes, logger=logger, use_termination_model=False,
                             max_workers=lanes, on_episodes=tick)
            return play(manager, cfg, envs, seed)
        finally:
            logger.close()


# ------------------------------------------------------------------------------------------ stages 2-5: the loop
def stage_log(loop: LoopConfig, paths: dict[str, Path], endpoints: Path, tasks: Sequence[Any], bar: Any) -> None:
    """Real episodes of the scripted expert (exploring) and of an untrained policy, every call logged for the fit."""
    from training.population import build_policy

    log_dir = paths["out"] / "log"
    if (log_dir / "done.json").exists():
        say(f"log: kept {log_dir}")
        return
    log_dir.mkdir(parents=True, exist_ok=True)
    for stale in log_dir.glob("calls*.jsonl"):  # an interrupted stage starts over: half a log would bias the fit
        stale.unlink()
    cfg = train_config(paths["play_base"], paths["train_tasks"])
    t0 = time.perf_counter()
    play_real(expert_actor(0.5, loop.seed, paths["play_base"]), cfg, endpoints, tasks, loop.log_expert, loop.lanes,
              log_dir / "calls.jsonl", loop.seed, bar, "log expert")
    play_real(build_policy(cfg), replace(cfg, eval=replace(cfg.eval, seed=cfg.eval.seed + 1)), endpoints, tasks,
              loop.log_random, loop.lanes, log_dir / "calls.jsonl", loop.seed + 1, bar, "log random")
    calls = sum(1 for _ in open(log_dir / "calls.jsonl"))
    atomic_write_json(log_dir / "done.json", {"episodes": loop.log_expert + loop.log_random, "calls": calls,
                                              "wall_s": time.perf_counter() - t0})
    say(f"log: {calls} calls in {time.perf_counter() - t0:.0f} s")


def stage_calibrate(paths: dict[str, Path]) -> None:
    """``parasim calibrate`` of the log into the pool the managers train on, and its mono variant."""
    pool, mono, fitted = paths["pool"], paths["pool_mono"], paths["out"] / "pool_fit.json"
    if not fitted.exists():
        run_command([sys.executable, "-m", "parasim", "calibrate", paths["out"] / "log" / "calls.jsonl", "-o",
                     fitted, "--base", paths["base_pool"], "--report", paths["out"] / "calibrate_report.json"],
                    paths["out"] / "calibrate.log")
    if not pool.exists():
        without_search(fitted, pool)
    if not mono.exists():
        raw = json.loads(pool.read_text())
        right: dict[str, list[bool]] = {}
        for line in open(paths["out"] / "log" / "calls.jsonl"):  # the most accurate model in the log's fresh calls
            call = json.loads(line)
            fresh = call.get("target") is None or call["target"] < 0  # -1: the call carried no earlier output
            if call.get("correct") is not None and fresh and call["model"]:
                right.setdefault(call["model"], []).append(bool(call["correct"]))
        best = max(right, key=lambda m: float(np.mean(right[m])))
        raw.update(name=f"{raw['name']}_mono", models=[m for m in raw["models"] if m["name"] == best])
        atomic_write_json(mono, raw)


def stage_train(loop: LoopConfig, paths: dict[str, Path]) -> None:
    """``parasim train`` of every manager config on the simulator of the calibrated pool."""
    for name, extra in MANAGERS.items():
        run_dir = paths["out"] / "train" / name.replace("=", "_")
        if (run_dir / "metrics.json").exists():
            say(f"train {name}: kept {run_dir}")
            continue
        pool = paths["pool_mono"] if name == "mono" else paths["pool"]
        argv = [sys.executable, "-m", "parasim", "train", *extra, "--set", f"env.pool={pool}",
                "--set", f"env.suite={paths['train_tasks']}", "--set", f"seed={loop.seed}", "--out", run_dir,
                "--quiet", "--no-progress"]
        if loop.grpo_steps is not None:
            argv += ["--set", f"grpo.steps={loop.grpo_steps}"]
        if loop.expert_episodes is not None:
            argv += ["--set", f"expert.episodes={loop.expert_episodes}"]
        run_dir.mkdir(parents=True, exist_ok=True)
        run_command(argv, run_dir / "train.log")


def managers(loop: LoopConfig, paths: dict[str, Path]) -> dict[str, tuple[Any, Any]]:
    """Every evaluated manager: name -> (policy or actor factory, its TrainConfig on the evaluation tasks)."""
    from training.population import build_policy
    from training.real_eval import load_trained

    out: dict[str, tuple[Any, Any]] = {}
    for name in MANAGERS:
        cfg, policy = load_trained(paths["out"] / "train" / name.replace("=", "_"))
        out[name] = (policy, replace(cfg, env=replace(cfg.env, suite=str(paths["eval_tasks"]))))
    base = out["default"][1]
    out["expert"] = (expert_actor(0.0, loop.seed, paths["pool"]), base)
    out["random"] = (build_policy(base), base)
    return out


def stage_evaluate(loop: LoopConfig, paths: dict[str, Path], endpoints: Path, tasks: Sequence[Any], bar: Any,
                   which: dict[str, tuple[Any, Any]]) -> None:
    """Each manager in simulation (predicted) and on the served pool (measured, logged), the episodes saved."""
    from training.rollout import make_envs

    for name, (manager, cfg) in which.items():
        folder = paths["out"] / "eval" / name.replace("=", "_")
        if (folder / "episodes.npz").exists():
            say(f"evaluate {name}: kept {folder}")
            continue
        folder.mkdir(parents=True, exist_ok=True)
        sim_cfg = replace(cfg, eval=replace(cfg.eval, tasks=loop.sim_tasks, k=1))
        sim = play(manager, sim_cfg, make_envs(sim_cfg.env, loop.sim_tasks, sim_cfg.reward), loop.seed)
        (folder / "real").mkdir(exist_ok=True)
        for stale in (folder / "real").glob("calls*.jsonl"):
            stale.unlink()
        models = [json.loads(Path(cfg.env.pool).read_text())["models"][0]["name"]] if name == "mono" else None
        t0 = time.perf_counter()
        real = play_real(manager, cfg, endpoints, tasks, loop.eval_tasks, loop.lanes, folder / "real" / "calls.jsonl",
                         loop.seed, bar, f"eval {name}"[:9], models)
        wall = time.perf_counter() - t0
        arrays = {}
        for side, result in (("sim", sim), ("real", real)):
            batch = result["trajectories"]
            for key in ("outcome", "tokens", "cost_units", "usd", "latency_s", "rounds", "tool_calls"):
                arrays[f"{side}_{key}"] = np.asarray(getattr(batch, key), np.float64)
            arrays[f"{side}_tool_counts"] = np.asarray(batch.tool_counts, np.float64)
            arrays[f"{side}_benchmark"] = np.asarray(result["benchmark"], np.int64)
        atomic_write_json(folder / "summary.json", {
            "sim": {**sim["metrics"], "acc_by_benchmark": sim["acc_by_benchmark"]},
            "real": {**real["metrics"], "acc_by_benchmark": real["acc_by_benchmark"]}, "real_wall_s": wall})
        buf = _npz(arrays)
        atomic_write_bytes(folder / "episodes.npz", buf)
        say(f"evaluate {name}: predicted {sim['metrics']['accuracy']:.3f}, measured {real['metrics']['accuracy']:.3f} "
            f"({wall:.0f} s)")


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def stage_validate(paths: dict[str, Path], which: Sequence[str]) -> None:
    """``parasim validate-sim`` of each real evaluation's log against the calibrated pool."""
    for name in which:
        folder = paths["out"] / "eval" / name.replace("=", "_")
        if (folder / "validate_sim" / "validate_sim.json").exists():
            continue
        pool = paths["pool_mono"] if name == "mono" else paths["pool"]
        argv = [sys.executable, "-m", "parasim", "validate-sim", folder / "real", "--pool", pool, "--out",
                folder / "validate_sim"]
        run_command(argv, folder / "validate_sim.log")


# ------------------------------------------------------------------------------------------------ stage 6: report
def _boot(values: np.ndarray, idx: np.ndarray, ratio_of: np.ndarray | None = None) -> np.ndarray:
    """The statistic under each bootstrap resample ``idx`` [B, n]: the mean, or sum(values) / sum(ratio_of)."""
    if ratio_of is None:
        return values[idx].mean(1)
    return values[idx].sum(1) / np.maximum(ratio_of[idx].sum(1), 1e-12)


def _interval(draws: np.ndarray) -> list[float]:
    return [float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))]


def episode_figures(ep: dict[str, np.ndarray], side: str, idx: np.ndarray) -> dict[str, tuple[float, np.ndarray]]:
    """Each figure of one side's episodes: its value and its bootstrap draws over the resamples ``idx``."""
    n = len(ep[f"{side}_outcome"])
    every = np.arange(n)[None]
    out = {}
    for metric, key in (("accuracy", "outcome"), ("tokens", "tokens"), ("cost_units", "cost_units"), ("usd", "usd"),
                        ("latency_s", "latency_s"), ("rounds", "rounds")):
        out[metric] = (float(_boot(ep[f"{side}_{key}"], every)[0]), _boot(ep[f"{side}_{key}"], idx))
    calls, rounds = ep[f"{side}_tool_calls"], ep[f"{side}_rounds"]
    out["calls_per_round"] = (float(_boot(calls, every, rounds)[0]), _boot(calls, idx, rounds))
    counts = ep[f"{side}_tool_counts"]
    total = counts.sum(1)
    for t in range(counts.shape[1]):
        out[f"share:{t}"] = (float(_boot(counts[:, t], every, total)[0]), _boot(counts[:, t], idx, total))
    bench = ep[f"{side}_benchmark"]
    for b in np.unique(bench):
        hit = (bench == b).astype(np.float64)
        out[f"bench:{int(b)}"] = (float(_boot(ep[f"{side}_outcome"] * hit, every, hit)[0]),
                                  _boot(ep[f"{side}_outcome"] * hit, idx, hit))
    return out


def analyse(loop: LoopConfig, paths: dict[str, Path], names: Sequence[str]) -> dict[str, Any]:
    """Predicted against measured for every manager (bootstrap intervals over the evaluation tasks), the ranking of
    the config pairs (paired over the real tasks, which every manager shares), validate-sim's verdicts."""
    rng = np.random.default_rng(loop.seed)
    episodes = {n: dict(np.load(paths["out"] / "eval" / n.replace("=", "_") / "episodes.npz")) for n in names}
    sizes = {n: len(ep["real_outcome"]) for n, ep in episodes.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"real evaluations of different sizes {sizes}: every manager plays the same tasks")
    n_real = next(iter(sizes.values()))
    idx_real = rng.integers(n_real, size=(loop.bootstrap, n_real))  # one set of resamples: pairs stay paired
    figures: dict[str, Any] = {}
    draws: dict[str, dict[str, Any]] = {}
    for name, ep in episodes.items():
        n_sim = len(ep["sim_outcome"])
        idx_sim = rng.integers(n_sim, size=(loop.bootstrap, n_sim))
        sim, real = episode_figures(ep, "sim", idx_sim), episode_figures(ep, "real", idx_real)
        draws[name] = {"sim": sim, "real": real}
        rows = {}
        for key in sim.keys() & real.keys():
            gap = real[key][1] - sim[key][1]
            ci = _interval(gap)
            rows[key] = {"sim": sim[key][0], "sim_ci": _interval(sim[key][1]), "real": real[key][0],
                         "real_ci": _interval(real[key][1]), "gap": real[key][0] - sim[key][0], "gap_ci": ci,
                         "within": bool(ci[0] <= 0.0 <= ci[1])}
        summary = json.loads((paths["out"] / "eval" / name.replace("=", "_") / "summary.json").read_text())
        validation = paths["out"] / "eval" / name.replace("=", "_") / "validate_sim" / "validate_sim.json"
        report = json.loads(validation.read_text()) if validation.exists() else None
        checked = {"episodes": report["episodes"], **report["summary"]} if report else None
        figures[name] = {"figures": rows, "model_dist": {s: summary[s]["model_dist"] for s in ("sim", "real")},
                         "validate_sim": checked, "real_wall_s": summary["real_wall_s"]}
    ranking = []
    for a, b in RANKED:
        if a not in draws or b not in draws:
            continue
        row = {"pair": [a, b]}
        for side in ("sim", "real"):
            da, db = draws[a][side]["accuracy"], draws[b][side]["accuracy"]
            row[side] = da[0] - db[0]
            row[f"{side}_ci"] = _interval(da[1] - db[1])
        resolved = not (row["real_ci"][0] <= 0.0 <= row["real_ci"][1])
        row["agree"] = bool(np.sign(row["sim"]) == np.sign(row["real"])) if resolved else None
        ranking.append(row)
    return {"managers": figures, "ranking": ranking, "real_tasks": n_real,
            "sim_tasks": max(len(ep["sim_outcome"]) for ep in episodes.values())}


def tool_names(paths: dict[str, Path]) -> list[str]:
    from parasim.pools.pool import load_pool

    return list(load_pool(str(paths["pool"])).tools.names)


def bench_names() -> list[str]:
    from parasim.tasks.suites import BENCHMARKS

    return [b.name for b in BENCHMARKS]


def _cell(row: dict[str, Any], fmt: str) -> tuple[str, str, str, str]:
    f = lambda v: format(v, fmt)  # noqa: E731
    return (f"{f(row['sim'])} [{f(row['sim_ci'][0])}, {f(row['sim_ci'][1])}]",
            f"{f(row['real'])} [{f(row['real_ci'][0])}, {f(row['real_ci'][1])}]",
            f"{row['gap']:+{fmt[1:] if fmt.startswith(',') else fmt}} [{f(row['gap_ci'][0])}, {f(row['gap_ci'][1])}]",
            "yes" if row["within"] else "no")


def report_markdown(result: dict[str, Any], tools: Sequence[str], benches: Sequence[str]) -> str:
    """The generated tables: figures, per benchmark, shares, ranking, validate-sim."""
    lines = [f"Evaluation: the same {result['real_tasks']} tasks on real tools for every manager (one episode each), "
             f"{result['sim_tasks']} simulated; intervals are 95% bootstrap intervals over the tasks; `within`: the "
             "gap's interval holds 0 (the gap is inside sampling error).", "",
             "#### Predicted (simulator) against measured (real pool)", "",
             "| manager | figure | predicted | measured | gap (measured - predicted) | within |",
             "| --- | --- | --- | --- | --- | --- |"]
    formats = {"accuracy": ".3f", "tokens": ".0f", "cost_units": ".2f", "usd": ".2e", "latency_s": ".2f",
               "rounds": ".2f", "calls_per_round": ".2f"}
    for name, m in result["managers"].items():
        for key, fmt in formats.items():
            if key in m["figures"]:
                lines.append(f"| {name} | {key} | " + " | ".join(_cell(m["figures"][key], fmt)) + " |")
    lines += ["", "#### Accuracy per benchmark", "", "| manager | benchmark | predicted | measured | gap | within |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name, m in result["managers"].items():
        for key, row in sorted(m["figures"].items()):
            if key.startswith("bench:"):
                lines.append(f"| {name} | {benches[int(key[6:])]} | " + " | ".join(_cell(row, ".3f")) + " |")
    lines += ["", "#### Tool shares (of all calls)", "", "| manager | tool | predicted | measured | gap | within |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name, m in result["managers"].items():
        for key, row in sorted(m["figures"].items()):
            if key.startswith("share:") and (row["sim"] > 0.005 or row["real"] > 0.005):
                lines.append(f"| {name} | {tools[int(key[6:])]} | " + " | ".join(_cell(row, ".3f")) + " |")
    lines += ["", "#### Model shares (of agent calls)", "", "| manager | model | predicted | measured |",
              "| --- | --- | --- | --- |"]
    for name, m in result["managers"].items():
        for model in m["model_dist"]["real"]:
            lines.append(f"| {name} | {model} | {m['model_dist']['sim'].get(model, 0.0):.3f} | "
                         f"{m['model_dist']['real'][model]:.3f} |")
    lines += ["", "#### Does the simulator rank the configs as the real pool does? (accuracy of A minus B)", "",
              "| A | B | predicted | measured (paired over tasks) | same order |", "| --- | --- | --- | --- | --- |"]
    for row in result["ranking"]:
        same = {True: "yes", False: "no", None: "not resolved (measured interval holds 0)"}[row["agree"]]
        lines.append(f"| {row['pair'][0]} | {row['pair'][1]} | {row['sim']:+.3f} [{row['sim_ci'][0]:+.3f}, "
                     f"{row['sim_ci'][1]:+.3f}] | {row['real']:+.3f} [{row['real_ci'][0]:+.3f}, "
                     f"{row['real_ci'][1]:+.3f}] | {same} |")
    lines += ["", "#### `parasim validate-sim` on each real evaluation's episodes", "",
              "| manager | episodes replayed | figures | flagged | real wall time (s) |",
              "| --- | --- | --- | --- | --- |"]
    for name, m in result["managers"].items():
        v = m["validate_sim"] or {}
        lines.append(f"| {name} | {v.get('episodes', '—')} | {v.get('figures', '—')} | {v.get('flagged', '—')} | "
                     f"{m['real_wall_s']:.0f} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    """Predicted against measured accuracy and tokens per manager, with the intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, key in zip(axes, ("accuracy", "tokens")):
        for name, m in result["managers"].items():
            row = m["figures"][key]
            # a percentile interval need not hold its point estimate (a skewed statistic): bars of length >= 0
            xerr = [[max(0.0, row["sim"] - row["sim_ci"][0])], [max(0.0, row["sim_ci"][1] - row["sim"])]]
            yerr = [[max(0.0, row["real"] - row["real_ci"][0])], [max(0.0, row["real_ci"][1] - row["real"])]]
            ax.errorbar(row["sim"], row["real"], xerr=xerr, yerr=yerr, fmt="o", capsize=3, label=name)
        rows = [m["figures"][key] for m in result["managers"].values()]
        lo = min(min(r["sim_ci"][0], r["real_ci"][0]) for r in rows)
        hi = max(max(r["sim_ci"][1], r["real_ci"][1]) for r in rows)
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xlabel(f"predicted {key} (simulator)")
        ax.set_ylabel(f"measured {key} (real pool)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def update_page(page: Path, body: str) -> None:
    """Replace the generated section of ``page`` (between the markers) with ``body``."""
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{page}: no {BEGIN} ... {END} section to update")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    note = "<!-- written by scripts/sim_to_real.py: edit the script, not this section -->\n"
    atomic_write_bytes(page, (head + BEGIN + "\n" + note + body + END + tail).encode())


# --------------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "parasim_out" / "sim_to_real"), help="the run's folder (resumable)")
    ap.add_argument("--pool-dir", default=None, help="where scripts/cpu_pool.py builds the pool (default: OUT/pool)")
    ap.add_argument("--quick", action="store_true", help="the CI tier: the same pool, a few dozen real episodes")
    ap.add_argument("--no-build", action="store_true",
                    help="use the pool in --pool-dir as it is (its manifest.json, task files and serving file)")
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"),
                    help="an interpreter with vLLM (scripts/setup_vllm_venv.sh builds .venv-vllm)")
    ap.add_argument("--update", default=None, metavar="PAGE", help="also rewrite PAGE's generated section")
    args = ap.parse_args(argv)
    loop = LoopConfig.quick() if args.quick else LoopConfig()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    pool_dir = Path(args.pool_dir).resolve() if args.pool_dir else out / "pool"
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    if not args.no_build:
        build = [sys.executable, REPO / "scripts" / "cpu_pool.py", "build", pool_dir, "--vllm-python",
                 args.vllm_python]
        run_command(build, out / "cpu_pool.log")
    elif not (pool_dir / "manifest.json").is_file():
        raise SystemExit(f"--no-build: {pool_dir} holds no manifest.json (build it with scripts/cpu_pool.py build)")
    timings["pool"] = time.perf_counter() - t0
    manifest = json.loads((pool_dir / "manifest.json").read_text())
    paths = {"out": out, "train_tasks": hide_difficulty(pool_dir / "tasks_train.jsonl", out / "tasks_train.jsonl"),
             "eval_tasks": hide_difficulty(pool_dir / "tasks_eval.jsonl", out / "tasks_eval.jsonl"),
             "serving": pool_dir / "pool_serving.yaml", "pool": out / "pool.json", "pool_mono": out / "pool_mono.json"}
    paths["base_pool"] = write_base_pool(paths["serving"], out)
    paths["play_base"] = without_search(paths["base_pool"], out / "base_pool_no_search.json")

    from parasim.real.tasks import load_real_tasks
    from training.loggers import Progress

    train_tasks, eval_tasks = load_real_tasks(paths["train_tasks"]), load_real_tasks(paths["eval_tasks"])
    with Progress() as bar:
        if not (out / "log" / "done.json").exists():
            with served(paths["serving"], out) as endpoints:
                stage_log(loop, paths, endpoints, train_tasks, bar)
        timings["log"] = time.perf_counter() - t0 - sum(timings.values())
        stage_calibrate(paths)
        timings["calibrate"] = time.perf_counter() - t0 - sum(timings.values())
        stage_train(loop, paths)
        timings["train"] = time.perf_counter() - t0 - sum(timings.values())
        which = managers(loop, paths)
        todo = [n for n in which if not (out / "eval" / n.replace("=", "_") / "episodes.npz").exists()]
        if todo:
            with served(paths["serving"], out) as endpoints:
                stage_evaluate(loop, paths, endpoints, eval_tasks, bar, {n: which[n] for n in todo})
        timings["evaluate"] = time.perf_counter() - t0 - sum(timings.values())
    stage_validate(paths, list(which))
    timings["validate"] = time.perf_counter() - t0 - sum(timings.values())
    result = analyse(loop, paths, list(which))
    result.update(loop=asdict(loop), manifest=manifest, timings_s=timings,
                  log=json.loads((out / "log" / "done.json").read_text()))
    atomic_write_json(out / "results.json", result)
    body = report_markdown(result, tool_names(paths), bench_names())
    atomic_write_bytes(out / "report.md", body.encode())
    plot(result, out / "gap.png")
    print(body)
    if args.update:
        update_page(Path(args.update), body)
    say(f"done in {time.perf_counter() - t0:.0f} s: {out / 'results.json'}, {out / 'report.md'}, {out / 'gap.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
