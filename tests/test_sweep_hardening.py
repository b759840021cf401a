"""Sweeps die cleanly and never trust their store.

A SIGKILLed ``parasim sweep`` leaves no process and no semaphore behind; a point file of the wrong shape is
quarantined with a warning and its point redone while the others are kept; an output folder that cannot be
written, or that is a regular file, gives a one-line error instead of a traceback.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parasim.cli import main as cli_main
from parasim.protocol.schema import Tool
from training import procgroup, sweep

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

TINY = {"grpo.steps": "2", "grpo.tasks_per_step": "4", "grpo.group_size": "4", "grpo.minibatches": "2",
        "expert.episodes": "64", "sft.epochs": "1", "eval.tasks": "8", "eval.k": "2", "policy.hidden": "32"}


def _points(grid: str) -> list[sweep.GridPoint]:
    return sweep.expand(sweep.parse_grid([grid]), [0], fixed=TINY)


def _args(grid: str, out: Path) -> list[str]:
    tiny = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    return ["sweep", "--grid", grid, "--seeds", "1", "--workers", "1", "--out", str(out), "--no-progress", *tiny]


def _cmd(grid: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "parasim.cli", *_args(grid, out)]


def _result(point: sweep.GridPoint, accuracy: float = 0.5) -> dict[str, Any]:
    """A result with every field ``run_point`` writes and made-up numbers: fills a store without training."""
    return {
        "key": point.key, "label": point.label, "preset": point.preset, "overrides": dict(point.overrides),
        "seed": point.seed, "accuracy": accuracy, "reward": 0.25, "tokens": 5000.0, "cost_units": 3.0, "usd": 0.01,
        "latency_s": 100.0, "rounds": 1.5, "calls_per_round": 3.0, "distinct_tools": 2.0, "format_failure_rate": 0.0,
        "no_final_rate": 0.0, "tool_dist": [1 / 7] * 7, "model_dist": {"GPT-OSS-20B": 1.0},
        "acc_by_benchmark": {"AIME24": accuracy}, "acc_by_suite": {"paramanager": accuracy},
        "tool_names": [t.wire_name for t in Tool if t != Tool.FINAL_ANSWER], "sft_accuracy": 0.4, "sft_reward": 0.2,
        "sft_tokens": 5000.0, "sft_cost_units": 3.0, "sft_latency_s": 100.0, "train_reward_start": 0.2,
        "train_reward_end": 0.3, "reward_curve": [0.2, 0.3], "accuracy_curve": [0.4, 0.5], "entropy_curve": [8.0, 7.9],
        "env_steps_per_s": 500.0, "sft_s": 0.3, "grpo_s": 0.3, "eval_s": 0.2, "wall_s": 0.9,
        "config": point.config().to_dict(), "sft_losses": [9.3], "expert": {"episodes": 64},
        "history": [{"step": 0, "reward": 0.2, "accuracy": 0.4}, {"step": 1, "reward": 0.3, "accuracy": 0.5}],
    }


def _fill(points_dir: Path, points: list[sweep.GridPoint]) -> None:
    points_dir.mkdir(parents=True, exist_ok=True)
    for p in points:
        (points_dir / f"{p.key}.json").write_text(json.dumps(_result(p), indent=1, sort_keys=True) + "\n")


# Each bad shape: what replaces a good point file, and a fragment the quarantine warning's reason must contain.
BAD: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "list": (lambda good: b"[]", "JSON object"),
    "object_without_key": (lambda good: b"{}", "key: missing"),
    "number": (lambda good: b"42", "JSON object"),
    "out_of_range_and_nan": (
        lambda good: json.dumps({**json.loads(good), "accuracy": 7.5, "reward": math.nan}).encode(),
        "accuracy=7.5: allowed range [0.0, 1.0]"),
    "wrong_type": (lambda good: json.dumps({**json.loads(good), "accuracy": "garbage"}).encode(), "accuracy='garbage'"),
    "truncated": (lambda good: good[: len(good) // 2], "not valid JSON"),
}


@pytest.mark.parametrize("shape", list(BAD))
def test_a_bad_point_file_is_quarantined_with_a_warning_and_only_its_point_redone(tmp_path, monkeypatch, capsys,
                                                                                 shape):
    points = _points("c_tar=4,8,12")
    points_dir = tmp_path / "store" / "points"
    _fill(points_dir, points)
    bad = points_dir / f"{points[1].key}.json"
    corrupt, reason = BAD[shape]
    bad_bytes = corrupt(bad.read_bytes())
    bad.write_bytes(bad_bytes)
    kept = {p.name: p.read_bytes() for p in points_dir.glob("*.json") if p != bad}
    redone: list[str] = []

    def fake_run_local(todo, workers):
        for p in todo:
            redone.append(p.key)
            yield _result(p, accuracy=0.75)

    monkeypatch.setattr(sweep, "run_local", fake_run_local)
    results = sweep.run_sweep(points, tmp_path, "local", progress=False)
    assert redone == [points[1].key]
    err = capsys.readouterr().err
    assert bad.name in err and reason in err, err
    quarantined = list((tmp_path / "store" / "quarantine").iterdir())
    assert [q.name.startswith(bad.name) for q in quarantined] == [True]
    assert quarantined[0].read_bytes() == bad_bytes
    assert {p.name: p.read_bytes() for p in points_dir.glob("*.json") if p != bad} == kept
    assert [r["key"] for r in results] == [p.key for p in points]
    assert [r["accuracy"] for r in results] == [0.5, 0.75, 0.5]
    sweep.run_sweep(points, tmp_path, "local", progress=False)  # now nothing is bad and nothing is redone
    assert redone == [points[1].key] and capsys.readouterr().err == ""


def test_a_result_that_breaks_the_schema_comes_back_as_a_failed_point(monkeypatch):
    from training import pipeline

    point = _points("c_tar=4")[0]
    monkeypatch.setattr(pipeline, "run_pipeline", lambda cfg, log=None: {**_result(point), "reward": math.inf})
    result = sweep.run_point(point)
    assert "reward=inf: allowed any finite number" in result["error"] and result["key"] == point.key


def test_a_regular_file_as_out_is_a_one_line_error(tmp_path, capsys):
    out = tmp_path / "not_a_folder"
    out.write_text("x")
    assert cli_main(_args("c_tar=4", out)) != 0
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "not a directory" in lines[0], captured


def test_an_interrupted_sweep_is_a_one_line_message(tmp_path, monkeypatch, capsys):
    def interrupted(chunks, workers):
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(sweep, "run_populations", interrupted)  # the default backend's worker pool
    assert cli_main(_args("c_tar=4", tmp_path)) == 130
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0]


def _lost(task: Any, exit_code: int | None) -> tuple[str, Any, int | None]:
    return ("lost", task, exit_code)


def test_the_pool_runs_each_task_once_and_reports_a_worker_that_died():
    assert sorted(procgroup.imap_unordered("operator:neg", [1, 2, 3], 2, _lost)) == [-3, -2, -1]
    assert list(procgroup.imap_unordered("os:_exit", [3], 1, _lost)) == [("lost", 3, 3)]


def test_stopping_early_kills_the_busy_worker_which_leads_a_process_group_of_its_own():
    stream = procgroup.imap_unordered("time:sleep", [0, 600], 1, _lost)
    assert next(stream) is None  # the worker is up; it now sleeps on the second task
    workers = [pid for pid in _children(os.getpid()) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(workers) == 1 and os.getpgid(workers[0]) == workers[0]
    stream.close()
    assert _stat(workers[0]) is None  # killed and reaped, not left to sleep


def _children(ppid: int) -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and (st := _stat(int(e))) and int(st[1]) == ppid]


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (state, ppid, pgrp, session, ...), or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _session(sid: int) -> list[int]:
    """Live (not zombie) processes of the session ``sid``: a sweep started with ``start_new_session`` and all
    it starts, workers and multiprocessing's resource tracker included."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) and stat[0] != "Z" and int(stat[3]) == sid:
            found.append(int(entry))
    return found


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def _unmapped_semaphores() -> set[str]:
    """Named semaphores in /dev/shm that no live process maps: leaked ones (a live one is mapped by its owner)."""
    names = {n for n in os.listdir("/dev/shm") if n.startswith("sem.")}
    mapped = "".join(_maps(int(e)) for e in os.listdir("/proc") if e.isdigit())
    return {n for n in names if f"/dev/shm/{n}" not in mapped}


