"""Pool overrides (``parasim.pools.overrides``): paths into the pool JSON, the parser's errors, the sweep keys
``pool.<path>``, the env receiving the overridden pool, and a sweep over a pool parameter end to end."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from parasim.calibration.fitted_structure import load_fitted_structure
from parasim.calibration.simulate import simulated_calls
from parasim.pools.overrides import apply_set, env_pool, format_set, load_with_set, parse_set
from parasim.pools.pool import PoolError, accuracy_under_cap, load_pool, read_pool_file
from parasim.protocol.schema import Status, Tool
from parasim.scoring.rewards import PRESETS
from training import config, sweep
from training.population import population_key
from training.result_schema import untimed
from training.rollout import make_envs

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

GPT_OSS = 2  # row of GPT-OSS-20B in the paramanager pool
SHIPPED_TAU = load_fitted_structure().sd  # every paramanager model's interaction sd (the fitted structure)


def _arrays_equal(a, b) -> bool:
    """Two PoolSpecs' tables equal, field by field (sources and names aside)."""
    for f in dataclasses.fields(a):
        if f.name in ("sources", "name"):
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        same = np.array_equal(x, y, equal_nan=True) if isinstance(x, np.ndarray) else x == y
        if not same:
            return False
    return True


def test_an_override_moves_the_parameter_and_a_simulated_statistic():
    base = load_pool("paramanager")
    slow = load_with_set("paramanager", "models.GPT-OSS-20B.latency.concurrency_slope=1")
    assert slow.lat_slope[Tool.STANDARD_REASONER, GPT_OSS] == 1.0
    assert np.array_equal(np.delete(slow.lat_slope, GPT_OSS, axis=1), np.delete(base.lat_slope, GPT_OSS, axis=1))
    kw = dict(n_tasks=300, calls_per_task=4, calls_per_round=4, tools=["standard_reasoner"], models=[GPT_OSS], seed=3)
    a, b = simulated_calls(base, **kw), simulated_calls(slow, **kw)
    assert b["latency_s"].mean() > 1.5 * a["latency_s"].mean()
    capped = load_with_set("paramanager", "protocol.max_output_tokens=4096")
    trunc = [np.mean(simulated_calls(p, n_tasks=300, calls_per_task=2, seed=1)["status"] == Status.TRUNCATED)
             for p in (base, capped)]
    assert trunc[1] > trunc[0] + 0.1


def test_group_shorthand_globs_and_specific_models_apply_broad_first():
    spec = load_with_set("paramanager", "models.GPT-OSS-20B.interaction.sd=2;interaction.sd=0.5")
    assert spec.tau.tolist() == [0.5, 0.5, 2.0, load_pool("paramanager").tau[-1]]  # the manager keeps its own
    qwen = load_with_set("paramanager", "models.Qwen3*.errors.kappa=0.3")
    assert qwen.kappa[:2].tolist() == [0.3, 0.3] and qwen.kappa[2] == load_pool("paramanager").kappa[2]
    review = load_with_set("paramanager", "review.sensitivity=0.4;manager.anchoring.rho=0.9")
    assert (review.sens[:3] == 0.4).all() and review.rho[-1] == 0.9
    bonus = load_with_set("paramanager", "tools.critical_reviewer.bonus.math=0.5;protocol.max_output_tokens=16384")
    assert bonus.bonus[Tool.CRITICAL_REVIEWER].tolist() == [0.5, 0.0, 0.0, 0.0] and bonus.max_output_tokens == 16384
    assert bonus.sources["tools.critical_reviewer.bonus"] == "assumed" and bonus.sources["protocol"] == "assumed"
    assert load_with_set("paramanager", "models.0.interaction.sd=0").tau[0] == 0.0


