"""Each shipped pool, under a fixed scripted policy, reproduces its models' published accuracies.

Policy: one direct standard_reasoner call by model m on the question, whose answer is scored; and, for the
manager, final_answer at once (the termination model then answers itself), whose episode outcome is. It must
match each (model, benchmark) target of the pool file, corrected from its published setting to the env's
generation cap (``parasim.pools.pool.accuracy_under_cap``; a truncated call has no answer), within 2 points.
12,000 episodes per target put the standard error at <= 0.46 points, so the test fails on a real
miscalibration, not on noise.
"""
from __future__ import annotations

import numpy as np
import pytest

from envs.paraorch_vector import ParaOrchVectorEnv
from parasim.pools.pool import accuracy_under_cap, load_pool, shipped_pools
from parasim.protocol.schema import NUM_TOOLS, Tool
from parasim.sim.kernel import C_ANSWER, C_KIND, OUT_ANSWER
from parasim.tasks.suites import BENCHMARKS

EPISODES = 12_000
LANES = 4_000


def _accuracy(pool_name: str, bench: str, model: int | None) -> float:
    """Mean outcome of EPISODES scripted episodes (model None: the manager answers alone)."""
    env = ParaOrchVectorEnv(num_envs=LANES, pool=pool_name, suite=bench, max_rounds=2)
    n = len(env.sim.nvec)
    call = np.zeros((LANES, n), np.int64)
    call[:, 1::3] = NUM_TOOLS
    call[:, 1], call[:, 2], call[:, 3] = int(Tool.STANDARD_REASONER), model or 0, 0
    stop = np.zeros((LANES, n), np.int64)
    stop[:, 0] = 1
    outcomes = []
    for rep in range(EPISODES // LANES):
        env.reset(seed=rep * LANES)
        if model is None:
            _, _, term, _, info = env.step(stop)
            assert term.all()
            outcomes.append(info["trajectory"]["outcome"])
        else:  # the call's own answer: a TRUNCATED call has none (the termination model would fall back)
            env.step(call)
            kind, answer = env.sim.state.call_i[:, 0, C_KIND], env.sim.state.call_i[:, 0, C_ANSWER]
            outcomes.append(((kind == OUT_ANSWER) & (answer == 0)).astype(float))
    return float(np.concatenate(outcomes).mean())


def _targets() -> list[tuple[str, str, int, float]]:
    """Every published target, corrected to the env's harness: a pool model's call under the pool's generation cap
    (truncated calls have no answer), the manager's own direct answer uncapped (it is not a tool call)."""
    cases = []
    for name in shipped_pools():
        pool = load_pool(name)
        cap = np.full(pool.skill.shape, pool.max_output_tokens)
        cap[-1] = np.inf
        corrected = accuracy_under_cap(pool, cap)
        for m, b in zip(*np.nonzero(~np.isnan(pool.accuracy_target)), strict=False):
            cases.append((name, BENCHMARKS[b].name, int(m), float(corrected[m, b])))
    return cases


@pytest.mark.parametrize("pool_name,bench,model,target", _targets(),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_scripted_direct_call_reproduces_the_target(pool_name, bench, model, target):
    pool = load_pool(pool_name)
    is_manager = model == pool.num_models
    acc = _accuracy(pool_name, bench, None if is_manager else model)
    assert abs(acc - target) < 0.02, f"{pool.model_names[model]} on {bench}: {acc:.3f} vs {target:.3f}"
