"""Population training: points trained together give, number for number, what each gives alone."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from parasim.pools.descriptors import MODEL_FEATURES
from parasim.sim.router_signal import ROUTER_KEY
from training import sweep
from training.config import make_config
from training.pipeline import run_pipeline
from training.policy import ManagerPolicy, MemberAdam, PolicyConfig, PolicyStack, clip_member_grads
from training.population import population_key, run_population, split_population
from training.result_schema import untimed

TINY = {"grpo.steps": "3", "grpo.tasks_per_step": "6", "grpo.group_size": "4", "grpo.minibatches": "2",
        "grpo.checkpoint_every": "2", "expert.episodes": "96", "sft.epochs": "2", "sft.batch_size": "64",
        "eval.tasks": "12", "eval.k": "2", "policy.hidden": "24"}
# Members that differ in everything a population lets differ: reward, seed (so their demonstrations and SFT
# minibatch counts), learning rate, clipping, KL, entropy bonus, step count, lanes and group size, minibatches,
# epochs, advantage estimator, greedy evaluation and extra evaluation suites.
MEMBERS = [
    {"c_tar": "4"},
    {"c_tar": "16", "eval.suites": "math"},
    {"seed": "1", "grpo.learning_rate": "1e-3", "grpo.clip_eps": "0.1", "grpo.kl_coef": "0.1",
     "grpo.entropy_coef": "0.01", "sft.learning_rate": "1e-2", "sft.epochs": "3"},
    {"seed": "2", "grpo.steps": "2", "grpo.group_size": "2", "grpo.tasks_per_step": "5", "grpo.minibatches": "5",
     "grpo.ppo_epochs": "3", "grpo.max_grad_norm": "0", "grpo.adv_method": "rloo", "eval.greedy": "true",
     "eval.k": "3"},
]
TIMING = {"sft_s", "grpo_s", "eval_s", "env_steps_per_s"}


# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


def _cfgs():
    return [make_config("default", {**TINY, **m}) for m in MEMBERS]


def _same_figures(alone: dict, together: dict) -> None:
    """Every reported figure equal, exactly (no tolerance), timings aside (in a sweep result's history too)."""
    alone, together = untimed(alone), untimed(together)
    assert set(alone) == set(together)
    for key in sorted(set(alone) - TIMING):
        assert alone[key] == together[key], key


@pytest.mark.timeout(240)
def test_points_trained_together_report_exactly_what_they_report_alone():
    cfgs = _cfgs()
    together = run_population(cfgs)
    for cfg, result in zip(cfgs, together):
        _same_figures(run_pipeline(cfg), result)
    assert len({r["reward"] for r in together}) == len(cfgs)  # the members did train differently


class Crash(Exception):
    pass


@pytest.mark.timeout(240)
def test_a_killed_population_resumes_each_member_from_its_own_checkpoints(tmp_path):
    cfgs = _cfgs()
    full = run_population(cfgs)
    dirs = [tmp_path / str(m) for m in range(len(cfgs))]

    def die(row):
        if row["step"] == 2:
            raise Crash  # member 0's third step, after every member's step-2 checkpoint (member 3's last)

    with pytest.raises(Crash):
        run_population(cfgs, dirs, [die, None, None, None])
    assert [(d / "sft.pt").exists() for d in dirs] == [True] * 4
    steps = [torch.load(d / "grpo.pt", weights_only=False)["step"] for d in dirs]
    assert steps == [2, 2, 2, 2]  # none got further
    resumed = run_population(cfgs, dirs)
    for a, b in zip(full, resumed):
        _same_figures(a, b)
    assert [torch.load(d / "grpo.pt", weights_only=False)["step"] for d in dirs] == [3, 3, 3, 2]


def test_a_population_shares_its_env_options_and_architecture():
    a, b = make_config("default", TINY), make_config("default", {**TINY, "max_parallel": "2"})
    assert population_key(a) == population_key(make_config("default", {**TINY, "c_tar": "12", "seed": "3"}))
    assert population_key(a) != population_key(b)
    with pytest.raises(ValueError, match=r"cfgs\[1\].*a population shares its env options"):
        run_population([a, b])


def test_member_adam_and_clipping_step_each_member_as_torch_does_alone():
    torch.manual_seed(0)
    cfg = PolicyConfig(hidden=16, layers=2, model_head="index")
    policies = [ManagerPolicy(5, [2, 4, 3, 3], ("a",), 2, cfg) for _ in range(3)]
    alone = [ManagerPolicy(5, [2, 4, 3, 3], ("a",), 2, cfg) for _ in range(3)]
    for p, q in zip(policies, alone):
        q.load_state_dict(p.state_dict())
    stack = PolicyStack(policies)
    lrs = [1e-2, 1e-2, 3e-3]
    optim = MemberAdam(stack, lrs, eps=1e-5)
    torch_optims = [torch.optim.Adam(q.parameters(), lr=lr, eps=1e-5) for q, lr in zip(alone, lrs)]
    max_norms = np.array([0.5, 0.0, 1e6])
    for step in range(4):
        active = np.array([True, step != 1, step < 3])  # member 1 skips a step, member 2 stops early
        grads = [[torch.randn_like(p) * 3 for p in q.parameters()] for q in alone]
        optim.zero_grad()
        for i, p in enumerate(stack.stacked):
            p.grad = torch.stack([g[i] for g in grads])
        clip_member_grads(stack, max_norms)
        optim.step(active)
        for m, (q, opt) in enumerate(zip(alone, torch_optims)):
            if active[m]:
                for p, g in zip(q.parameters(), grads[m]):
                    p.grad = g
                if max_norms[m] > 0:
                    torch.nn.utils.clip_grad_norm_(q.parameters(), float(max_norms[m]))
                opt.step()
    for m, (q, opt) in enumerate(zip(alone, torch_optims)):
        assert all(torch.equal(a, b) for a, b in zip(stack.member_state(m).values(), q.state_dict().values()))
        mine, theirs = optim.member_state(m), opt.state_dict()
        assert mine["param_groups"][0]["lr"] == theirs["param_groups"][0]["lr"]
        for i, entry in theirs["state"].items():
            assert all(torch.equal(mine["state"][i][k], v) for k, v in entry.items())


def test_a_members_rows_give_its_floats_alone_wherever_they_sit_in_the_pass():
    """Members of 2 or 3 rows after an odd number of other rows: their features start off a 16-byte boundary,
    where MKL multiplies such a small batch differently (the default sizes: 78 features, 128 hidden units)."""
    torch.manual_seed(0)
    nvec = [2] + [8, 3, 3] * 4
    policies = [ManagerPolicy(78, nvec, ("a",), 5, PolicyConfig(model_head="index")) for _ in range(4)]
    stack = PolicyStack(policies)
    counts = [1, 2, 3, 2]  # members 1 and 2 start at rows 1 and 3
    x, mask = torch.randn(sum(counts), 78), torch.ones(sum(counts), sum(nvec), dtype=torch.bool)
    gens = [torch.Generator().manual_seed(m) for m in range(4)]
    actions, logp = stack.act(x, mask, counts, gens, [False] * 4)
    for m, (policy, xm, am, lm) in enumerate(zip(policies, x.split(counts), actions.split(counts), logp.split(counts))):
        alone_actions, alone_logp = policy.act(xm.clone(), mask[: counts[m]], torch.Generator().manual_seed(m))
        assert torch.equal(alone_actions, am) and torch.equal(alone_logp, lm), m


def test_sampling_inverts_each_rows_cdf_by_the_members_own_uniforms():
    """One uniform per row and dimension, ``torch.rand(rows, dims)`` by the member's generator (columns in the pass's
    group order), and the first choice whose cumulative softmax probability passes it times the total: draw for draw,
    alone and in a stack, and the draws follow the softmax (chi-square on a fixed seed)."""
    torch.manual_seed(0)
    nvec = [2, 5, 3, 4]
    cfg = PolicyConfig(hidden=16, layers=1, model_head="index")
    policies = [ManagerPolicy(6, nvec, ("a",), 3, cfg) for _ in range(2)]
    policy = policies[1]
    with torch.no_grad():
        policy.heads.weight.mul_(8)  # probabilities far from uniform
        policy.tool_target.normal_()
    n = 6000
    x = torch.randn(1, 6).repeat(n, 1)  # one observation: every row draws from the same distributions
    mask = torch.ones(n, sum(nvec), dtype=torch.bool)
    mask[:, [3, 9]] = False  # a tool and a target that are never legal
    mask[: n // 2, 11] = False  # and a target legal in half the rows
    x[n // 2:, 0] += 1.0
    actions, logp = policy.act(x, mask, torch.Generator().manual_seed(5))
    gen, ref = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(policy.act(x, mask, gen)[0], actions)
    u = torch.rand(n, len(nvec), generator=ref)[:, np.argsort(policy.order)]  # column d: dimension d's uniform
    assert torch.equal(gen.get_state(), ref.get_state())  # one draw per row and dimension, nothing else
    with torch.no_grad():
        logits = policy.logits(x, mask, actions)  # each dimension conditioned on the sampled tool, as when sampled
    for d, lg in enumerate(logits):
        cdf = torch.softmax(lg.double(), 1).cumsum(1)
        want = (cdf <= u[:, d:d + 1] * cdf[:, -1:]).sum(1)
        assert torch.equal(actions[:, d], want), d
        # the counts against the expected ones (each row's probabilities summed): Pearson's statistic
        p = torch.softmax(lg.double(), 1)
        expected = p.sum(0)
        observed = torch.bincount(actions[:, d], minlength=lg.shape[1]).double()
        legal = expected > 1e-9
        assert (observed[~legal] == 0).all(), d  # masked choices never drawn
        stat = float(((observed - expected)[legal] ** 2 / expected[legal]).sum())
        assert stat < scipy.stats.chi2.ppf(0.999, int(legal.sum()) - 1), (d, stat)
    # in a stack, after a member of 3 rows: the same draws and log-probabilities
    stack = PolicyStack(policies)
    other_x, other_mask = torch.randn(3, 6), torch.ones(3, sum(nvec), dtype=torch.bool)
    together, together_logp = stack.act(torch.cat([other_x, x]), torch.cat([other_mask, mask]), [3, n],
                                        [torch.Generator().manual_seed(1), torch.Generator().manual_seed(5)],
                                        [False, False])
    assert torch.equal(together[3:], actions) and torch.equal(together_logp[3:], logp)


@pytest.mark.parametrize("router", [False, True])
@pytest.mark.parametrize("model_head", ["index", "descriptor"])
def test_a_members_gradients_are_its_gradients_alone_wherever_its_rows_sit(model_head, router):
    """A PPO-like loss over every member's rows: each member's slice of the stacked gradients equals, bit for bit,
    its gradients alone (members of 1 to 3 rows start off a 16-byte boundary; the last has a minibatch's rows);
    with the router signal, its last 3 features, read by the model head."""
    torch.manual_seed(0)
    nvec = [2] + [8, 3, 3] * 4
    keys = ("a", ROUTER_KEY) if router else ("a",)
    policies = [ManagerPolicy(78, nvec, keys, 5, PolicyConfig(model_head=model_head)) for _ in range(4)]
    for p in policies:
        with torch.no_grad():
            p.tool_model.normal_()
            p.tool_target.normal_()
            if router:
                p.router_model.normal_()
    models = torch.rand(3, len(MODEL_FEATURES)) if model_head == "descriptor" else None
    stack = PolicyStack(policies)
    counts = [1, 2, 3, 250]
    x, mask = torch.randn(sum(counts), 78), torch.rand(sum(counts), sum(nvec)) < 0.8
    mask[:, np.cumsum([0] + nvec)[:-1]] = True  # a legal choice in every dimension
    gens = [torch.Generator().manual_seed(m) for m in range(4)]
    actions, _ = stack.act(x, mask, counts, gens, [False] * 4, models)
    weight = torch.randn(sum(counts))
    logp, ent = stack.evaluate(x, mask, actions, counts, "grad", models)
    (logp * weight + 0.01 * ent).sum().backward()
    rows = np.cumsum([0, *counts])
    for m, policy in enumerate(policies):
        lo, hi = rows[m], rows[m + 1]
        lp, e = policy.evaluate(x[lo:hi].clone(), mask[lo:hi], actions[lo:hi], models)
        (lp * weight[lo:hi] + 0.01 * e).sum().backward()
        for name, param in policy.named_parameters():
            assert torch.equal(stack.param(name).grad[m], param.grad), (m, name)


def test_sweep_workers_split_the_cores_for_their_envs(monkeypatch):
    """threads x workers use each core once: a chunk's vector env gets cores // workers threads (at least 1, at most
    numba's), and make_envs steps on the threads the process was set to."""
    import numba

    from training import rollout

    cfg = make_config("default", {**TINY, "c_tar": "4"})
    real = numba.config.NUMBA_NUM_THREADS
    monkeypatch.setitem(rollout._ENV_THREADS, "n", real)
    assert rollout.make_envs(cfg.env, 2, cfg.reward).unwrapped.sim.num_threads == real
    monkeypatch.setattr(rollout.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 16)
    assert [rollout.threads_per_worker(w) for w in (1, 2, 3, 16, 32)] == [16, 8, 5, 1, 1]
    chunks = sweep.plan_chunks([sweep.GridPoint("default", (("c_tar", "4"),), 0)], 2)
    assert [c.env_threads for c in chunks] == [8]
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 1)
    assert rollout.threads_per_worker(1) == 1


def test_split_population_keeps_shared_demonstrations_together():
    keys = [s for _c in range(4) for s in (0, 1, 2)]  # 4 c_tar values x 3 seeds, grid order
    chunks = split_population(keys, 2)
    assert sorted(i for c in chunks for i in c) == list(range(12)) and [len(c) for c in chunks] == [6, 6]
    assert [len({keys[i] for i in c}) for c in chunks] == [2, 2]
    assert split_population(keys[:1], 4) == [[0]]


@pytest.mark.timeout(240)
def test_the_population_backend_stores_what_the_per_point_backend_stores(tmp_path):
    points = sweep.expand(sweep.parse_grid(["c_tar=4,12"]), [0, 1], fixed=TINY)
    together = sweep.run_sweep(points, tmp_path / "pop", "population", workers=1, progress=False)
    alone = [sweep.run_point(p) for p in points]
    assert [r["key"] for r in together] == [p.key for p in points]
    for a, b in zip(alone, together):
        _same_figures({k: v for k, v in a.items() if k != "wall_s"}, {k: v for k, v in b.items() if k != "wall_s"})
        assert math.isfinite(b["wall_s"])
    assert not (tmp_path / "pop" / "work").exists()  # checkpoints of stored points are gone
    again = sweep.run_sweep(points, tmp_path / "pop", "population", workers=1, progress=False)
    assert again == together  # finished points are not redone
