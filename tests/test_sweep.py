"""Sweeps: grid parsing and config addressing, the crash-safe results store, kill-and-restart, report, Ray."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from parasim.cli import main as cli_main
from training import config, grpo, report, sft, sweep
from training.result_schema import untimed
from training.store import ResultsStore

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

TINY = {"grpo.steps": "2", "grpo.tasks_per_step": "4", "grpo.group_size": "4", "grpo.minibatches": "2",
        "expert.episodes": "64", "sft.epochs": "1", "eval.tasks": "8", "eval.k": "2", "policy.hidden": "32"}


def test_every_section_and_reward_field_is_addressable():
    names = config.addressable_names()
    assert names["c_tar"] == ("reward", "c_tar") and names["reward.c_tar"] == ("reward", "c_tar")
    assert names["grpo.learning_rate"] == ("grpo", "learning_rate") and names["max_parallel"] == ("env", "max_parallel")
    cfg = config.make_config("default", {"c_tar": "4", "grpo.learning_rate": "0.01", "max_parallel": "2", "seed": "3"})
    assert (cfg.reward.c_tar, cfg.grpo.learning_rate, cfg.env.max_parallel, cfg.seed) == (4.0, 0.01, 2, 3)


@pytest.mark.parametrize("overrides, match", [
    ({"c_tar": "-1"}, "c_tar"),
    ({"grpo.learning_rate": "2"}, r"grpo\.learning_rate = 2\.0: must be finite and in \[0\.0, 1\.0\]"),
    ({"grpo.group_size": "1"}, r"grpo\.group_size"),
    ({"env.max_parallel": "17"}, r"env\.max_parallel"),  # past SLOT_LIMIT, the compiled step's width
    ({"grpo.adv_method": "ppo"}, r"grpo\.adv_method = 'ppo': must be one of"),
    ({"grpo.steps": "x"}, r"cannot parse 'x' as int"),
    ({"nope": "1"}, "unknown option 'nope'"),
    ({"grpo.clip_eps": "0.3", "grpo.clip_eps_high": "0.2"}, "clip_eps_high"),
    ({"env.temperature": "-0.5"}, r"env\.temperature = -0\.5: must be -1 \(the pool's own\) or a number in \[0, 2\]"),
    ({"env.temperature": "0.6", "env.pool": "toolorchestra"}, r"env\.temperature = 0\.6: .*states no temperature"),
])
def test_bad_values_name_the_field_and_range(overrides, match):
    with pytest.raises(ValueError, match=match):
        config.make_config("default", overrides)


def test_env_temperature_reaches_the_env_as_its_harness_option():
    """A sweep's env.temperature samples the simulated pool's calls there (the env's harness option); its default
    leaves the env without one."""
    from training.rollout import env_kwargs

    assert "harness" not in env_kwargs(config.make_config("default").env)
    kwargs = env_kwargs(config.make_config("default", {"env.temperature": "0.6"}).env)
    assert kwargs["harness"] == {"temperature": 0.6} and "temperature" not in kwargs


def test_ablation_presets_and_round_trip(tmp_path):
    assert config.make_config("serial").env.max_parallel == 1
    assert config.make_config("mono").env.pool == "paramanager_mono"
    assert config.make_config("no_diversity").reward.w_diversity == 0.0
    assert config.make_config("sft_only").grpo.steps == 0
    assert config.make_config("rl_from_base").sft.epochs == 0
    cfg = config.make_config("serial", {"reward": "xrouter", "usd_scale": "2", "seed": "5"})
    assert cfg.reward.formula == "xrouter" and cfg.reward.usd_scale == 2.0
    assert config.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    path = tmp_path / "c.toml"
    path.write_text('preset = "serial"\nc_tar = 12\n[grpo]\nsteps = 3\n')
    loaded = config.load_config(str(path))
    assert (loaded.env.max_parallel, loaded.reward.c_tar, loaded.grpo.steps) == (1, 12.0, 3)


def test_grid_expansion_and_keys():
    axes = sweep.parse_grid(["c_tar=4,8", "grpo.learning_rate=0.001,0.01"])
    points = sweep.expand(axes, range(2))
    assert len(points) == 8 and len({p.key for p in points}) == 8
    assert points[0].label == "c_tar=4,grpo.learning_rate=0.001" and points[0].config().reward.c_tar == 4.0
    for bad, match in (("c_tar", "NAME=V1"), ("c_tar=", "no values"), ("bogus=1", "unknown option")):
        with pytest.raises(ValueError, match=match):
            sweep.parse_grid([bad])
    ablations = sweep.expand(sweep.parse_grid(["preset=default,serial", "c_tar=4"]), [0])
    assert [p.label for p in ablations] == ["c_tar=4", "serial,c_tar=4"]
    assert ablations[1].config().env.max_parallel == 1
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        sweep.parse_grid(["preset=nope"])
    with pytest.raises(ValueError, match="two axes"):
        sweep.parse_grid(["c_tar=4", "reward.c_tar=8"])
    with pytest.raises(ValueError, match="c_tar"):
        sweep.expand(sweep.parse_grid(["c_tar=0"]), [0])


def test_store_survives_reopen_and_ignores_temp_files(tmp_path):
    store = ResultsStore(tmp_path)
    store.put({"key": "a", "seed": 0, "overrides": {"c_tar": "4"}, "accuracy": 0.5})
    (tmp_path / "points" / ".b.json.123.tmp").write_text("{half a fi")  # a crash mid-write leaves only this
    again = ResultsStore(tmp_path)
    assert again.done("a") and not again.done("b") and again.get("a")["accuracy"] == 0.5
    assert json.loads((tmp_path / "index.json").read_text()) == {"a": {"overrides": {"c_tar": "4"}, "seed": 0}}


def test_a_failing_point_is_reported_not_stored(tmp_path, monkeypatch):
    points = sweep.expand(sweep.parse_grid(["c_tar=4,8"]), [0], fixed=TINY)

    def fake(todo, workers):
        yield {"key": todo[0].key, "label": todo[0].label, "seed": 0, "accuracy": 0.5}
        yield {"key": todo[1].key, "label": todo[1].label, "seed": 0, "error": "Traceback: boom"}

    monkeypatch.setattr(sweep, "run_local", fake)
    with pytest.raises(sweep.SweepError, match="(?s)1 of 2 points failed.*boom"):
        sweep.run_sweep(points, tmp_path, "local", progress=False)
    store = ResultsStore(tmp_path / "store")
    assert store.done(points[0].key) and not store.done(points[1].key)


def test_pareto_front():
    acc = np.array([0.5, 0.6, 0.55, 0.7, 0.4])
    spend = np.array([1.0, 2.0, 3.0, 4.0, 0.5])
    assert report.pareto_front(acc, spend).tolist() == [4, 0, 1, 3]


def _fake_result(label: str, seed: int, acc: float) -> dict:
    return {"key": f"{label}{seed}", "label": label, "seed": seed, "accuracy": acc, "reward": acc,
            "sft_reward": 0.1, "sft_accuracy": 0.3,
            "train_reward_start": 0.1, "train_reward_end": 0.2, "tokens": 1000 * acc, "cost_units": 5.0, "usd": 0.01,
            "latency_s": 30.0, "rounds": 3.0, "calls_per_round": 2.0, "distinct_tools": 2.5,
            "format_failure_rate": 0.0, "wall_s": 1.0, "tool_dist": [1 / 7] * 7, "model_dist": {"m": 1.0}}


def test_report_writes_table_csv_json_and_plots(tmp_path, capsys):
    results = [_fake_result("c_tar=4", 0, 0.4), _fake_result("c_tar=4", 1, 0.6), _fake_result("c_tar=8", 0, 0.7)]
    paths = report.write_report(results, tmp_path)
    assert {p.name for p in paths} == {"results.json", "summary.json", "summary.csv", "summary.md", "pareto.png",
                                       "distributions.png"}
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert rows[0]["accuracy"] == pytest.approx(0.5) and rows[0]["seeds"] == [0, 1]
    assert (tmp_path / "summary.csv").read_text().splitlines()[0].startswith("label,seeds,accuracy")
    assert (tmp_path / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert "c_tar=8" in capsys.readouterr().out


def _tiny_args() -> list[str]:
    return [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]




@pytest.mark.slow
def test_killed_sweep_restarts_without_redoing_or_losing_points(tmp_path):
    """Per-point processes store each point as it finishes, so a kill between two points keeps the first (a
    population's points finish together: ``test_a_killed_population_sweep_resumes_each_point_from_its_checkpoints``)."""
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "parasim.cli", "sweep", "--grid", "c_tar=4,8,12", "--seeds", "1", "--workers", "1",
           "--backend", "local", "--out", str(out), "--no-progress", *_tiny_args()]
    points = out / "store" / "points"
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen(cmd, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 180
        while time.time() < deadline and not (points.is_dir() and list(points.glob("*.json"))):
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker, mid-sweep
        proc.wait()
    first = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in points.glob("*.json")}
    assert 1 <= len(first) < 3, (tmp_path / "first.log").read_text()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in points.glob("*.json")}
    assert len(after) == 3 and all(after[name] == first[name] for name in first)  # kept, not redone
    rows = json.loads((out / "summary.json").read_text())
    assert [r["label"] for r in rows] == ["c_tar=4", "c_tar=8", "c_tar=12"]
    assert not list(points.glob(".*.tmp"))