def test_the_same_value_gives_the_shipped_pool_and_tau_keeps_the_accuracy_targets():
    base = load_pool("paramanager")
    assert _arrays_equal(load_with_set("paramanager", f"interaction.sd={SHIPPED_TAU!r}"), base)
    raw, _ = read_pool_file("parasim/pools/files/paramanager.json")
    assert apply_set(raw, {"interaction.sd": "0.2"}) != raw and raw == read_pool_file(
        "parasim/pools/files/paramanager.json")[0]  # a copy: the parsed file is left as read
    for tau in ("0", "2"):
        spec = load_with_set("paramanager", f"interaction.sd={tau}")
        assert not np.array_equal(spec.skill, base.skill)  # skills are re-solved...
        has = ~np.isnan(spec.accuracy_target)
        hit = accuracy_under_cap(spec, spec.accuracy_cap)  # ...so a direct call still meets every target
        assert np.abs(hit[has] - spec.accuracy_target[has]).max() < 1e-3


@pytest.mark.parametrize("pool_set, match", [
    ("interaction.sdd=1", r"pool\.interaction\.sdd: .*interaction has no key 'sdd'; there: \['family', "
                          r"'family_share', 'kind', 'kind_share', 'sd'\]; did you mean 'sd'\?"),
    ("interaction.sd=11", r"models\[0\]\.interaction\.sd: expected a number in \[0, 10\], got 11"),
    ("protocol.max_output_tokens=lots", r"protocol\.max_output_tokens: expected a number in \[1, 1e\+07\]"),
    ("models.Nope.anchoring.rho=0.1", r"no agent model 'Nope' in this pool; models: \['Qwen3-30B"),
    ("tools.hammer.bonus.math=1", r"tools has no key 'hammer'; there: \['code_reasoner'"),
    ("latency=3", r"an object \(\['concurrency_slope', 'log_sd', 'tokens_per_s', 'ttft_s'\]\)"),
    ("anchoring.rho.x=1", r"anchoring\.rho is a value, not an object"),
    ("errors.source=Q30I", "a source is not a parameter"),
    ("interaction.sd=NaN", "not a finite number"),
    ("interaction.sd", "expected PATH=VALUE"),
    ("interaction.sd=1;interaction.sd=2", "set twice"),
    ("a..b=1", "dot-separated keys"),
])
def test_bad_paths_and_values_are_refused_naming_them(pool_set, match):
    with pytest.raises(PoolError, match=match):
        load_with_set("paramanager", pool_set)


def test_optional_keys_the_schema_defines_may_be_added():
    raw, _ = read_pool_file("parasim/pools/files/paramanager.json")
    del raw["models"][1]["interaction"], raw["models"][1]["errors"]["affinity"]
    out = apply_set(raw, {"interaction.sd": "0.3", "errors.affinity": "0.1"})
    assert out["models"][1]["interaction"] == {"sd": 0.3, "source": "assumed"}
    assert out["models"][1]["errors"]["affinity"] == 0.1


def test_config_keys_map_to_one_canonical_override_set():
    a = config.make_config("default", {"pool.interaction.sd": "0.5", "pool.protocol.max_output_tokens": "16384"})
    b = config.make_config("default", {"env.pool_set": "protocol.max_output_tokens=16384 ; interaction.sd=0.5"})
    assert a.env.pool_set == b.env.pool_set == "interaction.sd=0.5;protocol.max_output_tokens=16384"
    assert population_key(a) == population_key(b) != population_key(config.make_config("default"))
    merged = config.make_config("default", {"pool.interaction.sd": "2",
                                            "env.pool_set": "interaction.sd=1;errors.kappa=0.5"})
    assert merged.env.pool_set == "errors.kappa=0.5;interaction.sd=2"  # a pool.<path> key wins over the set it adds to
    assert config.from_dict(json.loads(json.dumps(a.to_dict()))) == a
    assert "pool_set = \"interaction.sd=0.5;protocol.max_output_tokens=16384\"" in config.config_toml(a)
    assert format_set(parse_set("models.X.a.b=1;a.b=2;models.*.c.d=3")) == "a.b=2;models.*.c.d=3;models.X.a.b=1"
    with pytest.raises(ValueError, match=r"no agent model 'GPT-OSS-20B' in this pool"):
        config.make_config("mono", {"pool.models.GPT-OSS-20B.latency.ttft_s": "1"})
    with pytest.raises(ValueError, match="set twice"):
        config.parse_sets(["pool.interaction.sd=1", "pool.interaction.sd=2"])
    with pytest.raises(ValueError, match="two axes"):
        sweep.parse_grid(["pool.interaction.sd=1,2", "pool.interaction.sd=3"])
    assert len(sweep.parse_grid(["pool.interaction.sd=1,2", "pool.errors.kappa=0.5,0.6"])) == 2
    assert "pool.PATH" in config.options_table()


