"""Metric loggers: JSONL, TensorBoard event files read back with TensorBoard's own reader, one naming scheme (verl's
names where verl has one, parasim/... for the rest; every name in docs/metrics.md), the final block (warm-start
losses, final evaluation), W&B's mode from the environment, and a resume or rerun that logs every step once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.loggers import MetricLoggers, dashboard_names, final_metrics, metric_name, parse_loggers


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def _scalars(log_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _record(step: int, run: int) -> dict[str, float]:
    return {"pg_loss": step + 0.5 * run, "entropy": 1.0 / step, "reward_mean": 0.1 * step, "custom/x": float(run)}


def test_tensorboard_event_files_are_written_with_dashboard_names(tmp_path):
    pytest.importorskip("tensorboard")
    with MetricLoggers(tmp_path, "m", ("jsonl", "tensorboard")) as log:
        for step in range(1, 4):
            log.log(_record(step, 0), step)
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert _scalars(tmp_path / "tensorboard", "actor/pg_loss") == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert [s for s, _ in _scalars(tmp_path / "tensorboard", "critic/rewards/mean")] == [1, 2, 3]
    assert _scalars(tmp_path / "tensorboard", "parasim/custom/x") == [(1, 0.0), (2, 0.0), (3, 0.0)]  # no verl name
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
    assert _scalars(tmp_path / "tensorboard", "parasim/custom/x") == [(1, 0.0), (2, 0.0), (3, 0.0), (4, 1.0),
                                                                      (5, 1.0), (6, 1.0)]


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


def test_one_naming_scheme_and_logger_choices():
    named = dashboard_names({"step": 3, "clip_frac": 0.1, "kl_ref": 0.01, "len/len_mean": 40.0, "time/rollout": 2.0,
                             "tools/search": 0.5, "traj/outcome": 0.7, "note": "x"})
    assert named == {"actor/pg_clipfrac": 0.1, "actor/kl_loss": 0.01, "parasim/len/len_mean": 40.0,
                     "timing_s/gen": 2.0, "parasim/tools/search": 0.5, "parasim/accuracy": 0.7}
    small = dashboard_names({"reward": 0.5, "accuracy": 0.75, "tokens": 900.0, "kept": 1.0, "loss": 0.2})
    assert small == {"critic/rewards/mean": 0.5, "parasim/accuracy": 0.75, "parasim/tokens": 900.0,
                     "parasim/kept": 1.0, "parasim/loss": 0.2}  # accuracy is never verl's critic/score/mean
    assert dashboard_names({"loss": 1.5, "lr": 1e-5, "manager_tokens": 7}, "sft") == {
        "train/loss": 1.5, "train/lr": 1e-5, "parasim/manager_tokens": 7.0}
    assert parse_loggers("jsonl, tensorboard") == ("jsonl", "tensorboard") and parse_loggers("") == ()
    with pytest.raises(ValueError, match="loggers = 'jsonl,tb': unknown 'tb'; allowed"):
        parse_loggers("jsonl,tb")
    with pytest.raises(ValueError, match="record: expected one of grpo, sft, got 'ppo'"):
        metric_name("loss", "ppo")


def _doc_tables() -> dict[str, dict[str, str]]:
    """docs/metrics.md's tables by section heading: trainer key -> the name it documents."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    tables: dict[str, dict[str, str]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        heading = section.splitlines()[0]
        tables[heading] = dict(re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|", section, re.M))
    return tables


def test_docs_page_lists_every_name_a_training_run_logs(tmp_path):
    """A real tiny ``parasim train`` run: every key of its GRPO rows is on docs/metrics.md under the name the loggers
    give it, and so is every tag it writes (the warm start and final evaluation included); a sweep point logs the
    same tags; the LLM trainers' keys listed there map to the names listed."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from parasim.cli import main

    tiny = ["--set", "grpo.steps=2", "--set", "grpo.tasks_per_step=4", "--set", "grpo.group_size=4",
            "--set", "grpo.minibatches=2", "--set", "expert.episodes=64", "--set", "sft.epochs=2",
            "--set", "eval.tasks=8", "--set", "eval.k=2", "--set", "policy.hidden=32"]
    rc = main(["train", *tiny, "--out", str(tmp_path), "--quiet", "--no-progress", "--loggers", "jsonl,tensorboard"])
    assert rc == 0
    tables = _doc_tables()
    small = next(t for h, t in tables.items() if h.startswith("The small trainer"))
    rows = [json.loads(line) for line in (tmp_path / "train_metrics.jsonl").read_text().splitlines()]
    keys = {k for row in rows for k in row if k not in ("step", "time")}
    assert keys == set(small) and small == {k: metric_name(k) for k in keys}
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    documented = {name for table in tables.values() for name in table.values()}
    assert tags <= documented, tags - documented
    assert {"train/loss", "parasim/eval/accuracy", "parasim/eval_sft/accuracy", "parasim/accuracy"} <= tags
    # a sweep point logs the same tags: its stored result carries the same GRPO rows (``history``)
    from parasim.commands.sweep import log_curves

    result = json.loads((tmp_path / "metrics.json").read_text())
    history = [{k: v for k, v in row.items() if k != "time"} | {"step": row["step"] - 1} for row in rows]
    log_curves([{**result, "key": "point", "label": "point", "seed": 0, "history": history}], tmp_path / "sweep",
               ("tensorboard",))
    swept = EventAccumulator(str(tmp_path / "sweep" / "point" / "tensorboard"))
    swept.Reload()
    assert set(swept.Tags()["scalars"]) == tags
    for heading, record in (("The LLM GRPO trainer", "grpo"), ("The LLM SFT trainer", "sft")):
        table = next(t for h, t in tables.items() if h.startswith(heading))
        for key, name in table.items():  # patterns (reward/<component>) by one instance
            assert metric_name(key.replace("<", "").replace(">", ""), record) == name.replace("<", "").replace(
                ">", ""), key


def test_wandb_offline_run_is_written(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    with MetricLoggers(tmp_path, "m", ("wandb",), config={"learning_rate": 1e-6}) as log:
        assert log.sinks[0].mode == "offline"
        log.log({"pg_loss": 0.5}, 1)
        log.log_final([2.0, 1.0], {"parasim/eval/accuracy": 0.75}, 1)  # real wandb: define_metric, summary
        assert log.sinks[0]._run.summary["parasim/eval/accuracy"] == 0.75
    assert list((tmp_path / "wandb").rglob("*.wandb"))
    assert (tmp_path / "wandb" / "wandb_last_step").read_text() == "3"  # the two SFT epochs after step 1


def test_wandb_mode_follows_the_environment_and_a_finished_rerun_opens_no_run(tmp_path, monkeypatch):
    """``WANDB_MODE=online`` reaches ``wandb.init`` (recorded here: no network in tests); a rerun of a finished run
    (everything already logged, final block included) never opens a W&B run, so it leaves no empty run folder."""
    wandb = pytest.importorskip("wandb")
    calls: list[dict] = []

    class Run:
        summary: dict = {}

        def log(self, data, step=None):
            pass

        def define_metric(self, *a, **k):
            pass

        def finish(self):
            pass

    def init(**kwargs):
        calls.append(kwargs)
        Path(kwargs["dir"], f"run-{len(calls)}").mkdir()
        return Run()

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setenv("WANDB_MODE", "online")
    with MetricLoggers(tmp_path, "m", ("wandb",)) as log:
        for step in (1, 2):
            log.log({"reward": 0.5}, step)
        log.log_final([1.0, 0.5], {"parasim/eval/accuracy": 0.5}, 2)
    assert [c["mode"] for c in calls] == ["online"]
    with MetricLoggers(tmp_path, "m", ("wandb",), resume_step=2) as log:  # the rerun of the finished run
        for step in (1, 2):
            log.log({"reward": 0.5}, step)
        log.log_final([1.0, 0.5], {"parasim/eval/accuracy": 0.5}, 2)
    assert len(calls) == 1 and sorted(p.name for p in (tmp_path / "wandb").glob("run-*")) == ["run-1"]


def test_final_block_reaches_tensorboard_once(tmp_path):
    pytest.importorskip("tensorboard")
    result = {"accuracy": 0.8, "reward": 0.3, "tokens": 900.0, "cost_units": 2.0, "usd": 0.01, "latency_s": 30.0,
              "sft_accuracy": 0.6, "sft_reward": 0.1, "eval_pool": {"pool": "openweight", "accuracy": 0.7}}
    for rerun in (None, 2):
        with MetricLoggers(tmp_path, "m", ("tensorboard",), resume_step=rerun) as log:
            log.log_final([2.0, 1.0, 0.5], final_metrics(result), 2)
    assert _scalars(tmp_path / "tensorboard", "train/loss") == [(1, 2.0), (2, 1.0), (3, 0.5)]
    assert _scalars(tmp_path / "tensorboard", "parasim/eval/accuracy") == [(2, pytest.approx(0.8))]
    assert _scalars(tmp_path / "tensorboard", "parasim/eval_sft/accuracy") == [(2, pytest.approx(0.6))]
    assert _scalars(tmp_path / "tensorboard", "parasim/eval_pool/accuracy") == [(2, pytest.approx(0.7))]


def _result(c: int) -> dict:
    history = [{"step": s, "reward": 0.1 * s + c, "accuracy": 0.5, "tokens": 800.0, "cost_units": 2.0, "kept": 1.0,
                "decisions": 10, "env_steps_per_s": 100.0, "step_s": 0.5, "loss": 0.1, "entropy": 1.0, "kl": 0.0,
                "clip_frac": 0.1, "approx_kl": 0.01} for s in range(2)]
    return {"key": f"c_tar={c}__seed0", "label": f"c_tar={c}", "seed": 0, "history": history, "sft_losses": [1.0],
            "accuracy": 0.6, "reward": 0.2, "sft_accuracy": 0.5, "config": {"seed": 0}}


def test_sweep_logs_each_points_record_once_across_reruns_with_trains_tags(tmp_path):
    pytest.importorskip("tensorboard")
    from parasim.commands.sweep import log_curves

    results = [_result(c) for c in (4, 8)]
    log_curves(results, tmp_path, ("jsonl", "tensorboard"))
    log_curves(results, tmp_path, ("jsonl", "tensorboard"))  # a rerun of the finished sweep
    run = tmp_path / "c_tar=8__seed0"
    assert _steps(run / "train_metrics.jsonl") == [1, 2]
    assert _scalars(run / "tensorboard", "critic/rewards/mean") == [(1, pytest.approx(8.0)), (2, pytest.approx(8.1))]
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    expected = {metric_name(k) for k in results[0]["history"][0] if k != "step"} | {
        "train/loss", "parasim/eval/accuracy", "parasim/eval/reward", "parasim/eval_sft/accuracy"}
    assert set(acc.Tags()["scalars"]) == expected
