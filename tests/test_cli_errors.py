"""One CLI error path for every command (issue 24, findings 11, 12, 14; issue 23, CLI polish).

Every output path is checked before the work that fills it, a write that fails (a full disk) is one line, Ctrl-C is
the ``interrupted`` line, a closed stdout ends quietly, a subcommand's typo gets that command's usage and the closest
option, and a fit that stopped abnormally writes nothing.
"""
from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest

from parasim import cli


def _run(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def _blocked(tmp_path: Path) -> Path:
    """A path whose folder cannot exist: its parent is a file."""
    (tmp_path / "file").write_text("")
    return tmp_path / "file" / "out.json"


def test_subcommand_typo_gets_its_usage_and_a_suggestion(capsys):
    code, err = _run(capsys, "sweep", "--gird", "c_tar=4")
    assert code == 2
    assert "usage: parasim sweep" in err and "did you mean --grid?" in err


def test_closed_stdout_ends_quietly(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "parasim", "sweep", "--list-options"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # `| head` that has read what it wanted
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == cli.BROKEN_PIPE
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_missing_calibrate_file_is_one_plain_line(capsys, tmp_path):
    code, err = _run(capsys, "calibrate", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "p.json"))
    assert code == 2
    missing = tmp_path / "nope.jsonl"
    assert err.strip() == f"parasim calibrate: error: {missing}: cannot read (No such file or directory)"


@pytest.mark.parametrize(("argv", "flag"), [
    (["calibrate", "{calls}", "-o", "{bad}"], "-o"),
    (["calibrate", "{calls}", "-o", "{ok}", "--report", "{bad}"], "--report"),
    (["simulate-log", "--calls", "20", "-o", "{bad}"], "-o"),
    (["rescore", "{calls}", "--out", "{bad}"], "--out"),
    (["validate-sim", "{calls}", "--out", "{bad}"], "--out"),
])
def test_unwritable_outputs_are_refused_before_the_work(capsys, tmp_path, argv, flag):
    """Finding 11: the output is checked first (calibrate's fit was lost to a traceback after it ran)."""
    bad = _blocked(tmp_path)
    calls = tmp_path / "calls.jsonl"
    calls.write_text("{}\n")  # not a valid log: the command must fail on the output before it reads this
    out_dir = bad.parent / "validate_sim" if argv[0] == "validate-sim" else bad
    fields = {"calls": str(calls), "bad": str(out_dir), "ok": str(tmp_path / "ok.json")}
    code, err = _run(capsys, *(a.format(**fields) for a in argv))
    assert code == 2
    assert f"error: {flag} " in err and "cannot write there (" in err
    assert len(err.strip().splitlines()) == 1


def test_disk_full_is_one_line(capsys, tmp_path, monkeypatch):
    """Finding 11: ENOSPC while writing an output is one line naming the file, exit 1."""
    import parasim.config.writes

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(parasim.config.writes, "atomic_write_bytes", full)
    out = tmp_path / "calls.jsonl"
    code, err = _run(capsys, "simulate-log", "--calls", "20", "-o", str(out))
    assert code == 1
    assert err.strip() == f"parasim simulate-log: error: -o {str(out)!r}: cannot write (No space left on device)"


def test_an_oserror_escaping_any_command_is_one_line(capsys, monkeypatch):
    import parasim.commands.rescore as rescore_cmd

    def gone(args):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/run/x")

    monkeypatch.setattr(rescore_cmd, "run", gone)
    code, err = _run(capsys, "rescore", "t.parquet")
    assert (code, err.strip()) == (1, "parasim rescore: error: /run/x: No such file or directory")


def test_ctrl_c_on_train_is_one_line(capsys, tmp_path, monkeypatch):
    """Finding 12: Ctrl-C on ``parasim train`` gave a 40-line traceback."""
    import training.pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(training.pipeline, "run_pipeline", interrupted)
    code, err = _run(capsys, "train", "--out", str(tmp_path / "run"), "--loggers", "", "--no-progress")
    assert code == 130
    assert err.strip().startswith("parasim train: error: interrupted")


def test_simulate_log_refuses_a_negative_seed(capsys, tmp_path):
    code, err = _run(capsys, "simulate-log", "--seed", "-1", "--calls", "10", "-o", str(tmp_path / "c.jsonl"))
    assert code == 2 and "--seed: expected an integer in [0, " in err and "got -1" in err
    assert not (tmp_path / "c.jsonl").exists()


def test_a_fit_that_stopped_abnormally_is_an_error_and_writes_nothing(capsys, tmp_path, monkeypatch):
    """Finding 2: an ABNORMAL optimizer stop (NaN standard errors) exited 0 with the base pool written as a fit."""
    import numpy as np

    import parasim.calibration as calibration
    from parasim.calibration.fit import Calibration, FitError
    from parasim.calibration.mle import Estimate
    from parasim.calibration.params import Layout

    bad = Estimate(Layout([]), np.zeros(1), ["skill[m0]"], np.zeros(1), np.array([np.nan]), -5e25, False,
                   "ABNORMAL: ", np.eye(1), status=2)
    with pytest.raises(FitError, match=r"the fit of skill failed: the optimizer stopped abnormally \(ABNORMAL"):
        Calibration({}, None, (), [], [], {}, {})._add(bad)
    nan_loglik = Estimate(Layout([]), np.zeros(1), ["tau"], np.zeros(1), np.ones(1), np.nan, True, "ok", np.eye(1))
    with pytest.raises(FitError, match="the log-likelihood is not finite"):
        Calibration({}, None, (), [], [], {}, {})._add(nan_loglik)
    limit = Estimate(Layout([]), np.zeros(1), ["tau"], np.zeros(1), np.array([np.nan]), -10.0, False,
                     "STOP: TOTAL NO. OF F,G EVALUATIONS EXCEEDS LIMIT; no standard errors", None, status=1)
    Calibration({}, None, (), [], [], {}, {})._add(limit)  # a direction the log does not identify: a warning
    nan_se = Estimate(Layout([]), np.zeros(1), ["tau"], np.zeros(1), np.array([np.nan]), -10.0, True, "ok", np.eye(1))
    with pytest.raises(FitError, match="a standard error is not finite"):
        Calibration({}, None, (), [], [], {}, {})._add(nan_se)

    def failing(table, base, nodes):
        Calibration({}, None, (), [], [], {}, {})._add(bad)

    monkeypatch.setattr(calibration, "calibrate", failing)
    calls = tmp_path / "calls.jsonl"
    assert cli.main(["simulate-log", "--calls", "50", "-o", str(calls)]) == 0
    out, report = tmp_path / "pool.json", tmp_path / "report.json"
    code, err = _run(capsys, "calibrate", str(calls), "-o", str(out), "--report", str(report))
    assert code == 1 and "the optimizer stopped abnormally" in err
    assert not out.exists() and not report.exists()
    json.loads(calls.read_text().splitlines()[0])


def test_disk_full_during_a_sweep_is_one_line(capsys, tmp_path, monkeypatch):
    """Finding 11: a full disk while the sweep stores a finished point printed four stacked tracebacks."""
    from training import store, sweep

    def one_result(todo, workers):
        yield {"key": todo[0].key, "label": todo[0].label, "seed": 0, "accuracy": 0.5}

    def full(self, result):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "store" / "x.json"))

    monkeypatch.setattr(sweep, "run_local", one_result)
    monkeypatch.setattr(store.ResultsStore, "put", full)
    code, err = _run(capsys, "sweep", "--grid", "c_tar=4", "--seeds", "1", "--backend", "local", "--out",
                     str(tmp_path / "out"), "--no-progress")
    assert code == 1
    assert err.strip() == f"parasim sweep: error: {tmp_path / 'out' / 'store' / 'x.json'}: No space left on device"
