"""Pool shift: model and tool descriptors in the observation, the descriptor-conditioned model head that acts on a
pool with any number of models, and ``eval.pool`` (a policy trained on one pool evaluated on another)."""
from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import parasim  # noqa: F401  (registers ParaOrch-v0)
from envs.action_masks import tuple_mask
from parasim.config.fields import ConfigError, validate
from parasim.pools.descriptors import MODEL_FEATURES, TOOL_FEATURES, pool_descriptors
from parasim.pools.pool import DEFAULT_CONTEXT_TOKENS, PoolError, load_pool
from parasim.protocol.engine import EpisodeEngineBase, EpisodeOutcome, TaskView
from parasim.tasks.suites import BENCHMARKS, load_suite
from parasim.tools.spec import TOOL_SPEC_DIR
from training import report
from training.config import make_config
from training.evaluate import check_eval_pool, evaluate
from training.pipeline import run_pipeline
from training.policy import ManagerPolicy, PolicyConfig, PolicyStack
from training.population import build_policy, run_population
from training.rollout import collect, make_envs

POOLS = ("paramanager", "paramanager_mono", "toolorchestra")
POOL_FILE = Path(__file__).resolve().parents[1] / "parasim" / "pools" / "files" / "paramanager.json"
TINY = {"grpo.steps": "3", "grpo.tasks_per_step": "6", "grpo.group_size": "4", "grpo.minibatches": "2",
        "grpo.checkpoint_every": "2", "expert.episodes": "96", "sft.epochs": "2", "sft.batch_size": "64",
        "eval.tasks": "12", "eval.k": "2", "policy.hidden": "24", "policy.model_head": "descriptor"}
