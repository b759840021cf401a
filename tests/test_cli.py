"""The command lines hold up: one config system behind them, errors on stderr with one exit-code convention, each
case of a bad flag, value, file or path answered with one line that names it."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from parasim.cli import main
from parasim.config import fields as config_fields
from parasim.scoring.batch import TrajectoryBatch
from training import config, rescore
from training.llm import grpo as llm_grpo
from training.llm import runtime
from training.llm import sft as llm_sft

TINY = ["--set", "grpo.steps=2", "--set", "grpo.tasks_per_step=4", "--set", "grpo.group_size=4",
        "--set", "grpo.minibatches=2", "--set", "expert.episodes=64", "--set", "sft.epochs=1",
        "--set", "eval.tasks=8", "--set", "eval.k=2", "--set", "policy.hidden=32"]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"parasim {command}: error: "), err
    return lines[0]


def _parquet(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 3, (64, 7))
    batch = TrajectoryBatch.from_arrays(
        outcome=rng.integers(0, 2, 64).astype(float), tool_counts=counts, tool_calls=counts.sum(1),
        distinct_tools=(counts > 0).sum(1), rounds=rng.integers(1, 6, 64), tokens=rng.uniform(100, 20_000, 64),
        cost_units=rng.uniform(0, 20, 64), usd=rng.uniform(0, 0.1, 64), ended_with_final=np.ones(64, int))
    return rescore.write_parquet(batch, tmp_path / "t.parquet")


# ------------------------------------------------------------------------------------------------ parasim
def test_help_version_and_python_dash_m():
    help_ = subprocess.run([sys.executable, "-m", "parasim", "--help"], capture_output=True, text=True, timeout=60)
    assert help_.returncode == 0 and "``" not in help_.stdout
    assert "calibrated simulator" in help_.stdout and "parasim train --list-options" in help_.stdout
    version = subprocess.run([sys.executable, "-m", "parasim", "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == "parasim 0.1.0"


def test_sweep_bad_grid_value_fails_once_before_any_worker(capsys, tmp_path):
    out = tmp_path / "sweep"
    code, stdout, err = _run(capsys, "sweep", "--grid", "pool=nope", "--out", str(out), "--no-progress")
    line = _one_error(err, "sweep")
    assert code == 2 and stdout == "" and not out.exists()  # nothing started, nothing written
    assert "env.pool = 'nope'" in line and "paramanager_mono" in line


def test_train_errors_go_to_stderr_with_exit_code_2(capsys, tmp_path):
    code, out, err = _run(capsys, "train", "--set", "grpo.learning_rate=7", "--out", str(tmp_path))
    assert code == 2 and out == ""
    assert "grpo.learning_rate = 7.0: must be finite and in [0.0, 1.0]" in _one_error(err, "train")
    code, _, err = _run(capsys, "train", "--set", "grpo.lr=1e-3", "--out", str(tmp_path))
    assert code == 2 and "option 'grpo.lr' was renamed to 'grpo.learning_rate'" in _one_error(err, "train")
    code, _, err = _run(capsys, "train", "--set", "grpo.steps=2.5", "--out", str(tmp_path))  # no silent cast
    assert code == 2 and "grpo.steps = '2.5': cannot parse '2.5' as int" in _one_error(err, "train")


def test_set_twice_is_named(capsys, tmp_path):
    code, _, err = _run(capsys, "train", "--set", "c_tar=4", "--set", "c_tar=8", "--out", str(tmp_path))
    assert code == 2 and "option 'c_tar' is set twice (c_tar=4 and c_tar=8)" in _one_error(err, "train")
    code, _, err = _run(capsys, "sweep", "--set", "c_tar=4", "--set", "reward.c_tar=8", "--out", str(tmp_path))
    assert code == 2 and "set twice" in _one_error(err, "sweep")
    code, _, err = _run(capsys, "train", "--set", "c_tar", "--out", str(tmp_path))
    assert code == 2 and "--set 'c_tar': expected NAME=VALUE" in _one_error(err, "train")


def test_list_options_prints_each_option_once_with_type_default_range_and_help(capsys):
    code, out, _ = _run(capsys, "train", "--list-options")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    names = [r[0] for r in rows if r]
    assert len(names) == len(set(names))
    c_tar = next(line for line in out.splitlines() if line.startswith("c_tar "))
    assert "float" in c_tar and "8.0" in c_tar and "(0.0, inf]" in c_tar and "target cost" in c_tar
    assert not any(line.startswith("reward.c_tar") for line in out.splitlines())
    assert any(line.startswith("grpo.learning_rate ") for line in out.splitlines())
    code, sweep_out, _ = _run(capsys, "sweep", "--list-options")
    assert code == 0 and any(line.startswith("preset ") for line in sweep_out.splitlines())


def test_train_reads_yaml_json_toml_and_names_the_formats(capsys, tmp_path):
    (tmp_path / "t.yaml").write_text("preset: serial\nc_tar: 12\ngrpo:\n  learning_rate: 1.0e-3\n")
    code, out, _ = _run(capsys, "train", "--config", str(tmp_path / "t.yaml"), "--print-config")
    printed = tomllib.loads(out)
    assert code == 0 and printed["env"]["max_parallel"] == 1 and printed["reward"]["c_tar"] == 12.0
    assert printed["grpo"]["learning_rate"] == 1e-3
    (tmp_path / "back.toml").write_text(out)  # --print-config prints what --config reads back to the same config
    assert config.load_config(str(tmp_path / "back.toml")) == config.load_config(str(tmp_path / "t.yaml"))
    (tmp_path / "t.txt").write_text("c_tar = 4\n")
    code, _, err = _run(capsys, "train", "--config", str(tmp_path / "t.txt"), "--print-config")
    assert code == 2 and "unknown format '.txt'; reads YAML (.yaml, .yml), JSON (.json) or TOML" in err
    (tmp_path / "bad.json").write_text('{"c_tar": 4,}')
    code, _, err = _run(capsys, "train", "--config", str(tmp_path / "bad.json"))
    assert code == 2 and "not valid JSON (line 1" in _one_error(err, "train")


def test_sweep_print_config_shows_the_grid_and_the_base_config(capsys):
    code, out, _ = _run(capsys, "sweep", "--grid", "c_tar=4,8", "--seeds", "2", "--set", "grpo.steps=3",
                        "--print-config")
    assert code == 0 and "# parasim sweep: 4 runs (2 points x 2 seeds) over" in out and "--grid c_tar=4,8" in out
    assert tomllib.loads(out)["grpo"]["steps"] == 3


def test_sweep_refuses_an_option_both_gridded_and_set(capsys):
    code, _, err = _run(capsys, "sweep", "--grid", "c_tar=4,8", "--set", "reward.c_tar=8", "--print-config")
    assert code == 2 and "is both a --grid axis and a --set value" in _one_error(err, "sweep")


# ------------------------------------------------------------------------------------------------ rescore
def test_rescore_missing_file_and_unknown_output_format(capsys, tmp_path):
    code, _, err = _run(capsys, "rescore", str(tmp_path / "nope.parquet"))
    assert code == 2 and "nope.parquet: no such file" in _one_error(err, "rescore")
    path = _parquet(tmp_path)
    code, _, err = _run(capsys, "rescore", str(path), "--out", str(tmp_path / "x.xlsx"))
    assert code == 2 and "unknown output format '.xlsx'; writes .json or .csv" in _one_error(err, "rescore")
    assert not (tmp_path / "x.xlsx").exists()


def test_readme_rescore_grid_over_presets_and_c_tar(capsys, tmp_path):
    path = _parquet(tmp_path)
    code, out, _ = _run(capsys, "rescore", str(path), "--grid", "c_tar=4,8,16", "--grid",
                        "reward=paramanager,xrouter", "--out", str(tmp_path / "r.json"))
    assert code == 0 and "not read by xrouter" in out
    rows = json.loads((tmp_path / "r.json").read_text())
    assert [r["config"] for r in rows] == [
        "paramanager (base)", "c_tar=4,reward=paramanager", "reward=xrouter (c_tar: not read by xrouter)",
        "c_tar=8,reward=paramanager", "c_tar=16,reward=paramanager"]
    assert [r["reward_config"]["c_tar"] for r in rows if "paramanager" in r["config"]][1:] == [4.0, 8.0, 16.0]
    code, _, err = _run(capsys, "rescore", str(path), "--grid", "c_tar=4,8", "--grid", "reward=xrouter")
    assert code == 2 and "c_tar is not read by formula xrouter" in _one_error(err, "rescore")


def test_calibrate_and_simulate_log_errors_follow_the_convention(capsys, tmp_path):
    code, _, err = _run(capsys, "calibrate", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "p.json"))
    assert code == 2 and "none.jsonl" in _one_error(err, "calibrate")
    code, _, err = _run(capsys, "calibrate", str(tmp_path / "none.jsonl"), "-o", "p.json", "--nodes", "1")
    assert code == 2 and "--nodes = 1: must be an integer in [2, 64]" in _one_error(err, "calibrate")
    code, _, err = _run(capsys, "simulate-log", "--pool", "nope", "-o", str(tmp_path / "c.jsonl"))
    assert code == 2 and "nope" in _one_error(err, "simulate-log")


# ------------------------------------------------------------------------------------------------ train progress
def test_progress_shows_each_phase_with_an_eta():
    from rich.console import Console

    from training.loggers import Progress

    buf = io.StringIO()
    with Progress(console=Console(file=buf, force_terminal=True, width=120)) as bar:
        for phase, total in (("expert", 1), ("sft", 3), ("grpo", 5)):
            for done in range(total + 1):
                bar.update(phase, done, total)
    text = buf.getvalue()
    assert all(p in text for p in ("expert", "sft", "grpo", "5/5", "eta"))
    quiet = io.StringIO()
    with Progress(console=Console(file=quiet, force_terminal=False)) as bar:  # a log file gets no bars
        bar.update("grpo", 1, 5)
    assert quiet.getvalue() == ""


@pytest.mark.timeout(300)
def test_train_reports_its_phases_in_order(capsys, tmp_path, monkeypatch):
    from training import pipeline

    seen: list[tuple[str, int, int]] = []
    real = pipeline.run_pipeline
    monkeypatch.setattr(pipeline, "run_pipeline", lambda *a, **k: real(
        *a, **{**k, "progress": lambda *e: (seen.append(e), k["progress"](*e))}))
    code, out, _ = _run(capsys, "train", *TINY, "--out", str(tmp_path), "--quiet", "--no-progress")
    assert code == 0 and "accuracy SFT" in out
    phases = list(dict.fromkeys(p for p, _, _ in seen))
    assert phases == ["expert", "sft", "eval sft", "grpo", "eval"]
    assert ("grpo", 2, 2) in seen and ("sft", 1, 1) in seen
    logged = [json.loads(line) for line in (tmp_path / "train_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2]


# ------------------------------------------------------------------------------------------------ LLM trainers
def _llm(capsys, cls, argv: list[str]) -> tuple[int, str, str]:
    module = llm_sft if cls is llm_sft.SFTArgs else llm_grpo
    code = runtime.cli(cls, module.main, f"python -m {module.__name__}", argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_llm_trainer_help_shows_each_fields_help_and_real_default(capsys):
    with pytest.raises(SystemExit) as exc:
        _llm(capsys, llm_sft.SFTArgs, ["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--learning_rate FLOAT AdamW learning rate (after warmup) (float, finite and in [0.0, 1.0]; default: " \
           "1e-05)" in text
    assert "checkpoints and metrics (str; default: 'runs/llm_sft')" in text and "(default: '')" not in text


def test_llm_trainer_paths_and_values_are_one_line_errors(capsys, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("{}\n")
    code, _, err = _llm(capsys, llm_sft.SFTArgs, ["--data", str(data), "--output_dir", str(tmp_path / "o")])
    assert code == 2 and err.strip().endswith("error: model_path: required (an HF model directory: a base model, "
                                              "or a checkpoint's model/)")
    code, _, err = _llm(capsys, llm_sft.SFTArgs, ["--data", str(data), "--model_path", str(tmp_path / "nope"),
                                                  "--output_dir", str(tmp_path / "o")])
    assert code == 2 and f"model_path = '{tmp_path / 'nope'}': no such directory" in err
    code, _, err = _llm(capsys, llm_grpo.GRPOArgs, ["--total_steps", "abc"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "GRPOArgs.total_steps = 'abc': cannot parse 'abc' as int; must be an integer >= 0" in err
    with pytest.raises(SystemExit) as exc:  # no abbreviations: --learning_rat is not --learning_rate
        _llm(capsys, llm_grpo.GRPOArgs, ["--learning_rat", "1e-6"])
    assert exc.value.code == 2 and "unrecognized arguments: --learning_rat" in capsys.readouterr().err


def test_llm_trainer_print_config_round_trips(capsys, tmp_path):
    code, out, _ = _llm(capsys, llm_grpo.GRPOArgs, ["--learning_rate", "1e-3", "--group_size", "4", "--print-config"])
    assert code == 0
    (tmp_path / "g.toml").write_text(out)
    back = runtime.parse_config(llm_grpo.GRPOArgs, ["--config", str(tmp_path / "g.toml")])
    assert back == llm_grpo.GRPOArgs(learning_rate=1e-3, group_size=4)
    (tmp_path / "g.yaml").write_text("learning_rate: 1e-6\nppo_epochs: 2\n")  # YAML reads 1e-6 as a string
    args = runtime.parse_config(llm_grpo.GRPOArgs, ["--config", str(tmp_path / "g.yaml")])
    assert (args.learning_rate, args.ppo_epochs) == (1e-6, 2)
    with pytest.raises(ValueError, match=r"GRPOArgs\.ppo_epochs = 2\.0: must be an integer >= 1"):
        llm_grpo.GRPOArgs(ppo_epochs=2.0)  # no silent cast from Python either


# ------------------------------------------------------------------------------------------------ one loader
def test_one_loader_for_every_config_file(tmp_path):
    from parasim.real.endpoints import EndpointError, load_endpoint_map
    from parasim.real.serve_pool import load_serve_config

    (tmp_path / "e.toml").write_text('[endpoints.m]\nbase_url = "http://127.0.0.1:9"\nretries = 3\n')
    assert load_endpoint_map(tmp_path / "e.toml")["m"].retries == 3
    (tmp_path / "s.ini").write_text("")
    with pytest.raises(EndpointError, match=r"unknown format '\.ini'; reads YAML"):
        load_serve_config(tmp_path / "s.ini")
    (tmp_path / "e.json").write_text('{"m": {"base_url": "http://x", "retries": 2.0}}')
    with pytest.raises(EndpointError, match=r"endpoints\.m\.retries = 2\.0: must be an integer in \[0, 20\]"):
        load_endpoint_map(tmp_path / "e.json")
    with pytest.raises(config_fields.ConfigError, match=r"x\.toml'?: no such file"):
        config_fields.load_file(tmp_path / "x.toml")
