"""scripts/sim_to_real.py's analysis: predicted against measured with bootstrap intervals, and the ranking check.

Built on evaluation folders of known episodes (no servers): a manager whose real episodes are its simulated ones
has gaps of 0 inside their intervals; a real accuracy 0.3 below is outside; the ranking compares the sign of the
simulated difference with the measured one, and calls a measured difference whose interval holds 0 unresolved.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sim_to_real as s2r


def _episodes(rng: np.random.Generator, n: int, acc: float) -> dict[str, np.ndarray]:
    rounds = rng.integers(1, 4, n).astype(float)
    counts = rng.integers(0, 3, (n, 6)).astype(float)
    return {"outcome": (rng.random(n) < acc).astype(float), "tokens": rng.gamma(2.0, 500.0, n),
            "cost_units": rng.gamma(2.0, 1.0, n), "usd": rng.gamma(2.0, 1e-4, n), "latency_s": rng.gamma(2.0, 1.0, n),
            "rounds": rounds, "tool_calls": counts.sum(1), "tool_counts": counts,
            "benchmark": rng.integers(7, 9, n)}


def _folder(out: Path, name: str, sim: dict[str, np.ndarray], real: dict[str, np.ndarray]) -> None:
    folder = out / "eval" / name.replace("=", "_")
    folder.mkdir(parents=True)
    arrays = {f"sim_{k}": v for k, v in sim.items()} | {f"real_{k}": v for k, v in real.items()}
    np.savez(folder / "episodes.npz", **arrays)
    dist = {"model_dist": {"a": 0.5, "b": 0.5}}
    (folder / "summary.json").write_text(json.dumps({"sim": dist, "real": dist, "real_wall_s": 1.0}))


def test_gaps_intervals_and_ranking(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    same = _episodes(rng, 400, 0.6)
    _folder(tmp_path, "default", same, same)
    _folder(tmp_path, "c_tar=2", _episodes(rng, 2000, 0.5), _episodes(rng, 400, 0.2))  # real 0.3 below
    _folder(tmp_path, "serial", _episodes(rng, 2000, 0.3), _episodes(rng, 400, 0.9))  # the order flips
    real_mono = dict(same)
    _folder(tmp_path, "mono", _episodes(rng, 2000, 0.59), real_mono)  # no measured difference to default
    loop = s2r.LoopConfig(bootstrap=300)
    result = s2r.analyse(loop, {"out": tmp_path}, ["default", "c_tar=2", "serial", "mono"])
    default = result["managers"]["default"]["figures"]
    for key in ("accuracy", "tokens", "calls_per_round", "share:0", "bench:7"):
        row = default[key]
        assert row["gap"] == pytest.approx(0.0) and row["within"], key
        assert row["real_ci"][0] <= row["real"] <= row["real_ci"][1]
    low = result["managers"]["c_tar=2"]["figures"]["accuracy"]
    assert low["gap"] == pytest.approx(low["real"] - low["sim"]) and low["gap"] < -0.2 and not low["within"]
    ranks = {tuple(r["pair"]): r for r in result["ranking"]}
    assert ranks["default", "c_tar=2"]["agree"] is True  # default above c_tar=2 in both
    assert ranks["default", "serial"]["agree"] is False  # simulated above, measured below
    assert ranks["default", "mono"]["agree"] is None  # the same real episodes: unresolved
    text = s2r.report_markdown(result, [f"tool{t}" for t in range(6)], [f"b{b}" for b in range(11)])
    assert "| c_tar=2 | accuracy |" in text and "| default | serial |" in text and "not resolved" in text
    s2r.plot(result, tmp_path / "gap.png")
    assert (tmp_path / "gap.png").stat().st_size > 1000


def test_update_page_replaces_only_the_generated_section(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nprose\n\n{s2r.BEGIN}\nold\n{s2r.END}\n\nafter\n")
    s2r.update_page(page, "new table\n")
    text = page.read_text()
    assert "old" not in text and "new table" in text and text.startswith("# Title") and text.endswith("after\n")
    (tmp_path / "bare.md").write_text("no markers\n")
    with pytest.raises(SystemExit, match="no <!-- sim_to_real:begin -->"):
        s2r.update_page(tmp_path / "bare.md", "x")
