"""The difficulty-coupled part of the call model: correctness and output tokens, z and the model effects integrated
out.

For a call of tool t by model m on a task of benchmark b (domain d) with difficulty z and the task's effect
e_m ~ Normal(0, 1) for model m (one per task and model, ``parasim.sim.kernel.draw_model_effects``):
  p = sigmoid(skill[m, b] + bonus[t, d] - z + tau[m] * e_m - lambda[m] * log(1 + context / 1000))
  log tokens_out ~ Normal(tok_mu[m, d] + tok_scale[t] + alpha[m] * z, tok_sd[m])
as in ``parasim.sim.kernel.sample_call`` and ``parasim.pools.pool``. Both depend on z, so they share one Gauss-Hermite
integral per task (``quadrature.Marginal``); tokens therefore also inform the difficulty posterior,
which is what makes this the joint maximum-likelihood fit rather than two marginal ones. Given z, the calls of
one model on one task share e_m and are independent of the other models' calls, so each (task, model) group's
correctness is an inner integral over e_m (``EFFECT_NODES`` plain Gauss-Hermite nodes: a group holds a few calls,
so e_m's posterior stays wide) nested in the outer one over z: calls of one model agree more often than calls of
two models, which is what identifies tau apart from the difficulty spread sigma_b.
An ensemble call is right when its plurality vote of k samples is (``vote_polynomial``); a call that carried
an earlier answer copies it with probability rho[m], so its chance of being right is
rho * [carried answer right] + (1 - rho) * p (error propagation).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from parasim.calibration.quadrature import Marginal

_EPS = 1e-12
EFFECT_NODES = 10
_EX, _EW = np.polynomial.hermite_e.hermegauss(EFFECT_NODES)
_E_X, _E_LOGW = _EX, np.log(_EW / _EW.sum())  # nodes and log weights of E[f(e)], e ~ N(0, 1)


def vote_polynomial(k: int, p_same: float) -> tuple[float, float, float]:
    """P(an ensemble of k samples answers right) = c1 p + c2 p^2 + c3 p^3, for the simulator's plurality vote.

    Each sample is right with p; wrong samples repeat each other with probability ``p_same``; ties go to
    the earliest sample (``parasim.sim.kernel.sample_call``). For k = 3: two or three right samples win;
    one right sample wins only when the two wrong ones differ and it comes first (1/3), so
    q = p^3 + 3 p^2 (1 - p) + p (1 - p)^2 (1 - p_same). For k = 2 a 1-1 tie goes to the first sample: q = p.
    Larger k needs the full distribution of the wrong answers and is not modeled.
    """
    if k in (1, 2):
        return 1.0, 0.0, 0.0
    if k == 3:
        s = 1.0 - p_same
        return s, 3.0 - 2.0 * s, s - 2.0
    raise ValueError(f"ensemble_k: the vote model covers k <= 3, got {k}")


def same_wrong_probability(kappa: float, zipf_s: float, answers: int) -> float:
    """P(two wrong answers of one model on one task agree), the preferred wrong answer integrated out.

    A wrong answer is the model's preferred one (itself drawn from the distractor weights d) with
    probability kappa, else a draw from d; so P = kappa^2 + (1 - kappa^2) * sum(d^2).
    """
    d = np.arange(1, answers, dtype=np.float64) ** -zipf_s
    d /= d.sum()
    return float(kappa ** 2 + (1.0 - kappa ** 2) * (d ** 2).sum())


@dataclass(frozen=True)
class CorrectRows:
    """Calls whose correctness is modeled: OK answers of agent tools (reviews excluded)."""

    task: np.ndarray
    model: np.ndarray
    bench: np.ndarray
    tool: np.ndarray
    domain: np.ndarray
    ctx: np.ndarray  # log(1 + context_tokens / 1000)
    y: np.ndarray  # 0/1
    poly: np.ndarray  # [R, 3] coefficients of P(right) in p (``vote_polynomial``; (1, 0, 0) for one sample)
    carried: np.ndarray  # correctness of the carried answer: 1, 0, or -1 when none


@dataclass(frozen=True)
class TokenRows:
    """Calls whose output tokens are modeled: agent-tool calls with a logged token count > 0."""

    task: np.ndarray
    model: np.ndarray
    tool: np.ndarray
    domain: np.ndarray
    log_tokens: np.ndarray
    censored: np.ndarray  # 1 where tokens hit the generation cap (the value is a lower bound)


class DifficultyModel:
    """Log-likelihood and gradient of the z-coupled terms over named natural-scale arrays.

    Parameters: skill[M, B], bonus[T, D], lam[M], rho[M], tau[M], mu[B], sigma[B], tok_mu[M, D],
    tok_scale[T], tok_sd[M], alpha[M]. The per-(row, node) work runs in two compiled passes
    (``_correct_nodes``, ``_token_nodes``, then ``_weighted``): a fit evaluates this a few hundred
    times over 10^4-10^5 calls x 16 nodes, and NumPy temporaries made that 4x slower.
    """

    def __init__(self, marginal: Marginal, correct: CorrectRows, tokens: TokenRows, num_bench: int) -> None:
        self.m = marginal
        self.c = correct
        self.t = tokens
        self.num_bench = num_bench
        # correctness rows grouped by (task, model): the calls that share one effect e_m
        self.order = np.lexsort((correct.model, correct.task))
        key = correct.task[self.order] * (int(correct.model.max(initial=0)) + 1) + correct.model[self.order]
        self.starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
        self.starts = np.append(self.starts, len(key)).astype(np.int64)

    def __call__(self, P: dict[str, np.ndarray]) -> tuple[float, dict[str, np.ndarray]]:
        """Total log-likelihood and its gradient per parameter array (natural scale)."""
        m, c, t = self.m, self.c, self.t
        z = m.z
        node_ll = np.zeros_like(z)
        a = P["skill"][c.model, c.bench] + P["bonus"][c.tool, c.domain] - P["lam"][c.model] * c.ctx
        rho = P["rho"][c.model]
        deta, drho, dtau = _correct_nodes(self.order, self.starts, c.task, a, c.poly, c.carried, rho,
                                          P["tau"][c.model], c.y, z, node_ll, _E_X, _E_LOGW)
        sd = P["tok_sd"][t.model]
        mean0 = P["tok_mu"][t.model, t.domain] + P["tok_scale"][t.tool]
        alpha = P["alpha"][t.model]
        dmean, dsd = _token_nodes(t.task, t.log_tokens, t.censored, mean0, alpha, sd, z, node_ll)
        total, post, g_mu, g_sigma = m.forward(node_ll, P["mu"], P["sigma"], self.num_bench)
        self.post = post
        g_a, g_rho, g_tau, g_mean, g_sd, g_alpha = _weighted(c.task, deta, drho, dtau, t.task, dmean, dsd, z, post)
        grads = {
            "skill": _scatter(P["skill"].shape, (c.model, c.bench), g_a),
            "bonus": _scatter(P["bonus"].shape, (c.tool, c.domain), g_a),
            "lam": np.bincount(c.model, -g_a * c.ctx, minlength=len(P["lam"])),
            "rho": np.bincount(c.model, g_rho, minlength=len(P["rho"])),
            "tau": np.bincount(c.model, g_tau, minlength=len(P["tau"])),
            "mu": g_mu,
            "sigma": g_sigma,
            "tok_mu": _scatter(P["tok_mu"].shape, (t.model, t.domain), g_mean),
            "tok_scale": np.bincount(t.tool, g_mean, minlength=len(P["tok_scale"])),
            "tok_sd": np.bincount(t.model, g_sd, minlength=len(P["tok_sd"])),
            "alpha": np.bincount(t.model, g_alpha, minlength=len(P["alpha"])),
        }
        return total, grads


@njit(cache=True)
def _correct_nodes(order, starts, task, a, poly, carried, rho, tau, y, z, node_ll, ex, elogw):  # pragma: no cover
    """Adds each (task, model) group's log-likelihood, its effect integrated out over the nodes ``ex`` (log weights
    ``elogw``), to node_ll[task]; returns d ll/d eta, d ll/d rho and d ll/d tau per (row, z node).

    ``order`` lists the rows group by group, ``starts`` each group's first position (and the end).
    """
    n, nodes, ne = len(task), z.shape[1], len(ex)
    deta = np.zeros((n, nodes))
    drho = np.zeros((n, nodes))
    dtau = np.zeros((n, nodes))
    width = 1
    for g in range(len(starts) - 1):
        width = max(width, starts[g + 1] - starts[g])
    d_eta = np.empty((width, ne))
    d_rho = np.empty((width, ne))
    ll = np.empty(ne)
    for g in range(len(starts) - 1):
        lo, hi = starts[g], starts[g + 1]
        i = task[order[lo]]
        for j in range(nodes):
            for h in range(ne):
                total = elogw[h]
                for k in range(hi - lo):
                    r = order[lo + k]
                    c1, c2, c3 = poly[r, 0], poly[r, 1], poly[r, 2]
                    p = 1.0 / (1.0 + np.exp(-(a[r] - z[i, j] + tau[r] * ex[h])))
                    q = p * (c1 + p * (c2 + p * c3))
                    dq = c1 + p * (2.0 * c2 + 3.0 * c3 * p)
                    plain = q
                    if carried[r] >= 0:
                        q = rho[r] * carried[r] + (1.0 - rho[r]) * plain
                        dq *= 1.0 - rho[r]
                    q = min(max(q, _EPS), 1.0 - _EPS)
                    if y[r] == 1:
                        total += np.log(q)
                        dll_dq = 1.0 / q
                    else:
                        total += np.log1p(-q)
                        dll_dq = -1.0 / (1.0 - q)
                    d_eta[k, h] = dll_dq * dq * p * (1.0 - p)
                    d_rho[k, h] = dll_dq * (carried[r] - plain) if carried[r] >= 0 else 0.0
                ll[h] = total
            top = ll.max()
            s = 0.0
            for h in range(ne):
                ll[h] = np.exp(ll[h] - top)
                s += ll[h]
            node_ll[i, j] += top + np.log(s)
            for k in range(hi - lo):
                r = order[lo + k]
                for h in range(ne):
                    w = ll[h] / s  # the effect's posterior weight at node h
                    deta[r, j] += w * d_eta[k, h]
                    drho[r, j] += w * d_rho[k, h]
                    dtau[r, j] += w * d_eta[k, h] * ex[h]
    return deta, drho, dtau


@njit(cache=True)
def _token_nodes(task, log_tokens, censored, mean0, alpha, sd, z, node_ll):  # pragma: no cover - compiled
    """Adds each token row's log-density (log-survival if censored at the cap) to node_ll[task].

    Returns d ll / d mean and d ll / d sd per (row, node).
    """
    n, nodes = len(task), z.shape[1]
    dmean = np.empty((n, nodes))
    dsd = np.empty((n, nodes))
    half_log_2pi = 0.5 * np.log(2.0 * np.pi)
    for r in range(n):
        i, s = task[r], sd[r]
        const = np.log(s) + half_log_2pi + log_tokens[r]
        for j in range(nodes):
            u = (log_tokens[r] - mean0[r] - alpha[r] * z[i, j]) / s
            if censored[r]:
                surv = max(0.5 * math.erfc(u / math.sqrt(2.0)), 1e-300)
                node_ll[i, j] += np.log(surv)
                hazard = np.exp(-0.5 * u * u - half_log_2pi) / surv
                dmean[r, j] = hazard / s
                dsd[r, j] = hazard * u / s
            else:
                node_ll[i, j] += -0.5 * u * u - const
                dmean[r, j] = u / s
                dsd[r, j] = (u * u - 1.0) / s
    return dmean, dsd


@njit(cache=True)
def _weighted(c_task, deta, drho, dtau, t_task, dmean, dsd, z, post):  # pragma: no cover - compiled
    """Posterior-weighted per-row gradients from the node terms of both passes."""
    nodes = z.shape[1]
    g_a = np.zeros(len(c_task))
    g_rho = np.zeros(len(c_task))
    g_tau = np.zeros(len(c_task))
    for r in range(len(c_task)):
        i = c_task[r]
        for j in range(nodes):
            w = post[i, j]
            g_a[r] += w * deta[r, j]
            g_rho[r] += w * drho[r, j]
            g_tau[r] += w * dtau[r, j]
    g_mean = np.zeros(len(t_task))
    g_sd = np.zeros(len(t_task))
    g_alpha = np.zeros(len(t_task))
    for r in range(len(t_task)):
        i = t_task[r]
        for j in range(nodes):
            w = post[i, j]
            g_mean[r] += w * dmean[r, j]
            g_sd[r] += w * dsd[r, j]
            g_alpha[r] += w * dmean[r, j] * z[i, j]
    return g_a, g_rho, g_tau, g_mean, g_sd, g_alpha


def _scatter(shape: tuple[int, ...], index: tuple[np.ndarray, ...], values: np.ndarray) -> np.ndarray:
    flat = np.ravel_multi_index(index, shape)
    return np.bincount(flat, values, minlength=int(np.prod(shape))).reshape(shape)
