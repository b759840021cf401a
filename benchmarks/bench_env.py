"""Env-steps per second: ParaOrch-v0 single env through gym.make, the compiled vector env at 1, 64, 1,024
and 4,096 lanes, and a NumPy-batched reference env in the same run. The reference vectorizes the per-call
model over lanes with NumPy (statuses, tokens, latency, prices, correctness with anchoring and the long-
context penalty, reviews, the weighted vote, rewards through the same core call); it simplifies the
ensemble vote to one draw and leaves out exec-error repair and token budgets, so it slightly flatters NumPy.
Goals on a 2-core machine: >= 2M steps/s batched at 4,096 lanes, >= 50k steps/s single.

Run: ``pytest benchmarks/bench_env.py --benchmark-only`` (steps/s and the speedup over NumPy land in
``extra_info``), ``python benchmarks/bench_env.py`` for a table (and the per-lane cost from 1,024 to 4,096 lanes),
or ``python benchmarks/bench_env.py --profile`` for where a vector env step's time goes (CPU time per phase: the
compiled kernel, the trajectory gather, the reward scoring, the observation copies, the env's own Python) and the
kernel's cost with and without the per-call model. ``bench_vector_env.py`` holds the 4,096-lane comparisons.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import pytest
from bench_policy import policy_actions

import parasim  # noqa: F401  (registers the envs)
from envs.paraorch import resolve_reward, score_trajectories
from parasim.protocol.schema import NUM_TOOLS, Status, Tool
from parasim.sim import Simulator
from parasim.sim.kernel import (
    F_COST,
    F_LAT,
    F_OUTCOME,
    F_TOKENS,
    F_USD,
    I_CALLS,
    I_DONE,
    I_FINAL,
    I_FMT,
    I_ROUND,
    NUM_F,
    NUM_I,
)
from parasim.sim.tables import (
    E_MAX_ROUNDS,
    MD_LLR_CONFIRM,
    MD_LLR_FLAG,
    MD_SENS,
    MD_SPEC,
    MM_KAPPA,
    MM_LAM,
    MM_RHO,
    P_ENSEMBLE_K,
    P_MAX_OUT,
    P_MGR_CALL,
    P_MGR_ROUND,
    P_PROMPT,
    P_STATUS,
    R_BENCH,
    R_DOMAIN,
    R_MU,
    R_OPTIONS,
    R_QTOK,
    R_SIGMA,
    TM_LAT_BASE,
    TM_LAT_PER_TOK,
    TM_LAT_SD,
    TM_P_EXEC,
    TM_PRICE_IN,
    TM_PRICE_OUT,
    TM_TOK_ALPHA,
    TM_TOK_SD,
    TT_COST,
    TT_FEEDBACK,
    TT_TIMEOUT,
    TT_USD_CALL,
    TT_USD_S,
)
from parasim.tasks.suites import FREE_FORM, NUM_ANSWERS

LANES = (1, 64, 1024, 4096)


class ReferenceState(NamedTuple):
    """The reference env's own lane state: one contiguous array per field, so that the baseline's speed does not
    depend on how the compiled simulator lays out its state."""

    st_i: np.ndarray  # int64[N, NUM_I]
    st_f: np.ndarray  # float64[N, NUM_F]
    counts_t: np.ndarray  # int32[N, T]
    ev: np.ndarray  # float64[N, 4, NUM_ANSWERS]


class NumpyReferenceEnv:
    """The per-call model vectorized with NumPy over lanes (the baseline, not a product; see module doc)."""

    def __init__(self, lanes: int, pool: str = "paramanager", suite: str = "paramanager", seed: int = 0) -> None:
        self.sim = Simulator(pool, suite, lanes)  # reuse the tables, action sizes and episode parameters
        self.t = self.sim.tables
        self.n = lanes
        self.state = ReferenceState(np.zeros((lanes, NUM_I), np.int64), np.zeros((lanes, NUM_F)),
                                    np.zeros((lanes, NUM_TOOLS), np.int32), np.zeros((lanes, 4, NUM_ANSWERS)))
        self.rng = np.random.default_rng(seed)
        self.reward = resolve_reward("paramanager")
        self.nm = self.sim.pool.num_models
        self.reset(np.ones(lanes, bool))

    def reset(self, mask: np.ndarray) -> None:
        t, s, idx = self.t, self.state, np.flatnonzero(mask)
        rows = np.minimum(np.searchsorted(t.row_cdf, self.rng.random(len(idx)), side="right"), len(t.row_cdf) - 1)
        s.st_i[idx] = 0
        s.st_f[idx] = 0.0
        s.counts_t[idx] = 0
        s.ev[idx] = 0.0
        self.row, self.bench = np.zeros(self.n, np.int64), np.zeros(self.n, np.int64)
        self.dom, self.nans = np.zeros(self.n, np.int64), np.zeros(self.n, np.int64)
        self.row[idx], self.bench[idx], self.dom[idx] = rows, t.row_i[rows, R_BENCH], t.row_i[rows, R_DOMAIN]
        opts = t.row_i[rows, R_OPTIONS]
        self.nans[idx] = np.where(opts == FREE_FORM, NUM_ANSWERS, opts)
        z = t.row_f[rows, R_MU] + t.row_f[rows, R_SIGMA] * self.rng.standard_normal(len(idx))
        self.z = np.zeros(self.n) if not hasattr(self, "z") else self.z
        self.z[idx] = z
        self.pref = np.zeros((self.n, self.nm + 1), np.int64) if not hasattr(self, "pref") else self.pref
        for m in range(self.nm + 1):
            self.pref[idx, m] = self._distractor(idx)

    def _distractor(self, lanes: np.ndarray) -> np.ndarray:
        cdf = self.t.row_dcdf[self.row[lanes]]
        j = (self.rng.random(len(lanes))[:, None] >= cdf).sum(1)
        return np.minimum(j + 1, self.nans[lanes] - 1)

    def _wrong(self, lanes: np.ndarray, mm: np.ndarray) -> np.ndarray:
        use_pref = self.rng.random(len(lanes)) < self.t.mm[MM_KAPPA, mm]
        return np.where(use_pref, self.pref[lanes, mm], self._distractor(lanes))

    def step(self, actions: np.ndarray) -> np.ndarray:
        t, s, n = self.t, self.state, self.n
        ev = s.ev
        score, support = ev[:, 0], ev[:, 1]
        has = support > 0
        lead = np.where(has.any(1), np.argmax(np.where(has, score, -np.inf), 1), -1)
        stop = actions[:, 0] == 1
        run = ~stop
        lat_round = np.zeros(n)
        tok_round = np.where(run, t.proto[P_MGR_ROUND], 0.0)
        loga = np.log(np.maximum(self.nans, 2) - 1.0)
        for k in range(self.sim.slots):
            tool, model, target = actions[:, 1 + 3 * k], actions[:, 2 + 3 * k], actions[:, 3 + 3 * k]
            active = run & (tool != NUM_TOOLS)
            agent = tool < int(Tool.PYTHON)
            invalid = active & ((agent & (model >= self.nm)) | ((tool == Tool.CRITICAL_REVIEWER) & (lead < 0)))
            fmt = active & ~invalid & ((target != 0) & (lead < 0) | ((tool == Tool.CRITICAL_REVIEWER) != (target == 2)))
            ok = active & ~invalid & ~fmt
            lanes = np.flatnonzero(ok)
            tl, mm = tool[lanes], np.where(agent[lanes], model[lanes], self.nm)
            d, b, z = self.dom[lanes], self.bench[lanes], self.z[lanes]
            kk = np.where(tl == Tool.ENSEMBLE_SOLVER, int(t.proto[P_ENSEMBLE_K]), 1)
            mu = t.tok_mu[tl, mm, d] + t.tm[TM_TOK_ALPHA, tl, mm] * z
            tok = np.minimum(np.exp(mu + t.tm[TM_TOK_SD, tl, mm] * self.rng.standard_normal(len(lanes))),
                             t.proto[P_MAX_OUT]) * kk
            lat = (t.tm[TM_LAT_BASE, tl, mm] + tok / kk * t.tm[TM_LAT_PER_TOK, tl, mm]) * np.exp(
                t.tm[TM_LAT_SD, tl, mm] * self.rng.standard_normal(len(lanes)))
            timeout = lat > t.tt[TT_TIMEOUT, tl]
            lat = np.minimum(lat, t.tt[TT_TIMEOUT, tl])
            exec_err = ~timeout & (self.rng.random(len(lanes)) < t.tm[TM_P_EXEC, tl, mm])
            good = ~timeout & ~exec_err
            ctx = np.where(target[lanes] != 0, s.st_f[lanes, F_TOKENS], 0.0)
            tok_in = (t.proto[P_PROMPT] + t.row_f[self.row[lanes], R_QTOK] + ctx) * kk
            s.st_f[lanes, F_USD] += tok_in * t.tm[TM_PRICE_IN, tl, mm] + tok * t.tm[TM_PRICE_OUT, tl, mm] \
                + t.tt[TT_USD_CALL, tl] + t.tt[TT_USD_S, tl] * lat
            s.st_f[lanes, F_COST] += t.tt[TT_COST, tl]
            lat_round[lanes] = np.maximum(lat_round[lanes], lat)
            tok_round[lanes] += np.where(good, tok * t.tt[TT_FEEDBACK, tl], t.proto[P_STATUS])
            np.add.at(s.counts_t, (lanes, tl), 1)
            p = 1 / (1 + np.exp(-(t.skill[mm, b] + t.bonus[tl, d] - z - t.mm[MM_LAM, mm] * np.log1p(ctx / 1000))))
            ans = np.where(self.rng.random(len(lanes)) < p, 0, self._wrong(lanes, mm))
            copy = (target[lanes] == 1) & (self.rng.random(len(lanes)) < t.mm[MM_RHO, mm])
            ans = np.where(copy, lead[lanes], ans)
            review = good & (tl == Tool.CRITICAL_REVIEWER)
            lr = lead[lanes]
            flag = np.where(lr == 0, self.rng.random(len(lanes)) >= t.md[MD_SPEC, mm, d],
                            self.rng.random(len(lanes)) < t.md[MD_SENS, mm, d])
            llr = np.where(flag, t.md[MD_LLR_FLAG, mm, d], t.md[MD_LLR_CONFIRM, mm, d])
            solve = good & ~review
            w = np.maximum(0.05, t.rel_logit[b, tl, mm] + loga[lanes])
            np.add.at(score, (lanes[solve], ans[solve]), w[solve])
            np.add.at(support, (lanes[solve], ans[solve]), 1.0)
            np.add.at(score, (lanes[review], lr[review]), llr[review])
            s.st_i[:, I_CALLS] += active
            s.st_i[:, I_FMT] += invalid | fmt
        tok_round += run * (actions[:, 1::3] != NUM_TOOLS).sum(1) * t.proto[P_MGR_CALL]
        s.st_f[:, F_TOKENS] += tok_round
        s.st_f[:, F_LAT] += lat_round
        s.st_i[:, I_ROUND] += run
        final = stop | (s.st_i[:, I_ROUND] >= self.sim.env[E_MAX_ROUNDS])
        has = support > 0
        answer = np.where(has.any(1), np.argmax(np.where(has, score, -np.inf), 1), 1)
        s.st_f[:, F_OUTCOME] = answer == 0
        s.st_i[:, I_FINAL] = stop
        s.st_i[:, I_DONE] = final
        self._observe()
        if final.any():
            lanes = np.flatnonzero(final)
            score_trajectories(self._trajectory(lanes), self.reward, validate=False)
            self.reset(final)
        return final

    def _trajectory(self, lanes: np.ndarray) -> dict[str, np.ndarray]:
        """The TrajectoryBatch fields of finished ``lanes``, gathered with NumPy."""
        st_i, st_f, counts_t = self.state.st_i[lanes], self.state.st_f[lanes], self.state.counts_t[lanes]
        return {
            "outcome": st_f[:, F_OUTCOME].copy(), "format_violations": st_i[:, I_FMT].astype(np.int32),
            "ended_with_final": st_i[:, I_FINAL].astype(np.uint8), "rounds": st_i[:, I_ROUND].astype(np.int32),
            "tool_calls": st_i[:, I_CALLS].astype(np.int32), "distinct_tools": (counts_t > 0).sum(-1).astype(np.int32),
            "tool_counts": counts_t, "tokens": st_f[:, F_TOKENS].copy(), "cost_units": st_f[:, F_COST].copy(),
            "usd": st_f[:, F_USD].copy(), "latency_s": st_f[:, F_LAT].copy(),
            "group_id": np.zeros(len(lanes), np.int64), "role_id": np.zeros(len(lanes), np.int32)}

    def _observe(self) -> dict[str, np.ndarray]:
        """The same observation content: top-4 candidates by score, counts, budgets, a mask."""
        ev = self.state.ev
        order = np.argsort(-np.where(ev[:, 1] > 0, ev[:, 0], -np.inf), 1)[:, :4]
        cand = np.take_along_axis(ev, order[:, None, :], 2).transpose(0, 2, 1)
        st = self.state
        has = (ev[:, 1] > 0).any(1)
        mask = np.ones((self.n, int(self.sim.nvec.sum())), np.int8)
        mask[:, 2 + int(Tool.CRITICAL_REVIEWER)] = has
        return {"candidates": cand.astype(np.float32), "budget": st.st_f[:, [F_TOKENS, F_COST, F_USD, F_LAT]]
                .astype(np.float32), "tool_counts": st.counts_t.astype(np.float32), "action_mask": mask,
                "round": st.st_i[:, [I_ROUND]].astype(np.float32), "status": np.full((self.n, 4), Status.OK)}


def run_single(steps: int) -> float:
    """Steps per second of one env made by gym.make (wrappers included), random calls, episodes ~6 steps."""
    env = gym.make("ParaOrch-v0")
    env.reset(seed=0)
    acts = policy_actions(env.unwrapped.sim.nvec, 1, steps)[:, 0]
    t0 = time.perf_counter()
    for a in acts:
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t0)


def run_vector(lanes: int, steps: int, threads: int = 1) -> float:
    env = gym.make_vec("ParaOrch-v0", num_envs=lanes, vectorization_mode="vector_entry_point", num_threads=threads)
    env.reset(seed=0)
    acts = policy_actions(env.unwrapped.sim.nvec, lanes, steps)
    env.step(acts[0])
    t0 = time.perf_counter()
    for a in acts:
        env.step(a)
    return lanes * steps / (time.perf_counter() - t0)


def run_numpy(lanes: int, steps: int) -> float:
    env = NumpyReferenceEnv(lanes)
    acts = policy_actions(env.sim.nvec, lanes, steps)
    t0 = time.perf_counter()
    for a in acts:
        env.step(a)
    return lanes * steps / (time.perf_counter() - t0)


def _steps_for(lanes: int) -> int:
    return max(20, 200_000 // lanes) if lanes > 1 else 5_000


def test_single_env_gym_make(benchmark):
    rate = benchmark.pedantic(run_single, args=(20_000,), rounds=3, iterations=1)
    benchmark.extra_info["steps_per_s"] = rate


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("lanes", LANES)
def test_vector_env(benchmark, lanes, threads):
    if threads > 1 and lanes < 1024:
        pytest.skip("threads start at 1,024 lanes")
    steps = _steps_for(lanes)
    rate = benchmark.pedantic(run_vector, args=(lanes, steps, threads), rounds=3, iterations=1)
    base = run_numpy(lanes, max(10, steps // 4))
    benchmark.extra_info.update(steps_per_s=rate, numpy_steps_per_s=base, speedup=rate / base)


def _timed(fn: Callable, spent: dict[str, float], key: str) -> Callable:
    """``fn`` adding its CPU time (this thread's) to ``spent[key]``."""
    def timed(*args, **kwargs):
        t0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += time.thread_time() - t0
    return timed


PHASES = ("Simulator.step (compiled kernel)", "Simulator.trajectory (gather)", "reward scoring (C++ core)",
          "Simulator.tasks", "Simulator.observation (copies)")


def profile_vector(lanes: int, steps: int) -> dict[str, float]:
    """CPU seconds per env step of the vector env's phases: the Simulator calls it makes and the reward scoring,
    timed by wrapping them on this env's instances, and the rest of its ``step`` (Python: masks, infos)."""
    import envs.paraorch as paraorch

    env = gym.make_vec("ParaOrch-v0", num_envs=lanes, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    acts = policy_actions(env.unwrapped.sim.nvec, lanes, steps)
    env.step(acts[0])
    spent = dict.fromkeys(PHASES, 0.0)
    sim = env.unwrapped.sim
    sim.step = _timed(sim.step, spent, PHASES[0])
    sim.trajectory = _timed(sim.trajectory, spent, PHASES[1])
    sim.tasks = _timed(sim.tasks, spent, PHASES[3])
    sim.observation = _timed(sim.observation, spent, PHASES[4])
    score = paraorch.score_trajectories
    paraorch.score_trajectories = _timed(score, spent, PHASES[2])
    try:
        t0 = time.thread_time()
        for a in acts:
            env.step(a)
        total = time.thread_time() - t0
    finally:
        paraorch.score_trajectories = score
    out = {k: v / steps for k, v in spent.items()}
    out["rest of env.step (Python)"] = total / steps - sum(out.values())
    out["total"] = total / steps
    return out


def kernel_ns_per_lane_step(lanes: int, steps: int, calls: int) -> float:
    """CPU ns per lane-step of ``Simulator.step`` alone under the benchmark policy with its first ``calls`` slots
    kept (the others emptied; NEXT_STEP resets): the kernel's cost with and without the per-call model."""
    sim = Simulator("paramanager", "paramanager", lanes)
    sim.seed(np.arange(lanes))
    sim.reset()
    acts = policy_actions(sim.nvec, lanes, steps)
    acts[..., 1 + 3 * calls::3] = NUM_TOOLS
    finished = np.zeros(lanes, np.uint8)
    t0 = time.thread_time()
    for a in acts:
        finished = sim.step(a, finished).copy()
    return (time.thread_time() - t0) / (lanes * steps) * 1e9


def print_profile(lanes: int, repeats: int) -> None:
    """The per-phase profile of a vector env step at ``lanes`` (the fastest of ``repeats`` runs), and the kernel's
    cost per lane-step with and without the per-call model (best of ``repeats``)."""
    steps = max(20, 200_000 // lanes)
    best = min((profile_vector(lanes, steps) for _ in range(repeats)), key=lambda run: run["total"])
    print(f"{lanes} lanes, CPU us per env step (the fastest of {repeats} runs; {lanes / best['total']:,.0f} "
          "env-steps/s):")
    for k, v in best.items():
        if k != "total":
            print(f"  {k:36s} {v * 1e6:8.1f} us  {v / best['total'] * 100:5.1f}%")
    kernel = {calls: min(kernel_ns_per_lane_step(lanes, steps, calls) for _ in range(repeats)) for calls in (4, 1, 0)}
    print(f"  kernel per lane-step: {kernel[4]:.0f} ns with the policy's 4 slots, {kernel[1]:.0f} ns with slot 0 only, "
          f"{kernel[0]:.0f} ns with no calls (resets, bookkeeping, observation)")


def _spread(measure: Callable[[], float], repeats: int) -> tuple[float, float]:
    """Best and median of ``repeats`` measurements: the machine is shared, so one number says little."""
    rates = [measure() for _ in range(repeats)]
    return max(rates), statistics.median(rates)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="measurements per row (best and median shown)")
    parser.add_argument("--profile", action="store_true",
                        help="only the per-phase profile of a vector env step at 1,024 and 4,096 lanes")
    args = parser.parse_args(argv)
    repeats = args.repeats
    run_vector(4, 10)  # compile / load the caches outside the timings
    if args.profile:
        for lanes in (1024, 4096):
            print_profile(lanes, repeats)
        return
    run_vector(1024, 5, threads=2)
    best, med = _spread(lambda: run_single(20_000), repeats)
    print(f"steps/s, best / median of {repeats}")
    print(f"single env via gym.make: {best:12,.0f} / {med:12,.0f}")
    compiled = {}
    for lanes in LANES:
        steps = _steps_for(lanes)
        fast = compiled[lanes] = _spread(lambda: run_vector(lanes, steps), repeats)  # noqa: B023 (in the iteration)
        base = _spread(lambda: run_numpy(lanes, max(10, steps // 4)), repeats)  # noqa: B023
        line = (f"{lanes:5d} lanes: compiled {fast[0]:12,.0f} / {fast[1]:12,.0f}  numpy {base[0]:12,.0f} / "
                f"{base[1]:12,.0f}  x{fast[0] / base[0]:5.1f} / x{fast[1] / base[1]:5.1f}")
        if lanes >= 1024:
            thr = _spread(lambda: run_vector(lanes, steps, threads=2), repeats)  # noqa: B023
            line += f"  threaded {thr[0]:12,.0f} / {thr[1]:12,.0f}"
        print(line)
    ratio = [compiled[1024][k] / compiled[4096][k] for k in (0, 1)]
    print(f"per-lane cost, 4,096 / 1,024 lanes: x{ratio[0]:.2f} (best) / x{ratio[1]:.2f} (median); goal at 4,096 "
          f"lanes: 2,000,000 steps/s")


if __name__ == "__main__":
    main()
