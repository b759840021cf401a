"""Marginal likelihood of per-task terms with the task difficulty z integrated out by adaptive Gauss-Hermite.

Calls on one task share its hidden difficulty z ~ Normal(mu_b, sigma_b), so their outcomes are not
independent: a task's likelihood is the integral over z of the prior density times the product of its
calls' terms. Plain Gauss-Hermite centered on the prior needs many nodes once a task has several
calls (its posterior is much narrower than the prior; with 16 nodes fitted skills moved by 0.4 SE).
Adaptive quadrature (Liu and Pierce 1994; as lme4 and glmmTMB do) centers each task's nodes at its
posterior mean with its posterior spread, so 8 nodes are accurate:
  integral f(z) dz ~= sum_k w_k exp(x_k^2) sqrt(2) s_i f(m_i + sqrt(2) s_i x_k).
The centers (m_i, s_i) are held fixed while the optimizer runs, so the objective is smooth and its
gradient exact, and re-estimated between runs from the posterior weights (``recenter``) until the
log-likelihood stops moving. Because the nodes do not depend on the parameters, mu_b and sigma_b enter
only through the prior density at the nodes. Tasks whose difficulty was logged put every node at it.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp

DEFAULT_NODES = 8
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class Marginal:
    """Per-task quadrature grid; ``forward`` marginalizes node log-likelihoods and differentiates the prior."""

    def __init__(self, task_bench: np.ndarray, known_z: np.ndarray, nodes: int = DEFAULT_NODES) -> None:
        x, w = np.polynomial.hermite.hermgauss(nodes)
        self.x = math.sqrt(2.0) * x
        self.log_w = np.log(w) + x ** 2  # adaptive: the Gaussian kernel is divided out
        self.log_w_plain = np.log(w / math.sqrt(math.pi))  # normalized weights, for logged difficulties
        self.task_bench = np.asarray(task_bench, np.int64)
        self.known_z = np.asarray(known_z, np.float64)
        self.known = np.isfinite(self.known_z)
        self.num_tasks = len(self.task_bench)
        self.center = np.zeros(self.num_tasks)
        self.scale = np.ones(self.num_tasks)
        self.z = np.zeros((self.num_tasks, nodes))
        self.log_adj = np.zeros((self.num_tasks, nodes))

    def place(self, center: np.ndarray, scale: np.ndarray) -> None:
        """Put each task's nodes at ``center + scale * x`` (logged difficulties stay where they are)."""
        self.center = np.where(self.known, self.known_z, center)
        self.scale = np.where(self.known, 1.0, np.maximum(scale, 1e-3))
        self.z = self.center[:, None] + self.scale[:, None] * self.x[None, :]
        self.log_adj = self.log_w[None, :] + np.log(self.scale)[:, None] + 0.5 * math.log(2.0)
        if self.known.any():
            self.z[self.known] = self.known_z[self.known, None]
            self.log_adj[self.known] = self.log_w_plain[None, :]

    def place_prior(self, mu: np.ndarray, sigma: np.ndarray) -> None:
        """Start from the prior: the nodes of plain Gauss-Hermite."""
        self.place(mu[self.task_bench], sigma[self.task_bench])

    def forward(self, node_ll: np.ndarray, mu: np.ndarray, sigma: np.ndarray,
                num_bench: int) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """Total log-likelihood, posterior node weights [T, K] and the gradients in mu_b and sigma_b.

        ``node_ll[T, K]`` is the sum of each task's row log-likelihoods at its nodes ``self.z``.
        For a task with logged difficulty the prior density of the logged value is included, so such
        tasks inform mu_b and sigma_b directly.
        """
        m, s = mu[self.task_bench, None], sigma[self.task_bench, None]
        u = (self.z - m) / s
        log_prior = -0.5 * u ** 2 - np.log(s) - _HALF_LOG_2PI
        a = node_ll + log_prior + self.log_adj
        per_task = logsumexp(a, axis=1)
        post = np.exp(a - per_task[:, None])
        g_mu = np.bincount(self.task_bench, (post * u / s).sum(1), minlength=num_bench)
        g_sigma = np.bincount(self.task_bench, (post * (u ** 2 - 1.0) / s).sum(1), minlength=num_bench)
        return float(per_task.sum()), post, g_mu, g_sigma

    def recenter(self, post: np.ndarray) -> None:
        """Move each task's nodes to its current posterior mean and standard deviation."""
        mean = (post * self.z).sum(1)
        sd = np.sqrt(np.maximum((post * (self.z - mean[:, None]) ** 2).sum(1), 0.0))
        self.place(mean, sd)