def test_the_env_gets_the_overridden_pool():
    cfg = config.make_config("default", {"pool.interaction.sd": "0.25"})
    assert env_pool(cfg.env.pool, "") == "paramanager"
    envs = make_envs(cfg.env, 2, PRESETS["paramanager"])
    assert envs.unwrapped.sim.pool.tau[:3].tolist() == [0.25] * 3
    envs.close()


def _play(env_cfg) -> np.ndarray:
    """Rewards and observations of 8 lanes under a seeded random masked policy, 6 steps."""
    envs = make_envs(env_cfg, 8, PRESETS["paramanager"])
    obs, _ = envs.reset(seed=11)
    cuts = np.cumsum(envs.single_action_space.nvec)[:-1]
    rng = np.random.default_rng(0)
    out = []
    for _ in range(6):
        act = np.array([[rng.choice(np.flatnonzero(seg)) for seg in np.split(row, cuts)] for row in obs["action_mask"]])
        obs, reward, _, _, _ = envs.step(act)
        out += [reward.ravel()] + [np.asarray(obs[k], float).ravel() for k in sorted(obs)]
    envs.close()
    return np.concatenate(out)


def test_same_value_same_trajectories_and_a_changed_value_changes_them():
    base = config.make_config("default").env
    same = config.make_config("default", {"pool.interaction.sd": repr(SHIPPED_TAU)}).env
    other = config.make_config("default", {"pool.interaction.sd": "3"}).env
    assert np.array_equal(_play(base), _play(same))  # the override path itself changes nothing
    assert np.array_equal(_play(other), _play(other))
    assert not np.array_equal(_play(base), _play(other))


def _untimed(results: list[dict]) -> list[dict]:
    return [untimed(r) for r in results]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_sweep_over_a_pool_parameter_runs_end_to_end_on_both_backends(tmp_path, capsys):
    """``parasim sweep --grid pool.<path>=a,b`` trains each point on its own pool: the two points are two populations,
    the overridden parameter moves what it drives (latency), and population and per-point backends agree."""
    from test_sweep import TINY

    from parasim.cli import main as cli_main

    grid = "pool.latency.concurrency_slope=0,2"
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    args = ["sweep", "--grid", grid, "--seeds", "1", "--workers", "2", "--no-progress", *sets]
    assert cli_main([*args, "--out", str(tmp_path / "pop")]) == 0
    assert cli_main([*args, "--backend", "local", "--out", str(tmp_path / "local")]) == 0
    pop, local = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("pop", "local"))
    assert [r["label"] for r in pop] == ["pool.latency.concurrency_slope=0", "pool.latency.concurrency_slope=2"]
    pool_sets = [r["config"]["env"]["pool_set"] for r in pop]
    assert pool_sets == ["latency.concurrency_slope=0", "latency.concurrency_slope=2"]
    assert _untimed(pop) == _untimed(local)  # the same numbers on either backend
    assert pop[1]["latency_s"] > pop[0]["latency_s"]
    points = sweep.expand(sweep.parse_grid([grid]), [0], fixed=TINY)
    assert len({population_key(p.config()) for p in points}) == 2
    # the API's points are the CLI's: the same configs (so the same results; seeds replay, tested elsewhere)
    assert [p.config().to_dict() for p in points] == [r["config"] for r in pop]
    assert "pool.latency.concurrency_slope=2" in capsys.readouterr().out
