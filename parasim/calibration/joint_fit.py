"""The call model's joint structure fitted to per-query outcomes: difficulty spread, per-(question, model) effects,
model families, and wrong-answer agreement against accuracy.

The model is the simulator's (``parasim.sim.kernel.draw_model_effects``, ``call_outcome``): a sample of model m on
question q is right with

  p_qm = sigmoid(theta_m - sigma x_q + tau (sqrt(o) k_qh + sqrt(w) f_qg + sqrt(1 - o - w) u_qm)),   x, k, f, u ~ N(0, 1)

(x_q the question's shared difficulty, k_qh one draw per question and model kind h (reasoning against chat models),
f_qg one per question and family g, u_qm the model's own; theta_m = skill minus the benchmark's difficulty mean;
families are nested in kinds, so the likelihood still factorizes), and repeated samples of one model on one question
are independent given p_qm,
so their agreement is set by the spread of p_qm, sigma^2 + tau^2: that, not the samples, is what is fitted.
``fit_correctness`` maximizes the exact marginal likelihood of a benchmark's [questions, models] success counts
(Gauss-Hermite over x, k, f and u; torch gives the gradient, ``parasim.calibration.mle`` the optimizer and Hessian
standard errors). tau is identified apart from sigma only by repeated samples (how much more a model agrees with
itself than with others); on single-sample tables pass ``tau`` fixed.

Two wrong answers of models m != m' on one question agree with probability (``parasim.calibration.agreement``)

  A_mm' = S + (1 - S) (c_m c_m' + d^2 [m, m' one family]),   c_m = sigmoid(a0 + a1 logit(acc_m))

(c_m = kappa_m affinity_m, d = kappa (1 - affinity) family_wrong in the simulator's terms, S = sum_j q_j^2 of the
benchmark's distractor weights): a1 > 0 is Kim et al.'s finding that stronger models share more wrong answers.
``fit_agreement`` maximizes the composite (pairwise) likelihood of the pair counts; pairs that share a question
are dependent, so its standard errors are the sandwich over questions, not the Hessian's.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize

from parasim.calibration.irt import same_wrong_probability
from parasim.calibration.joint_stats import OutcomeMatrix
from parasim.calibration.mle import Estimate, maximize
from parasim.calibration.params import Block, Layout
from parasim.pools.harness import temperature_scale
from parasim.pools.param_groups import DOMAINS
from parasim.tasks.suites import BENCHMARK_INDEX, BENCHMARKS

Z_NODES, F_NODES, U_NODES = 24, 8, 8  # Gauss-Hermite nodes over the difficulty, the family and the model effect
K_NODES = 6  # over the kind (a table with kinds costs K_NODES times one without)
_CHUNK = 512  # questions per autograd pass (bounds the [chunk, Z, F, U, M] temporaries)


def _nodes(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return torch.tensor(x, dtype=torch.float64), torch.tensor(np.log(w / w.sum()), dtype=torch.float64)


def family_groups(models: Sequence[str], family: dict[str, str] | None) -> np.ndarray:
    """Each model's group index: models with the same family name share one, a model without a family its own."""
    names: dict[str, int] = {}
    out = np.empty(len(models), np.int64)
    for j, m in enumerate(models):
        key = (family or {}).get(m) or f"\0{m}"
        out[j] = names.setdefault(key, len(names))
    return out


@dataclass(frozen=True)
class CorrectnessFit:
    """``fit_correctness``'s result: per-model theta, sigma, tau, the family share w and the kind share o, with SEs
    (NaN where fixed)."""

    models: list[str]
    theta: np.ndarray
    theta_se: np.ndarray
    sigma: float
    sigma_se: float
    tau: float
    tau_se: float
    share: float
    share_se: float
    loglik: float
    estimate: Estimate
    kind_share: float = 0.0
    kind_share_se: float = float("nan")


def _onehot(index: np.ndarray) -> torch.Tensor:
    out = torch.zeros(len(index), int(index.max()) + 1, dtype=torch.float64)
    out[torch.arange(len(index)), torch.as_tensor(index)] = 1.0
    return out


