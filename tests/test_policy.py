"""The factorized manager policy: masks honoured, log-probs and entropies over the dimensions that matter."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from parasim.protocol.schema import NUM_STATUSES
from training.policy import ManagerPolicy, PolicyConfig, obs_to_tensor
from training.sft import SFTConfig, train_sft

K, TOOLS, MODELS, TARGETS = 2, 8, 3, 5
NVEC = [2] + [TOOLS, MODELS, TARGETS] * K
EMPTY = TOOLS - 1


def _policy(seed: int = 0) -> ManagerPolicy:
    torch.manual_seed(seed)
    cfg = PolicyConfig(hidden=16, layers=1, model_head="index")  # one logit per model index: NVEC's 3
    return ManagerPolicy(6, NVEC, ("a", "b"), num_agent_tools=5, cfg=cfg)


def _random_mask(rng: np.random.Generator, n: int) -> torch.Tensor:
    mask = rng.random((n, sum(NVEC))) < 0.6
    start = 0
    for size in NVEC:  # at least one legal choice per dimension, as the env guarantees
        mask[np.arange(n), start + rng.integers(0, size, n)] = True
        start += size
    return torch.from_numpy(mask)


def test_obs_features_are_log_squashed_one_hot_and_ordered():
    no_call = NUM_STATUSES  # an unused slot's status, the one-hot's last entry
    obs = {"a": np.array([[0.0, 3.0]]), "b": np.array([[[-8.0], [1000.0]]]),
           "last_status": np.array([[no_call, 0]], np.int8)}
    x = obs_to_tensor(obs, ("a", "b", "last_status"))
    want = [0.0, np.log(4.0), -np.log(9.0), np.log(1001.0)] + [0] * no_call + [1] + [1] + [0] * no_call
    assert torch.allclose(x, torch.tensor([want], dtype=torch.float32))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_sampling_never_picks_a_masked_choice(seed):
    rng = np.random.default_rng(seed)
    policy = _policy()
    mask = _random_mask(rng, 64)
    offsets = np.concatenate([[0], np.cumsum(NVEC)[:-1]])
    only = rng.integers(0, NVEC, (8, len(NVEC)))  # rows 0-7: one legal choice in every dimension
    mask[:8] = False
    mask[np.arange(8)[:, None], offsets + only] = True
    actions, logp = policy.act(torch.randn(64, 6), mask, torch.Generator().manual_seed(seed))
    picked = mask[torch.arange(64)[:, None], torch.as_tensor(offsets)[None, :] + actions]
    assert picked.all()
    assert torch.equal(actions[:8], torch.as_tensor(only))
    assert torch.isfinite(logp).all() and (logp <= 0).all() and (logp[:8] == 0).all()


def test_log_prob_counts_only_relevant_dimensions():
    policy = _policy()
    x, mask = torch.randn(4, 6), torch.ones(4, sum(NVEC), dtype=torch.bool)
    stop = torch.tensor([[1, 0, 0, 0, EMPTY, 0, 0]])
    basic = torch.tensor([[0, 5, 2, 1, EMPTY, 1, 3]])  # python in slot 0 (no model), slot 1 empty
    agent = torch.tensor([[0, 2, 1, 4, 0, 2, 0]])
    acts = torch.cat([stop, basic, agent, agent])
    rel = policy.relevance(acts)
    assert rel[0].tolist() == [True] + [False] * 6
    assert rel[1].tolist() == [True, True, False, True, True, False, False]
    assert rel[2].all()
    logp, ent = policy.evaluate(x, mask, acts)
    lsm = [torch.log_softmax(lg, 1) for lg in policy.logits(x, mask, acts)]
    want = lsm[0][1, 0] + lsm[1][1, 5] + lsm[3][1, 1] + lsm[4][1, EMPTY]
    assert logp[1].item() == pytest.approx(want.item(), rel=1e-5)
    assert logp[0].item() == pytest.approx(lsm[0][0, 1].item(), rel=1e-5)
    # other choices of an irrelevant dimension do not change the log-prob
    other = stop.clone()
    other[0, 2] = 2
    assert policy.evaluate(x[:1], mask[:1], other)[0].item() == pytest.approx(logp[0].item())
    assert (ent >= 0).all()


def test_model_and_target_heads_are_conditioned_on_the_tool():
    policy = _policy()
    with torch.no_grad():
        policy.tool_target[:, 1, 2] = 50.0  # critical_reviewer -> verify
        policy.tool_target[:, 0, 0] = 50.0  # standard_reasoner -> question
    x, mask = torch.randn(256, 6), torch.ones(256, sum(NVEC), dtype=torch.bool)
    acts, _ = policy.act(x, mask, torch.Generator().manual_seed(0))
    for s in range(K):
        tool, target = acts[:, 1 + 3 * s], acts[:, 3 + 3 * s]
        assert (target[tool == 1] == 2).all() and (target[tool == 0] == 0).all()


def test_masked_logits_get_no_probability_and_no_gradient():
    policy = _policy()
    x = torch.randn(8, 6)
    mask = torch.ones(8, sum(NVEC), dtype=torch.bool)
    mask[:, 1] = False  # stop=1 illegal: the episode must go on
    acts, _ = policy.act(x, mask, torch.Generator().manual_seed(0))
    assert (acts[:, 0] == 0).all()
    logp, _ = policy.evaluate(x, mask, acts)
    logp.sum().backward()
    assert torch.isfinite(policy.heads.weight.grad).all()


def test_sft_fits_expert_actions():
    policy = _policy()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(512, 6)
    mask = torch.ones(512, sum(NVEC), dtype=torch.bool)
    expert = torch.tensor([0, 2, 1, 4, 0, 0, 0]).repeat(512, 1)
    expert[x[:, 0] > 0, 1] = 3  # the expert's tool depends on the observation
    before = policy.evaluate(x, mask, expert)[0].mean().item()
    losses = train_sft(policy, x, mask, expert, SFTConfig(epochs=12, learning_rate=2e-2, batch_size=128), seed=0)
    after = policy.evaluate(x, mask, expert)[0].mean().item()
    assert losses[-1] < losses[0] and after > before and after > -0.5
    greedy, _ = policy.act(x, mask, gen, greedy=True)
    assert (greedy[:, 1] == expert[:, 1]).float().mean() > 0.95


def test_the_policy_activation_is_tanh_with_tanhs_gradient():
    from training.policy import tanh_

    x = torch.linspace(-12, 12, 10_001, dtype=torch.float32)
    np.testing.assert_allclose(tanh_(x.clone()).numpy(), torch.tanh(x).numpy(), rtol=0, atol=3e-7)
    x64 = torch.randn(64, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: tanh_(v * 1.0), (x64,))
    y = tanh_(x64 * 1.0)
    (g,) = torch.autograd.grad(y.sum(), x64)
    torch.testing.assert_close(g, 1 - torch.tanh(x64.detach()) ** 2)