TIMING = {"sft_s", "grpo_s", "eval_s", "env_steps_per_s"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _random_action(rng: np.random.Generator, obs: dict, nvec: np.ndarray) -> np.ndarray:
    """A legal action drawn uniformly per dimension under the observation's mask."""
    masks = tuple_mask(obs["action_mask"], nvec)
    return np.array([rng.choice(np.flatnonzero(m)) for m in masks], np.int64)


# --- descriptors in the observation ----------------------------------------------------------------------------

def test_descriptors_are_off_by_default_and_add_two_constant_read_only_keys():
    plain = gym.make("ParaOrch-v0", pool="toolorchestra")
    obs, _ = plain.reset(seed=0)
    assert "models" not in obs and "tools" not in obs and "models" not in plain.observation_space.spaces
    env = gym.make("ParaOrch-v0", pool="toolorchestra", descriptors=True)
    obs, _ = env.reset(seed=0)
    space = env.observation_space
    assert space["models"].shape == (8, len(MODEL_FEATURES)) and space["tools"].shape == (7, len(TOOL_FEATURES))
    assert {k: space[k] for k in plain.observation_space.spaces} == dict(plain.observation_space.spaces)
    first = obs["models"]
    assert first.dtype == np.float32 and not env.unwrapped.descriptors.models.flags.writeable
    obs, *_ = env.step(_random_action(np.random.default_rng(0), obs, env.action_space.nvec))
    assert obs["models"] is not first  # a copy, as every key: a caller may keep or change it
    np.testing.assert_array_equal(obs["models"], env.unwrapped.descriptors.models)
    vec = gym.make_vec("ParaOrch-v0", num_envs=4, vectorization_mode="vector_entry_point", descriptors=True)
    lanes, _ = vec.reset(seed=0)
    assert lanes["models"].shape == (4, 3, len(MODEL_FEATURES)) and not lanes["models"].flags.writeable
    assert lanes["models"].strides[0] == 0  # one broadcast of the pool's rows: no copy per step at any lane count
    with pytest.raises(TypeError, match="descriptors: expected True or False, got int 1"):
        gym.make("ParaOrch-v0", descriptors=1)
    with pytest.raises(TypeError, match="descriptors: expected True or False"):
        gym.make_vec("ParaOrch-v0", num_envs=2, vectorization_mode="vector_entry_point", descriptors="yes")


@pytest.mark.parametrize("pool", POOLS)
def test_observations_with_descriptors_stay_in_their_space(pool):
    env = gym.make("ParaOrch-v0", pool=pool, descriptors=True, max_parallel=3)
    rng = np.random.default_rng(1)
    for episode in range(6):
        obs, _ = env.reset(seed=episode)
        done = False
        while not done:
            assert env.observation_space.contains(obs)
            obs, _, term, trunc, _ = env.step(_random_action(rng, obs, env.action_space.nvec))
            done = term or trunc
        assert env.observation_space.contains(obs)


def test_descriptor_bounds_hold_at_the_parsers_extremes():
    raw = json.loads(POOL_FILE.read_text())
    low, high = copy.deepcopy(raw["models"][0]), copy.deepcopy(raw["models"][1])
    low["price"].update(input_per_mtok=0, output_per_mtok=0)
    low["latency"].update(tokens_per_s=0.1, ttft_s=0)
    low["context"] = {"window_tokens": 1024, "source": "assumed"}
    high["price"].update(input_per_mtok=1000, output_per_mtok=1000)
    high["latency"].update(tokens_per_s=1e5, ttft_s=600)
    high["context"] = {"window_tokens": 100_000_000, "source": "assumed"}
    raw["models"] = [low, high]
    raw["tools"]["search"]["cost"].update(units=1000, usd_per_call=100, usd_per_s=10)
    pool = load_pool(raw)
    d = pool_descriptors(pool, load_suite("paramanager"))
    space = gym.make("ParaOrch-v0", pool=pool, descriptors=True).observation_space
    assert space["models"].contains(d.models) and space["tools"].contains(d.tools)
    assert d.models.min() >= 0 and d.models.max() <= 1 and d.tools.max() <= 1
    assert (d.models[1, :4] > d.models[0, :4]).all()  # price, speed and first-token time ordered as the figures


def test_the_vector_lane_equals_the_single_env_with_descriptors():
    vec = gym.make_vec("ParaOrch-v0", num_envs=3, vectorization_mode="vector_entry_point", descriptors=True,
                       pool="toolorchestra")
    single = gym.make("ParaOrch-v0", descriptors=True, pool="toolorchestra")
    assert vec.single_observation_space == single.observation_space
    obs_v, _ = vec.reset(seed=10)
    obs_s, _ = single.reset(seed=11)  # lane 1
    rng = np.random.default_rng(2)
    for _ in range(40):
        for k in obs_s:
            np.testing.assert_array_equal(obs_v[k][1], obs_s[k], err_msg=k)
        assert vec.observation_space.contains(obs_v)
        acts = np.stack([_random_action(rng, {k: v[i] for k, v in obs_v.items()}, single.action_space.nvec)
                         for i in range(3)])
        obs_v, _, term_v, _, _ = vec.step(acts)
        obs_s, _, term_s, _, _ = single.step(acts[1])
        assert term_v[1] == term_s
        if term_s:
            break
    assert term_s, "the episode did not end in 40 steps"


def test_descriptor_values_are_the_pools_figures():
    pool, suite = load_pool("paramanager"), load_suite("paramanager")
    d = pool_descriptors(pool, suite)
    col = {f: i for i, f in enumerate(MODEL_FEATURES)}
    unsquash = lambda v, ref: ref * v / (1 - v)  # noqa: E731
    m = 2  # GPT-OSS-20B
    assert unsquash(float(d.models[m, col["price_in"]]), 1.0) == pytest.approx(pool.price_in[0, m] * 1e6, rel=1e-5)
    assert unsquash(float(d.models[m, col["decode_speed"]]), 100.0) == pytest.approx(1 / pool.lat_per_tok[0, m],
                                                                                       rel=1e-5)
    for dom in ("math", "science", "knowledge", "code"):
        benches = [i for i in np.unique(suite.benchmark) if BENCHMARKS[i].domain.name.lower() == dom]
        figures = [pool.accuracy_target[m, b] for b in benches if not math.isnan(pool.accuracy_target[m, b])]
        assert d.models[m, col[f"has_acc_{dom}"]] == float(bool(figures))
        assert d.models[m, col[f"acc_{dom}"]] == pytest.approx(np.mean(figures) if figures else 0.0, abs=1e-6)
    windows = pool.context_window[:pool.num_models]  # the cards' windows: 262,144 (Qwen3 2507), 131,072 (gpt-oss)
    assert windows.tolist() == [262_144, 262_144, 131_072]
    assert d.models[:, col["context"]] == pytest.approx(windows / (windows + DEFAULT_CONTEXT_TOKENS))
    math_only = pool_descriptors(pool, load_suite("math")).models
    assert (math_only[:, col["has_acc_science"]] == 0).all() and (math_only[:, col["acc_code"]] == 0).all()
    agent = d.tools[:, TOOL_FEATURES.index("agent")]
    assert agent.tolist() == [1, 1, 1, 1, 1, 0, 0] and (d.tools[:, 1] == 1 - agent).all()
    # the real-tools env's engine ids: the pool's rows in the engine's order; an id the pool lacks is refused
    names = list(pool.model_names[:-1])
    np.testing.assert_array_equal(pool_descriptors(pool, suite, names[::-1]).models, d.models[::-1])
    with pytest.raises(ValueError, match=r"model id\(s\) \['gpt-x'\] are not models of pool"):
        pool_descriptors(pool, suite, ["gpt-x"])


class _Engine(EpisodeEngineBase):
    """A real-tools engine whose calls never run: what the env's spaces and descriptors read (its model ids)."""

    def __init__(self, model_names: tuple[str, ...]) -> None:
        self.model_names = model_names

    def reset(self, seed: Any = None, options: Any = None) -> TaskView:
        raise AssertionError("not reached")

    def run_round(self, calls: Any, **_: Any) -> list:
        raise AssertionError("not reached")

    def finish(self, manager_answer: Any = None, lead: str | None = None) -> EpisodeOutcome:
        raise AssertionError("not reached")


def test_the_real_tools_env_describes_its_engines_models_by_their_pool_entries():
    pool = load_pool("toolorchestra")
    ids = ("Qwen3-8B", "GPT-5")
    env = gym.make("ParaOrch-v0", tools="real", engine=_Engine(ids), pool="toolorchestra", descriptors=True)
    d = env.unwrapped.descriptors
    np.testing.assert_array_equal(d.models, pool_descriptors(pool, load_suite("paramanager")).models[[3, 0]])
    assert env.observation_space["models"].shape == (2, len(MODEL_FEATURES))
    assert env.observation_space["tools"].contains(d.tools)
    with pytest.raises(ValueError, match=r"model id\(s\) \['my-model'\] are not models of pool 'toolorchestra'"):
        gym.make("ParaOrch-v0", tools="real", engine=_Engine(("my-model",)), pool="toolorchestra", descriptors=True)
    gym.make("ParaOrch-v0", tools="real", engine=_Engine(("my-model",)), pool="toolorchestra")  # off: not needed


def test_the_optional_context_group_is_parsed_and_range_checked():
    raw = json.loads(POOL_FILE.read_text())
    raw["models"][0]["context"] = {"window_tokens": 65_536, "source": "assumed"}
    del raw["models"][1]["context"]
    pool = load_pool(raw)
    assert pool.context_window.tolist() == [65_536.0, float(DEFAULT_CONTEXT_TOKENS), 131_072.0,
                                            float(DEFAULT_CONTEXT_TOKENS)]  # the manager has no group: the default
    assert pool.sources["models[0].context"] == "assumed" and "models[1].context" not in pool.sources
    for bad, message in ((100, r"window_tokens: expected a number in \[1024, 1e\+08\], got 100"),
                         (4096.5, r"window_tokens: expected an integer in \[1024, 100000000\], got 4096.5")):
        raw["models"][0]["context"]["window_tokens"] = bad
        with pytest.raises(PoolError, match=r"models\[0\]\.context\." + message):
            load_pool(raw)
    raw["models"][0]["context"] = {"window": 4096, "source": "assumed"}
    with pytest.raises(PoolError, match="unknown key 'window'"):
        load_pool(raw)


# --- the descriptor head -----------------------------------------------------------------------------------------

def test_model_head_is_validated_by_the_config_machinery():
    with pytest.raises(ConfigError, match=r"policy\.model_head.*'linear'.*one of 'index', 'descriptor'"):
        validate(PolicyConfig(model_head="linear"), "policy")
    with pytest.raises(ConfigError, match=r"policy\.model_head"):
        make_config("default", {"policy.model_head": "linear"})


def test_the_descriptor_head_scores_rows_so_permuting_models_permutes_their_logits():
    torch.manual_seed(0)
    nvec = [2] + [8, 3, 3] * 2
    policy = ManagerPolicy(6, nvec, ("a",), 5, PolicyConfig(hidden=16, layers=1, model_head="descriptor"))
    with torch.no_grad():
        policy.tool_model.normal_()  # the per-tool offsets start at zero; make them count
    x = torch.randn(5, 6)
    for m in (3, 5):  # a pool of 3 models and one of 5, the same weights
        models = torch.rand(m, len(MODEL_FEATURES))
        width = 2 + 2 * (8 + m + 3)
        mask = torch.ones(5, width, dtype=torch.bool)
        acts = torch.tensor([[0, 1, 0, 0, 2, m - 1, 0]] * 5)
        logits = policy.logits(x, mask, acts, models)
        assert [lg.shape[1] for lg in logits] == [2, 8, m, 3, 8, m, 3]
        perm = torch.randperm(m)
        shuffled = policy.logits(x, mask, acts, models[perm])
        for d in (2, 5):
            torch.testing.assert_close(shuffled[d], logits[d][:, perm])
        logp, ent = policy.evaluate(x, mask, acts, models)
        assert torch.isfinite(logp).all() and (ent >= 0).all()
    with pytest.raises(ValueError, match="descriptor head scores the pool's model descriptor rows"):
        policy.act(x, torch.ones(5, 2 + 2 * 14, dtype=torch.bool), None)
    index = ManagerPolicy(6, nvec, ("a",), 5, PolicyConfig(hidden=16, layers=1, model_head="index"))
    with pytest.raises(ValueError, match="needs model_head='descriptor'"):
        index.act(x, torch.ones(5, 2 + 2 * 16, dtype=torch.bool), None, models=torch.rand(5, len(MODEL_FEATURES)))


def test_a_members_descriptor_head_gives_its_floats_alone_wherever_it_sits_in_the_pass():
    torch.manual_seed(0)
    nvec = [2] + [8, 3, 3] * 4
    cfg = PolicyConfig(model_head="descriptor")
    policies = [ManagerPolicy(78, nvec, ("a",), 5, cfg) for _ in range(4)]
    for p in policies:
        with torch.no_grad():
            p.tool_model.normal_()
    stack = PolicyStack(policies)
    models = torch.rand(6, len(MODEL_FEATURES))  # another pool's six models
    counts = [1, 2, 3, 2]
    width = 2 + 4 * (8 + 6 + 3)
    x, mask = torch.randn(sum(counts), 78), torch.rand(sum(counts), width) < 0.8
    mask[:, np.cumsum([0] + stack._with_models(6))[:-1]] = True  # a legal choice in every dimension
    gens = [torch.Generator().manual_seed(m) for m in range(4)]
    actions, logp = stack.act(x, mask, counts, gens, [False] * 4, models)
    assert (actions[:, 2::3] < 6).all() and (actions[:, 2::3] >= 3).any()  # models beyond the training pool's 3
    lp, ent = stack.evaluate(x, mask, actions, counts, "grad", models)
    rows = np.cumsum([0, *counts])
    for m, policy in enumerate(policies):
        lo, hi = rows[m], rows[m + 1]
        alone_actions, alone_logp = policy.act(x[lo:hi].clone(), mask[lo:hi], torch.Generator().manual_seed(m),
                                               models=models)
        assert torch.equal(alone_actions, actions[lo:hi]) and torch.equal(alone_logp, logp[lo:hi]), m
        alone_lp, alone_ent = policy.evaluate(x[lo:hi].clone(), mask[lo:hi], actions[lo:hi], models)
        assert torch.equal(alone_lp, lp[lo:hi]) and torch.equal(alone_ent, ent[lo:hi]), m


def test_a_policy_trained_on_three_models_acts_on_a_pool_of_eight():
    cfg = make_config("default", TINY)
    policy = build_policy(cfg)  # paramanager: 3 models
    assert policy.nvec[2] == 3 and "models" not in policy.obs_keys
    envs = make_envs(dataclasses.replace(cfg.env, pool="toolorchestra"), 16, cfg.reward)
    ro = collect(policy, envs, seed=0, group_size=2, generator=torch.Generator().manual_seed(0))
    envs.close()
    assert ro.models.shape == (8, len(MODEL_FEATURES))
    assert ro.agent_model_choices().max() >= 3  # it picks models the training pool does not have
    logp, _ = policy.evaluate(ro.x, ro.mask, ro.actions, ro.models)
    torch.testing.assert_close(logp, ro.logp)
    shifted = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, pool="toolorchestra"))
    check_eval_pool(shifted)
    result = evaluate(policy, shifted, seed=0)
    assert result["eval_pool"]["pool"] == "toolorchestra"
    assert set(result["eval_pool"]["model_dist"]) == set(load_pool("toolorchestra").model_names[:-1])
    assert set(result["eval_pool"]["acc_by_suite"]) == {"paramanager"}
    assert 0 <= result["eval_pool"]["accuracy"] <= 1
    plain = evaluate(policy, cfg, seed=0)  # the training pool's figures do not depend on eval.pool
    assert "eval_pool" not in plain
    assert all(plain[k] == result[k] for k in ("accuracy", "reward", "tokens", "acc_by_benchmark", "model_dist"))


