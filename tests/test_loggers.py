"""Metric loggers: JSONL, TensorBoard event files read back with TensorBoard's own reader, verl's metric names, and
a resume after a crash that logs every step once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.loggers import MetricLoggers, parse_loggers, verl_names


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def _scalars(log_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _record(step: int, run: int) -> dict[str, float]:
    return {"pg_loss": step + 0.5 * run, "entropy": 1.0 / step, "reward_mean": 0.1 * step, "custom/x": float(run)}


def test_tensorboard_event_files_are_written_with_verl_names(tmp_path):
    pytest.importorskip("tensorboard")
    with MetricLoggers(tmp_path, "m", ("jsonl", "tensorboard")) as log:
        for step in range(1, 4):
            log.log(_record(step, 0), step)
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert _scalars(tmp_path / "tensorboard", "actor/pg_loss") == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert [s for s, _ in _scalars(tmp_path / "tensorboard", "critic/rewards/mean")] == [1, 2, 3]
    assert _scalars(tmp_path / "tensorboard", "custom/x") == [(1, 0.0), (2, 0.0), (3, 0.0)]  # no verl name: kept
    assert _steps(tmp_path / "m.jsonl") == [1, 2, 3]
    assert json.loads((tmp_path / "m.jsonl").read_text().splitlines()[0])["pg_loss"] == 1.0  # the trainer's keys


def test_a_resume_logs_each_step_once(tmp_path):
    """Steps 1-5 logged, the last checkpoint at step 3, a crash; the resumed run redoes 4-5 and goes on to 6."""
    pytest.importorskip("tensorboard")
    first = MetricLoggers(tmp_path, "m", ("jsonl", "tensorboard"))
    for step in range(1, 6):
        first.log(_record(step, 0), step)
    first.close()
    with (tmp_path / "m.jsonl").open("a") as fh:
        fh.write('{"step": 6, "pg_lo')  # a line the crash cut
    with MetricLoggers(tmp_path, "m", ("jsonl", "tensorboard"), resume_step=3) as log:
        for step in range(4, 7):
            log.log(_record(step, 1), step)
    assert _steps(tmp_path / "m.jsonl") == [1, 2, 3, 4, 5, 6]
    runs = [json.loads(line)["custom/x"] for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert runs == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert _scalars(tmp_path / "tensorboard", "custom/x") == [(1, 0.0), (2, 0.0), (3, 0.0), (4, 1.0), (5, 1.0),
                                                              (6, 1.0)]


def test_a_fresh_run_replaces_an_old_log(tmp_path):
    with MetricLoggers(tmp_path, "m", ("jsonl",)) as log:
        log.log({"loss": 1.0}, 1)
    with MetricLoggers(tmp_path, "m", ("jsonl",)) as log:
        log.log({"loss": 2.0}, 1)
    assert _steps(tmp_path / "m.jsonl") == [1]


def test_llm_trainer_step_log_resumes_without_duplicates(tmp_path):
    import torch

    from training.llm.runtime import DistInfo, StepLog

    info = DistInfo(0, 1, 0, torch.device("cpu"))
    log = StepLog(tmp_path, "grpo_metrics", "jsonl", info, resume_step=None, echo=False)
    for step in (1, 2, 3):
        log.log({"step": step, "pg_loss": 0.1})
    log.close()
    log = StepLog(tmp_path, "grpo_metrics", "jsonl", info, resume_step=2, echo=False)
    log.log({"step": 3, "pg_loss": 0.2})
    log.close()
    assert _steps(tmp_path / "grpo_metrics.jsonl") == [1, 2, 3]
    assert json.loads((tmp_path / "grpo_metrics.jsonl").read_text().splitlines()[-1])["pg_loss"] == 0.2
    worker = StepLog(tmp_path / "rank1", "grpo_metrics", "jsonl", DistInfo(1, 2, 1, torch.device("cpu")),
                     resume_step=None, echo=False)
    worker.log({"step": 1})
    assert not (tmp_path / "rank1").exists()  # only the main process logs


def test_small_trainer_resume_step_is_the_checkpoints(tmp_path):
    import torch

    from training.pipeline import grpo_resume_step

    assert grpo_resume_step(tmp_path) is None
    torch.save({"step": 4, "history": []}, tmp_path / "grpo.pt")
    assert grpo_resume_step(tmp_path) == 4


def test_verl_names_and_logger_choices():
    named = verl_names({"step": 3, "clip_frac": 0.1, "kl_ref": 0.01, "len/len_mean": 40.0, "time/rollout": 2.0,
                        "tools/search": 0.5, "note": "x"})
    assert named == {"actor/pg_clipfrac": 0.1, "actor/kl_loss": 0.01, "response_length/mean": 40.0,
                     "timing_s/gen": 2.0, "tools/search": 0.5}
    assert parse_loggers("jsonl, tensorboard") == ("jsonl", "tensorboard") and parse_loggers("") == ()
    with pytest.raises(ValueError, match="loggers = 'jsonl,tb': unknown 'tb'; allowed"):
        parse_loggers("jsonl,tb")


def test_wandb_offline_run_is_written(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with MetricLoggers(tmp_path, "m", ("wandb",), config={"learning_rate": 1e-6}) as log:
        log.log({"pg_loss": 0.5}, 1)
    assert list((tmp_path / "wandb").rglob("*.wandb"))


def test_sweep_logs_each_points_curves_once_across_reruns(tmp_path):
    pytest.importorskip("tensorboard")
    from parasim.commands.sweep import log_curves

    results = [{"key": f"c_tar={c}__seed0", "label": f"c_tar={c}", "seed": 0, "reward_curve": [0.1, 0.2 + c],
                "accuracy_curve": [0.5, 0.6], "entropy_curve": [1.0, 0.9]} for c in (4, 8)]
    log_curves(results, tmp_path, ("jsonl", "tensorboard"))
    log_curves(results, tmp_path, ("jsonl", "tensorboard"))  # a rerun of the finished sweep
    run = tmp_path / "c_tar=8__seed0"
    assert _steps(run / "curves.jsonl") == [1, 2]
    assert _scalars(run / "tensorboard", "critic/rewards/mean") == [(1, pytest.approx(0.1)), (2, pytest.approx(8.2))]
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 1
