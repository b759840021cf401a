"""Maximum likelihood over a ``Layout``: L-BFGS-B with analytic gradients, Hessian standard errors.

The observed information is the Hessian of the negative log-likelihood at the optimum, taken by
central differences of the analytic gradient (exact enough, and one gradient pair per parameter
instead of an error-prone second-derivative derivation for every model term). Its inverse is the
asymptotic covariance; the delta method carries it to the natural parameter scale (``Layout.natural``).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeResult, minimize

from parasim.calibration.params import Layout

Objective = Callable[[np.ndarray], tuple[float, np.ndarray]]  # vec -> (log-likelihood, gradient)


@dataclass
class Estimate:
    """A fitted part of the model: labels, natural-scale estimates and SEs, log-likelihood, diagnostics."""

    layout: Layout
    vec: np.ndarray
    labels: list[str]
    value: np.ndarray
    se: np.ndarray
    loglik: float
    converged: bool
    message: str
    info: np.ndarray | None = None  # observed information (unconstrained scale); None if not positive definite
    status: int = 0  # L-BFGS-B's: 0 converged, 1 evaluation / iteration limit, 2 abnormal stop (a broken likelihood)

    def wald(self, truth: np.ndarray) -> float:
        """(vec - truth)' I (vec - truth) on the unconstrained scale: chi-square with num_params dof at the truth."""
        if self.info is None:
            return math.nan
        d = self.vec - truth
        return float(d @ self.info @ d)

    @property
    def num_params(self) -> int:
        return len(self.vec)


def hessian(objective: Objective, vec: np.ndarray, step: float = 1e-4) -> np.ndarray:
    """Symmetrized central-difference Hessian of the log-likelihood from its gradient."""
    n = len(vec)
    h = np.empty((n, n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = step * max(1.0, abs(vec[i]))
        h[i] = (objective(vec + e)[1] - objective(vec - e)[1]) / (2.0 * e[i])
    return 0.5 * (h + h.T)


def optimize(objective: Objective, start: np.ndarray, *, max_iter: int = 2000, tol: float = 1e-10) -> OptimizeResult:
    """L-BFGS-B on the negative log-likelihood from ``start``."""

    def negative(vec: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = objective(vec)
        return -value, -grad

    return minimize(negative, start, jac=True, method="L-BFGS-B",
                    options={"maxiter": max_iter, "ftol": tol, "gtol": 1e-6, "maxcor": 30})


def maximize(objective: Objective, layout: Layout, *, start: np.ndarray | None = None,
             max_iter: int = 2000) -> Estimate:
    """Fit ``layout``'s free parameters by maximizing ``objective``; SEs from the inverse observed information."""
    if layout.size == 0:
        loglik = objective(layout.initial())[0]
        return Estimate(layout, np.zeros(0), [], np.zeros(0), np.zeros(0), loglik, True, "no free parameters",
                        np.zeros((0, 0)))

    res = optimize(objective, layout.initial() if start is None else start, max_iter=max_iter)
    info = -hessian(objective, res.x)
    try:
        cov = np.linalg.inv(info)
        if not np.all(np.isfinite(cov)) or np.any(np.diag(cov) <= 0):
            raise np.linalg.LinAlgError("observed information is not positive definite")
        message = str(res.message)
    except np.linalg.LinAlgError as err:
        cov, info = None, None
        message = f"{res.message}; no standard errors: {err} (a parameter is not identified by this log)"
    value, se = layout.natural(res.x, cov)
    return Estimate(layout, res.x, layout.labels(), value, se, -float(res.fun), bool(res.success), message, info,
                    int(res.status))