@pytest.mark.timeout(300)
def test_descriptor_members_train_together_as_alone_and_resume_from_their_checkpoints(tmp_path):
    cfgs = [make_config("default", {**TINY, "c_tar": "4"}),
            make_config("default", {**TINY, "c_tar": "16", "seed": "1", "eval.pool": "paramanager_mono"})]
    together = run_population(cfgs)
    alone = run_pipeline(cfgs[1])
    for key in sorted(set(alone) - TIMING):
        assert alone[key] == together[1][key], key
    assert "eval_pool" not in together[0] and together[1]["eval_pool"]["pool"] == "paramanager_mono"
    assert set(together[1]["eval_pool"]["model_dist"]) == {"Qwen3-30B-A3B-Instruct-2507"}

    class Crash(Exception):
        pass

    def die(row):
        if row["step"] == 2:
            raise Crash

    dirs = [tmp_path / "a", tmp_path / "b"]
    with pytest.raises(Crash):
        run_population(cfgs, dirs, [die, None])
    resumed = run_population(cfgs, dirs)
    for a, b in zip(together, resumed):
        for key in sorted(set(a) - TIMING):
            assert a[key] == b[key], key


# --- eval.pool ---------------------------------------------------------------------------------------------------

def _with(cfg, **evals):
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, **evals))