def _in_process(chunks, workers):
    """``run_populations`` without worker processes, so that a test's patches reach the trainer."""
    for chunk in chunks:
        yield from sweep.run_chunk(chunk)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_killed_population_sweep_resumes_each_point_from_its_checkpoints(tmp_path, monkeypatch):
    """kill -9 mid-GRPO under the default (population) backend: its points finish together, so none is stored, but
    each keeps its SFT weights and GRPO state under OUT/work/<key>; the rerun redoes no SFT and no checkpointed GRPO
    step, stores exactly what an uninterrupted sweep stores and removes the checkpoints."""
    tiny = {**TINY, "grpo.steps": "40", "grpo.checkpoint_every": "2"}
    sets = [a for k, v in tiny.items() for a in ("--set", f"{k}={v}")]
    out = tmp_path / "sweep"
    args = ["sweep", "--grid", "c_tar=4,12", "--seeds", "1", "--workers", "1", "--out", str(out), "--no-progress",
            *sets]
    points = sweep.expand(sweep.parse_grid(["c_tar=4,12"]), [0], fixed=tiny)
    ckpts = [out / "work" / p.key / "grpo.pt" for p in points]
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "parasim.cli", *args], start_new_session=True, stdout=log,
                                stderr=subprocess.STDOUT)
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None and not all(c.exists() for c in ckpts):
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker, mid-GRPO
        proc.wait()
    assert all(c.exists() for c in ckpts), (tmp_path / "first.log").read_text()
    assert not list((out / "store" / "points").glob("*.json"))
    killed_at = {p.key: torch.load(c, weights_only=False)["step"] for p, c in zip(points, ckpts)}
    assert all(0 < s < 40 for s in killed_at.values()), killed_at

    threads = torch.get_num_threads()
    monkeypatch.setattr(sweep, "run_populations", _in_process)
    sweep.run_sweep(points, tmp_path / "whole", workers=1, progress=False)
    saved: list[tuple[str, int]] = []
    save = grpo.save_checkpoint
    monkeypatch.setattr(grpo, "save_checkpoint",
                        lambda path, *rest: saved.append((path.parent.name, rest[2])) or save(path, *rest))
    monkeypatch.setattr(sft, "train_sft_stack", lambda *a, **k: pytest.fail("SFT redone despite its checkpoint"))
    try:
        assert cli_main(args) == 0
    finally:
        torch.set_num_threads(threads)
    for key, step in killed_at.items():
        assert min(s for k, s in saved if k == key) == step + 2  # resumed after its last checkpoint
    for p in points:
        a, b = (json.loads((root / "store" / "points" / f"{p.key}.json").read_text())
                for root in (tmp_path / "whole", out))
        assert untimed(a) == untimed(b)
    assert not (out / "work").exists()


@pytest.mark.ray
@pytest.mark.slow
def test_ray_backend_matches_local_backend(tmp_path):
    pytest.importorskip("ray")
    points = sweep.expand(sweep.parse_grid(["c_tar=4,12"]), [0], fixed=TINY)
    local = sweep.run_sweep(points, tmp_path / "local", "local", workers=1, progress=False)
    remote = sweep.run_sweep(points, tmp_path / "ray", "ray", workers=1, progress=False)  # ray.init(num_cpus=1)
    assert [r["key"] for r in remote] == [r["key"] for r in local]
    for a, b in zip(local, remote):
        assert untimed(a) == untimed(b)
    assert local[0]["accuracy"] != local[1]["accuracy"] or local[0]["reward"] != local[1]["reward"]