def kind_of_groups(groups: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Per family group, its kind index, from each model's group and kind; a ValueError when a family spans two
    kinds (families must nest in kinds for the likelihood to factorize: name a maker's reasoning and chat models as
    two families)."""
    out = np.full(int(groups.max()) + 1, -1, np.int64)
    for g, k in zip(groups, kinds):
        if out[g] not in (-1, k):
            raise ValueError(f"kinds: family group {int(g)} has models of two kinds; families must nest in kinds")
        out[g] = k
    return out


def correctness_loglik(hits: torch.Tensor, samples: torch.Tensor, groups: np.ndarray, theta: torch.Tensor,
                       sigma: torch.Tensor, tau: torch.Tensor, share: torch.Tensor, family_nodes: int,
                       kinds: np.ndarray | None = None, kind_share: torch.Tensor | None = None,
                       strata: np.ndarray | None = None, shifts: torch.Tensor | None = None) -> torch.Tensor:
    """The marginal log-likelihood (binomial coefficients left out) of success counts ``hits`` out of ``samples``
    ([Q, M]; 0 samples: not observed), questions independent, by nested Gauss-Hermite (module docstring);
    ``kinds``: each model's kind index (None: no kind level), ``kind_share`` its share o; ``strata``: each
    question's design stratum (``design_strata``; None: one), whose difficulty mean is ``shifts[stratum]`` above
    stratum 0's."""
    zx, zlw = _nodes(Z_NODES)
    fx, flw = _nodes(family_nodes)
    ux, ulw = _nodes(U_NODES)
    with_kinds = kinds is not None and kind_share is not None
    kx, klw = _nodes(K_NODES) if with_kinds else (torch.zeros(1, dtype=torch.float64),
                                                   torch.zeros(1, dtype=torch.float64))
    o = kind_share if with_kinds else torch.zeros((), dtype=torch.float64)
    member = _onehot(groups)  # [M, G]
    group_kind = _onehot(kind_of_groups(groups, kinds) if with_kinds else np.zeros(member.shape[1], np.int64))
    own = torch.clamp(1.0 - share - o, min=1e-9)  # w and o each in (0, 1) on their logit scales: their sum may pass 1
    effect = tau * (torch.sqrt(o) * kx[:, None, None] + torch.sqrt(share) * fx[None, :, None]
                    + torch.sqrt(own) * ux[None, None, :])  # [K, F, U]
    eta = theta - sigma * zx[:, None, None, None, None] + effect[None, :, :, :, None]  # [Z, K, F, U, M]
    total = torch.zeros((), dtype=torch.float64)
    chunk = max(16, _CHUNK // len(kx))
    rows = [np.arange(hits.shape[0])] if strata is None else [np.flatnonzero(strata == g)
                                                             for g in range(int(strata.max()) + 1)]
    for g, idx in enumerate(rows):
        eta_g = eta if g == 0 else eta - shifts[g]
        lp, lq = torch.nn.functional.logsigmoid(eta_g), torch.nn.functional.logsigmoid(-eta_g)
        hits_g, samples_g = (hits, samples) if strata is None else (hits[idx], samples[idx])
        for lo in range(0, len(idx), chunk):
            k, n = hits_g[lo:lo + chunk], samples_g[lo:lo + chunk]
            ll = k[:, None, None, None, None, :] * lp[None] + (n - k)[:, None, None, None, None, :] * lq[None]
            ll = torch.logsumexp(ll + ulw[None, None, None, None, :, None], dim=4)  # [Q, Z, K, F, M]
            ll = ll @ member  # [Q, Z, K, F, G]: the members of each group given the family draw
            ll = torch.logsumexp(ll + flw[None, None, None, :, None], dim=3)  # [Q, Z, K, G]
            ll = ll @ group_kind  # [Q, Z, K, H]: the groups of each kind given the kind draw
            ll = torch.logsumexp(ll + klw[None, None, :, None], dim=2).sum(-1)  # [Q, Z]
            total = total + torch.logsumexp(ll + zlw[None, :], dim=1).sum()
    return total


STRATUM_MIN_SHARE = 0.05  # a pattern of answered questions this common is a design stratum of its own


def design_strata(om: OutcomeMatrix) -> tuple[np.ndarray, np.ndarray]:
    """The table's design: per question its stratum (0: the most common pattern of which models answered it; 1,
    2, ...: each other pattern held by at least ``STRATUM_MIN_SHARE`` of the questions; rarer ones count as 0) and
    per stratum the models its pattern observed (bool[S, M]).

    Why: a leaderboard runs a model on the problems of its time, so the questions some models were not run on are
    not a random subset (LiveCodeBench: the 175 problems six earlier models lack are 10-19 points harder for the
    models that have them). Simulating a table of the same design needs those strata and their difficulty."""
    seen = om.samples > 0
    patterns, counts = np.unique(seen, axis=0, return_counts=True)
    first = int(np.argmax(counts))
    order = [first] + [int(i) for i in np.argsort(-counts, kind="stable")
                       if i != first and counts[i] >= STRATUM_MIN_SHARE * len(seen)]
    observed = patterns[order]
    return strata_of(om, observed), observed


def strata_of(om: OutcomeMatrix, observed: np.ndarray) -> np.ndarray:
    """Per question of ``om``, the stratum (of ``design_strata``'s ``observed`` patterns) whose pattern its answered
    models match, 0 when none does."""
    seen = om.samples > 0
    out = np.zeros(len(seen), np.int64)
    for g in range(len(observed) - 1, 0, -1):
        out[(seen == observed[g]).all(1)] = g
    return out


def design_theta(accuracy: np.ndarray, weights: np.ndarray, shifts: np.ndarray, sd: float) -> np.ndarray:
    """Each model's theta whose expected accuracy over the strata it was observed in, weighted by ``weights``
    ([S, M]: its samples per stratum), is ``accuracy`` [M], stratum g's difficulty ``shifts[g]`` higher, under a
    normal logit spread ``sd`` (``solve_skill`` with one stratum)."""
    from scipy.optimize import brentq

    from parasim.pools.pool import expected_accuracy, solve_skill

    if len(shifts) == 1:
        return solve_skill(np.clip(accuracy, 1e-4, 1 - 1e-4), np.array(0.0), np.array(sd))
    w = weights / np.maximum(weights.sum(0, keepdims=True), 1e-12)
    out = np.empty(len(accuracy))
    def gap(t: float, j: int, a: float) -> float:
        return float(sum(w[g, j] * expected_accuracy(np.array(t - shifts[g]), np.array(0.0), np.array(sd))
                         for g in range(len(shifts)))) - a

    for j, a in enumerate(np.clip(accuracy, 1e-4, 1 - 1e-4)):
        out[j] = brentq(gap, -20 * sd - 50, 20 * sd + 50, args=(j, float(a)))
    return out


def fit_design_shift(om: OutcomeMatrix, fit: CorrectnessFit, strata: np.ndarray, family: dict[str, str] | None = None,
                     kind: dict[str, str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each design stratum's difficulty shift over stratum 0's (and its Hessian SE; 0 for stratum 0), by maximum
    likelihood over the shifts and every model's theta, with the spreads and shares held at ``fit`` (a second
    stage: the structure is fitted first, on every question as one population). theta is refitted with the shifts:
    held at the pooled fit's, a model that answered the harder stratum would keep the part of the shift its pooled
    theta absorbed, and the shift would come out low."""
    groups = family_groups(om.models, family)
    kinds = family_groups(om.models, kind)
    has_kind = fit.kind_share > 0
    hits = torch.tensor(om.hits, dtype=torch.float64)
    samples = torch.tensor(om.samples, dtype=torch.float64)
    fn = F_NODES if bool(np.bincount(groups).max() > 1) else 1
    sigma, tau, share, kind_share = (torch.tensor(v, dtype=torch.float64)
                                     for v in (fit.sigma, fit.tau, fit.share, fit.kind_share))
    count = int(strata.max()) + 1
    layout = Layout([Block("theta", fit.theta, True, axes=(om.models,)), Block("shift", np.zeros(count - 1), True)])

    def objective(vec: np.ndarray) -> tuple[float, np.ndarray]:
        values, jac = layout.unpack(vec)
        params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in values.items()}
        shifts = torch.cat([torch.zeros(1, dtype=torch.float64), params["shift"]])
        ll = correctness_loglik(hits, samples, groups, params["theta"], sigma, tau, share, fn,
                                kinds if has_kind else None, kind_share if has_kind else None, strata, shifts)
        ll.backward()
        return float(ll.detach()), layout.gradient({k: p.grad.numpy() for k, p in params.items()}, jac)

    est = maximize(objective, layout)
    lab = dict(zip(est.labels, zip(est.value, est.se)))
    shift = np.array([0.0] + [lab[f"shift[{g}]"][0] for g in range(count - 1)])
    se = np.array([0.0] + [lab[f"shift[{g}]"][1] for g in range(count - 1)])
    return shift, se


def fit_correctness(om: OutcomeMatrix, family: dict[str, str] | None = None, *, tau: float | None = None,
                    kind: dict[str, str] | None = None, start_sigma: float = 2.0,
                    start_tau: float = 1.0) -> CorrectnessFit:
    """Maximum-likelihood theta, sigma, tau (free unless given), the family share (free when some family has two
    or more models in the table) and the kind share (free when two kinds have two or more families each: with one
    kind it is sigma, with a kind of one family w, and a kind held by a single outsider model identifies it only
    through that model) of one benchmark's outcomes, with Hessian standard
    errors. ``kind`` maps models to kinds (a model without one is a kind of its own); families must nest in kinds."""
    groups = family_groups(om.models, family)
    kinds = family_groups(om.models, kind)
    has_family = bool(np.bincount(groups).max() > 1)
    has_kind = kind is not None and int((np.bincount(kind_of_groups(groups, kinds)) > 1).sum()) > 1
    rate = np.clip(np.nansum(om.hits, 0) / np.maximum(om.samples.sum(0), 1), 0.02, 0.98)
    blocks = [Block("theta", np.log(rate / (1 - rate)) * 1.5, True, axes=(om.models,)),
              Block("sigma", [start_sigma], True, "log"),
              Block("tau", [start_tau if tau is None else max(tau, 1e-9)], tau is None, "log"),
              Block("share", [0.3 if has_family else 0.0], has_family, "logit"),
              Block("kind_share", [0.1 if has_kind else 0.0], has_kind, "logit")]
    layout = Layout(blocks)
    hits = torch.tensor(om.hits, dtype=torch.float64)
    samples = torch.tensor(om.samples, dtype=torch.float64)
    fn = F_NODES if has_family else 1

    def objective(vec: np.ndarray) -> tuple[float, np.ndarray]:
        values, jac = layout.unpack(vec)
        params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in values.items()}
        ll = correctness_loglik(hits, samples, groups, params["theta"], params["sigma"][0], params["tau"][0],
                                params["share"][0], fn, kinds if has_kind else None,
                                params["kind_share"][0] if has_kind else None)
        ll.backward()
        grads = {k: (p.grad.numpy() if p.grad is not None else np.zeros_like(v)) for (k, p), v in
                 zip(params.items(), values.values())}
        return float(ll.detach()), layout.gradient(grads, jac)

    est = maximize(objective, layout)
    lab = dict(zip(est.labels, zip(est.value, est.se)))
    nan = (float("nan"), float("nan"))
    theta = np.array([lab[f"theta[{x}]"][0] for x in om.models])
    theta_se = np.array([lab[f"theta[{x}]"][1] for x in om.models])
    sig = lab["sigma[0]"]
    ta = lab.get("tau[0]", (float(tau), float("nan")) if tau is not None else nan)
    sh = lab.get("share[0]", (0.0, float("nan")))
    ks = lab.get("kind_share[0]", (0.0, float("nan")))
    return CorrectnessFit(list(om.models), theta, theta_se, float(sig[0]), float(sig[1]), float(ta[0]), float(ta[1]),
                          float(sh[0]), float(sh[1]), est.loglik, est, float(ks[0]), float(ks[1]))


@dataclass(frozen=True)
class AgreementFit:
    """``fit_agreement``'s result: a0, a1 (c = sigmoid(a0 + a1 logit(acc))), d and the chance agreement S, with
    sandwich SEs (S's NaN where it was given)."""

    a0: float
    a1: float
    d: float
    se: np.ndarray  # SEs of (a0, a1, d)
    pairs: int  # both-wrong pairs used
    s_chance: float = float("nan")  # S = sum_j q_j^2 of the distractor weights, given or fitted
    s_se: float = float("nan")

    def c(self, accuracy: np.ndarray | float) -> np.ndarray:
        """kappa * affinity of a model of this accuracy (the fitted curve)."""
        a = np.clip(np.asarray(accuracy, np.float64), 1e-6, 1 - 1e-6)
        return 1.0 / (1.0 + np.exp(-(self.a0 + self.a1 * np.log(a / (1 - a)))))


def chance_agreement(zipf_s: float, answers: int) -> float:
    """S = sum_j q_j^2 of Zipf distractor weights q_j ~ j^-zipf_s over the ``answers`` - 1 wrong answers: how often
    two independent draws from them agree (``same_wrong_probability`` without a preferred answer)."""
    return same_wrong_probability(0.0, zipf_s, answers)


def zipf_exponent(s_chance: float, answers: int) -> float:
    """The Zipf exponent whose distractor weights over ``answers`` - 1 wrong answers have chance agreement
    ``s_chance`` (``chance_agreement``'s inverse; S rises from 1 / (answers - 1) at exponent 0 towards 1)."""
    lo_s = 1.0 / (answers - 1)
    if not lo_s <= s_chance < 1.0:
        raise ValueError(f"zipf_exponent: S = {s_chance!r} is outside [{lo_s:.4f}, 1) for {answers} answers")
    lo, hi = 0.0, 1.0
    while chance_agreement(hi, answers) < s_chance:
        hi *= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if chance_agreement(mid, answers) < s_chance else (lo, mid)
    return 0.5 * (lo + hi)


def temperature_spread(spread: float, fitted_at: float, sampled_at: float) -> float:
    """A logit spread (sigma or tau) fitted on samples drawn at temperature ``fitted_at`` carried to sampling at
    ``sampled_at``: spread * fitted_at / sampled_at (``parasim.pools.harness.temperature_scale``, the law the
    simulator's ``harness.temperature`` option applies to a pool's calls).

    Why this law: sampling at temperature T draws from softmax(l / T), so every log-odds between two choices is its
    T = 1 value over T. Read a sample's correctness as one such choice and its log-odds theta_m - z_q + tau e_qm is
    divided by T as a whole: the shared difficulty's spread sigma as much as the per-(question, model) effect's tau,
    since z_q is as much a part of the model's log-odds on q as e_qm is (theta_m scales too, but is re-solved on the
    accuracy published at the new temperature). Scaling tau alone is the other reading: the question's difficulty a
    property of the questions, not of the sampling. What the law leaves out: a sample is a chain of token choices
    (each renormalized, so a sequence's log-odds is not exactly linear in 1 / T), top-p truncation, and a model's
    skill that does not scale with the temperature; it is an approximation to test, not a derivation."""
    for name, t in (("fitted_at", fitted_at), ("sampled_at", sampled_at)):
        if not (np.isfinite(t) and t > 0):
            raise ValueError(f"temperature_spread: {name} must be a finite temperature > 0, got {t!r}")
    if not (np.isfinite(spread) and spread >= 0):
        raise ValueError(f"temperature_spread: spread must be a finite number >= 0, got {spread!r}")
    return float(spread) * temperature_scale(fitted_at, sampled_at)


def _pair_arrays(om: OutcomeMatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per (question, model pair) with both single samples wrong and both answers known: question, the two model
    columns and whether the answers agree."""
    single = om.samples == 1
    wrong = single & (om.hits == 0) & (om.answer >= 0)
    qs, ms1, ms2, agree = [], [], [], []
    m = len(om.models)
    for i in range(m):
        for j in range(i + 1, m):
            q = np.flatnonzero(wrong[:, i] & wrong[:, j])
            qs.append(q)
            ms1.append(np.full(len(q), i))
            ms2.append(np.full(len(q), j))
            agree.append(om.answer[q, i] == om.answer[q, j])
    return (np.concatenate(qs), np.concatenate(ms1), np.concatenate(ms2),
            np.concatenate(agree).astype(np.float64))


def fit_agreement(om: OutcomeMatrix, s_chance: float | None, family: dict[str, str] | None = None, *,
                  answers: int | None = None) -> AgreementFit:
    """The wrong-answer agreement curve of one single-sample benchmark table (module docstring); ``s_chance`` is the
    benchmark's S = sum_j q_j^2 (``parasim.calibration.agreement``), or None to fit S too, in [1 / (answers - 1), 1)
    (a free-form benchmark's answer space is not known in advance: the fitted S gives its distractor weights'
    Zipf exponent, ``zipf_exponent``; S is told apart from the curve because the curve's share c c' falls with the
    pair's accuracy and S does not). d is fitted only when a family has two models in the table (else 0)."""
    q, i, j, y = _pair_arrays(om)
    if len(y) == 0:
        raise ValueError("fit_agreement: no question on which two models with answers both erred")
    fit_s = s_chance is None
    if fit_s and (answers is None or answers < 3):
        raise ValueError(f"fit_agreement: fitting S needs the answer count (>= 3), got answers={answers!r}")
    s_lo = 1.0 / (answers - 1) if fit_s else 0.0
    acc = np.clip(np.nansum(om.hits, 0) / np.maximum(om.samples.sum(0), 1), 1e-3, 1 - 1e-3)
    la = np.log(acc / (1 - acc))
    groups = family_groups(om.models, family)
    same = (groups[i] == groups[j]).astype(np.float64)
    use_d = bool(same.any())
    free = [0, 1] + ([2] if use_d else []) + ([3] if fit_s else [])  # of (a0, a1, log d, logit of S's position)

    def parts(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a0, a1, ld, ls = v
        c = 1.0 / (1.0 + np.exp(-(a0 + a1 * la)))
        d2 = np.exp(2 * ld) if use_d else 0.0
        pos = 1.0 / (1.0 + np.exp(-ls))
        sc = s_lo + (1.0 - s_lo) * pos if fit_s else s_chance
        x = c[i] * c[j] + d2 * same
        a = np.clip(sc + (1 - sc) * x, 1e-9, 1 - 1e-9)
        dll_da = y / a - (1 - y) / (1 - a)
        dc = c * (1 - c)
        dx = np.stack([dc[i] * c[j] + c[i] * dc[j], la[i] * dc[i] * c[j] + c[i] * la[j] * dc[j],
                       2 * d2 * same if use_d else np.zeros_like(x)], 1)
        ds = (1 - x) * (1.0 - s_lo) * pos * (1 - pos) if fit_s else np.zeros_like(x)
        score = dll_da[:, None] * np.concatenate([(1 - sc) * dx, ds[:, None]], 1)  # per pair, on v
        ll = y * np.log(a) + (1 - y) * np.log1p(-a)
        return ll, score

    def negative(v: np.ndarray) -> tuple[float, np.ndarray]:
        ll, score = parts(v)
        return -float(ll.sum()), -score.sum(0)

    start = np.array([0.0, 0.5, np.log(0.2), -2.0])
    fixed_d = (np.log(0.2), np.log(0.2))
    res = minimize(negative, start, jac=True, method="L-BFGS-B",
                   bounds=[(-10, 10), (-5, 5), (-8, 0) if use_d else fixed_d, (-10, 10) if fit_s else (-2.0, -2.0)])
    v = res.x
    k = len(free)
    step = 1e-5
    h = np.empty((k, k))
    for r, a in enumerate(free):
        e = np.zeros(4)
        e[a] = step
        h[r] = (negative(v + e)[1][free] - negative(v - e)[1][free]) / (2 * step)
    h = 0.5 * (h + h.T)
    _, score = parts(v)
    per_q = np.zeros((int(q.max()) + 1, 4))
    np.add.at(per_q, q, score)
    meat = per_q[:, free].T @ per_q[:, free]
    bread = np.linalg.inv(h)
    cov = np.full((4, 4), np.nan)
    cov[np.ix_(free, free)] = bread @ meat @ bread
    se4 = np.sqrt(np.diag(cov))
    d = float(np.exp(v[2])) if use_d else 0.0
    se = se4[:3].copy()
    if use_d:
        se[2] *= d  # delta method from log d
    else:
        se[2] = np.nan
    if fit_s:
        pos = 1.0 / (1.0 + np.exp(-v[3]))
        s_val, s_se = s_lo + (1.0 - s_lo) * pos, float(se4[3] * (1.0 - s_lo) * pos * (1 - pos))
    else:
        s_val, s_se = float(s_chance), float("nan")
    return AgreementFit(float(v[0]), float(v[1]), d, se, len(y), float(s_val), s_se)


@dataclass(frozen=True)
class StructureModel:
    """One model of a ``structure_pool``: its logit theta on the benchmark (skill minus the difficulty mean, the
    scale ``fit_correctness`` reports), and its joint-structure parameters in the pool file's terms."""

    name: str
    theta: float
    tau: float
    kappa: float
    affinity: float
    family: str | None = None
    family_share: float = 0.0
    family_wrong: float = 0.0
    kind: str | None = None
    kind_share: float = 0.0


def structure_pool(base: dict, benchmark: str, models: Sequence[StructureModel], source: str) -> dict:
    """A pool file (raw JSON) whose agent models are ``models``, every other group copied from the pool file ``base``
    (its first model's, and its tools and protocol): the skill of the benchmark's domain is theta + mu_b minus the
    direct tool's bonus, so that a direct call has logit theta - (z - mu_b); output lengths are set short (log median
    3, about 20 tokens) so that no call reaches the cap and a sample's correctness is the joint structure's alone.
    The last model is the pool's manager (a ``simulated_outcomes`` table may name it), so a pool holds up to
    MAX_MODELS + 1 of them. ``source`` names where the structure came from (a pool-file source key)."""
    b = BENCHMARKS[BENCHMARK_INDEX[benchmark]]
    domain = DOMAINS[int(b.domain)]
    template = base["models"][0]
    direct = base["tools"]["standard_reasoner"]["bonus"][domain]
    out = []
    for m in models:
        raw = {k: v for k, v in template.items() if k not in ("accuracy", "context")}
        raw["name"] = m.name
        skill = {d: 0.0 for d in DOMAINS}
        skill[domain] = round(m.theta + b.mu - direct, 6)
        raw["skill"] = {**skill, "source": source}
        raw["errors"] = {"kappa": m.kappa, "affinity": m.affinity, "family_share": m.family_wrong, "source": source}
        raw["interaction"] = {"sd": m.tau, "family_share": m.family_share, "source": source,
                              **({"family": m.family} if m.family else {}),
                              **({"kind": m.kind, "kind_share": m.kind_share} if m.kind else {})}
        raw["tokens_out"] = {**template["tokens_out"], "log_median": {d: 3.0 for d in DOMAINS}}
        out.append(raw)
    pool = {k: v for k, v in base.items() if k not in ("models", "manager")}
    pool["name"] = f"structure_{benchmark}"
    pool["models"], pool["manager"] = out[:-1], out[-1]
    return pool
