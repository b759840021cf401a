"""Grids and configs are checked before any work (issue 24, findings 5 and 10).

A sweep whose points repeat a config, or whose seeds come two ways, is refused in one line (it reported one run
counted twice, or silently let --seeds win); a bad pool or task file is a config error at --print-config, not a
traceback in every worker.
"""
from __future__ import annotations

import pytest

from parasim import cli


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.mark.parametrize(("argv", "needle"), [
    (["--grid", "c_tar=4,4", "--seeds", "1"], "points 'c_tar=4' and 'c_tar=4' are the same config"),
    (["--grid", "c_tar=4,4.0"], "points 'c_tar=4' and 'c_tar=4.0' are the same config"),
    (["--grid", "seed=1,2", "--seeds", "2"], "--grid seed=1,2 conflicts with --seeds 2"),
    (["--grid", "c_tar=4", "--set", "seed=3"], "option 'seed': a point's seed comes from the seeds"),
    (["--grid", "seed=1,1"], "seeds [1, 1]: a seed is repeated"),
])
def test_sweep_refuses_repeated_points_and_conflicting_seeds(capsys, argv, needle):
    code, _, err = _run(capsys, "sweep", *argv, "--print-config")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_a_seed_axis_alone_gives_the_seeds(capsys):
    code, out, _ = _run(capsys, "sweep", "--grid", "seed=5,7", "--grid", "c_tar=4,8", "--print-config")
    assert code == 0 and "4 runs (2 points x 2 seeds)" in out

    from training import sweep

    axes, seeds = sweep.seed_axis(sweep.parse_grid(["seed=5,7", "c_tar=4"]), None)
    assert seeds == [5, 7]
    assert sorted({p.seed for p in sweep.expand(axes, seeds)}) == [5, 7]


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_bad_pool_or_suite_file_is_refused_before_the_run(capsys, tmp_path, command):
    """Finding 10: --print-config said OK, then train died with a traceback and sweep's points all failed."""
    pool = tmp_path / "pool.json"
    pool.write_text('{"name": 1}')
    code, _, err = _run(capsys, command, "--set", f"env.pool={pool}", "--print-config")
    assert code == 2 and f"env.pool = {str(pool)!r}: must be a shipped pool" in err and "name: expected" in err
    code, _, err = _run(capsys, command, "--set", "suite=/etc/passwd", "--print-config")
    assert code == 2 and "env.suite = '/etc/passwd': not a valid JSONL task file: /etc/passwd:1: not valid JSON" in err