def test_check_eval_pool_names_the_fields(tmp_path):
    cfg = make_config("default", {"policy.model_head": "descriptor"})
    check_eval_pool(cfg)  # empty: the training pool only
    check_eval_pool(_with(cfg, pool="toolorchestra"))
    check_eval_pool(_with(cfg, pool=str(POOL_FILE)))
    with pytest.raises(ConfigError, match=r"eval.pool = 'nope': must be a shipped pool \(openweight, paramanager, "):
        check_eval_pool(_with(cfg, pool="nope"))
    index = make_config("default", {"policy.model_head": "index"})
    with pytest.raises(ConfigError, match=r"eval.pool = 'toolorchestra' needs policy.model_head = 'descriptor' "
                                          r"\(got 'index'\)"):
        check_eval_pool(_with(index, pool="toolorchestra"))
    spec = json.loads((TOOL_SPEC_DIR / "default.json").read_text())
    spec["name"] = "six"
    spec["tools"] = [t for t in spec["tools"] if t["name"] != "search"]
    (tmp_path / "six.json").write_text(json.dumps(spec))
    raw = json.loads(POOL_FILE.read_text())
    raw["tool_spec"] = str(tmp_path / "six.json")
    del raw["tools"]["search"]
    (tmp_path / "pool6.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"eval.pool = '.*pool6.json': its tool spec 'six' \(tools \[.*\]\) differs "
                                          r"from env.pool = 'paramanager''s 'default'"):
        check_eval_pool(_with(cfg, pool=str(tmp_path / "pool6.json")))


def test_the_summary_reports_the_eval_pool_beside_the_training_pool():
    def result(seed: int, acc: float, shifted: float | None) -> dict:
        r = {"label": "c_tar=8", "seed": seed, **{k: 0.5 for k in report.SCALARS}, "accuracy": acc,
             "tool_dist": [1 / 7] * 7, "model_dist": {"A": 1.0}}
        if shifted is not None:
            r["eval_pool"] = {"pool": "paramanager_mono", **{k: 1.0 for k in report.EVAL_POOL_SCALARS},
                              "accuracy": shifted}
        return r

    rows = report.aggregate([result(0, 0.6, 0.4), result(1, 0.8, 0.6)])
    assert rows[0]["eval_pool"] == "paramanager_mono"
    assert rows[0]["eval_pool_accuracy"] == pytest.approx(0.5)
    assert rows[0]["eval_pool_accuracy_std"] == pytest.approx(0.1)
    md = report.markdown_table(rows)
    assert "accuracy (eval pool)" in md.splitlines()[0] and "| paramanager_mono | 0.500 ± 0.100 |" in md
    plain = report.markdown_table(report.aggregate([result(0, 0.6, None)]))
    assert "eval pool" not in plain