def _poll(check: Callable[[], Any], seconds: float) -> Any:
    """``check()`` until it is falsy or ``seconds`` have passed; its last value."""
    deadline = time.monotonic() + seconds
    while (value := check()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


def _end_session(sid: int) -> None:
    """Kill what a failed check left of a session: the workers first, so that the resource tracker sees its pipe
    close and unlinks its semaphores before it goes too."""
    def cmdline(pid: int) -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    for pid in _session(sid):
        if b"resource_tracker" not in cmdline(pid):
            os.kill(pid, signal.SIGKILL)
    for pid in _poll(lambda: _session(sid), 10) or []:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kill_9_leaves_no_process_and_no_semaphore_and_the_rerun_finishes_each_point_once(tmp_path):
    points = _points("c_tar=4,8,12")
    out = tmp_path / "sweep"
    points_dir = out / "store" / "points"
    _fill(points_dir, points[:2])
    kept, bad = (points_dir / f"{p.key}.json" for p in points[:2])
    kept_before = (kept.read_bytes(), kept.stat().st_mtime_ns)
    bad.write_bytes(BAD["out_of_range_and_nan"][0](bad.read_bytes()))
    leaked_before = _unmapped_semaphores()
    log_path = tmp_path / "first.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(_cmd("c_tar=4,8,12", out), start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    try:
        # A worker is running a point once it has loaded torch.
        busy = _poll(lambda: proc.poll() is None and not any(
            "libtorch" in _maps(pid) for pid in _session(proc.pid) if pid != proc.pid), 180)
        assert not busy and proc.poll() is None, log_path.read_text()
        os.kill(proc.pid, signal.SIGKILL)  # the sweep alone, not its process group
        proc.wait()
        left = _poll(lambda: _session(proc.pid), 15)
        assert left == [], [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in left]
        assert _unmapped_semaphores() - leaked_before == set()
    finally:
        _end_session(proc.pid)
    log = log_path.read_text()
    assert bad.name in log and "accuracy=7.5: allowed range [0.0, 1.0]" in log and "reward=nan" in log, log
    done = subprocess.run(_cmd("c_tar=4,8,12", out), capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    assert (kept.read_bytes(), kept.stat().st_mtime_ns) == kept_before  # finished: kept, not redone
    assert sorted(p.name for p in points_dir.glob("*.json")) == sorted(f"{p.key}.json" for p in points)
    assert [r["key"] for r in json.loads((out / "results.json").read_text())] == [p.key for p in points]
    real = json.loads(bad.read_text())
    assert set(_result(points[1])) <= set(real)  # the made-up results invent no field a real one lacks
    assert 0.0 <= real["accuracy"] <= 1.0 and math.isfinite(real["reward"])
    summary = json.loads((out / "summary.json").read_text())
    assert [r["label"] for r in summary] == [p.label for p in points]
    assert all(0.0 <= r["accuracy"] <= 1.0 and math.isfinite(r["reward"]) for r in summary)


def _read_only(folder: Path, cmd: list[str]) -> list[str]:
    """``cmd`` with ``folder`` read-only. File modes do not stop root, so as root the folder is bind-mounted
    read-only in a mount namespace of the command's own; anyone else gets the folder's write bits cleared."""
    if os.geteuid() != 0:
        for d in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
            d.chmod(0o555)
        return cmd
    mount = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(folder)]
    probe = subprocess.run([*wrapped, "sh", "-c", f"! touch '{folder}/.probe' 2>/dev/null"], capture_output=True,
                           text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount here: {probe.stderr.strip()}")
    return [*wrapped, *cmd]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_read_only_out_reruns_a_finished_sweep_and_names_the_path_when_points_remain(tmp_path):
    out = tmp_path / "sweep"
    points_dir = out / "store" / "points"
    _fill(points_dir, _points("c_tar=4,8"))
    assert cli_main(_args("c_tar=4,8", out)) == 0  # nothing to train: it writes the index and the report
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    try:
        again = subprocess.run(_read_only(out, _cmd("c_tar=4,8", out)), capture_output=True, text=True, timeout=240,
                               check=False)
        assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
        assert "c_tar=8" in again.stdout
        more = subprocess.run(_read_only(out, _cmd("c_tar=4,8,12", out)), capture_output=True, text=True,
                              timeout=240, check=False)
    finally:
        for d in [out, *(p for p in out.rglob("*") if p.is_dir())]:
            d.chmod(0o755)
    lines = more.stderr.strip().splitlines()
    assert more.returncode != 0 and len(lines) == 1, more.stderr
    assert str(points_dir) in lines[0] and ("Read-only file system" in lines[0] or "Permission denied" in lines[0])
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files


@pytest.mark.timeout(120)
def test_unreachable_ray_address_fails_within_the_connect_deadline(tmp_path, capsys):
    """Issue 24, finding 13: ``--backend ray --ray-address 127.0.0.1:1`` waited past 300 s; now one line, exit 1."""
    pytest.importorskip("ray")
    code = cli_main(["sweep", "--backend", "ray", "--ray-address", "127.0.0.1:1", "--grid", "c_tar=4", "--seeds", "1",
                     "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip() == ("parasim sweep: error: --ray-address 127.0.0.1:1: cannot reach the Ray cluster "
                           "(Connection refused; connect deadline 10 s)")


def test_ray_reach_leaves_named_addresses_to_ray():
    for address in ("auto", "local", "ray://head", ""):
        sweep.reach_ray(address, timeout_s=0.1)  # no probe, no error
    with pytest.raises(sweep.SweepError, match=r"ray://127.0.0.1:1: cannot reach the Ray cluster"):
        sweep.reach_ray("ray://127.0.0.1:1", timeout_s=1.0)
