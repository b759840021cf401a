"""Named parameter blocks packed into the flat vector scipy optimizes.

Each block is an array on its natural scale (a skill in logits, a probability, a standard deviation)
with a mask of which entries are free, and a transform to an unconstrained scale (identity, log or
logit) so the optimizer never leaves the parameter space. Fixed entries pin what the data cannot
identify (a per-domain offset between skills and tool bonuses, the benchmark difficulty means).
Standard errors are computed on the unconstrained scale and carried to the natural one by the delta
method, which is why the layout, not the model, owns the transforms.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TRANSFORMS = ("identity", "log", "logit")


@dataclass
class Block:
    """One parameter array: natural-scale start values, which entries are free, the transform, labels."""

    name: str
    value: np.ndarray
    free: np.ndarray
    transform: str = "identity"
    axes: tuple[Sequence[str], ...] = ()
    # "log" only: the natural value is ``lower + exp(u)``, so a parameter that the data push to 0 (a spread of
    # identical values) stops at its floor instead of underflowing to 0 in a division
    lower: float = 0.0

    def __post_init__(self) -> None:
        self.value = np.asarray(self.value, np.float64).copy()
        self.free = np.broadcast_to(np.asarray(self.free, bool), self.value.shape).copy()
        if self.transform not in TRANSFORMS:
            raise ValueError(f"{self.name}.transform: expected one of {TRANSFORMS}, got {self.transform!r}")
        if self.lower and self.transform != "log":
            raise ValueError(f"{self.name}.lower: only a log-scale block has a floor, got transform {self.transform!r}")
        if self.transform == "log" and np.any(self.value[self.free] <= self.lower):
            raise ValueError(f"{self.name}: log-scale start values must be > {self.lower:g}")
        if self.transform == "logit" and np.any((self.value[self.free] <= 0) | (self.value[self.free] >= 1)):
            raise ValueError(f"{self.name}: logit-scale start values must be in (0, 1)")

    def labels(self) -> list[str]:
        """``name[a,b]`` for each free entry, with axis labels where given."""
        out = []
        for idx in zip(*np.nonzero(self.free)):
            parts = [str(self.axes[k][i]) if k < len(self.axes) else str(i) for k, i in enumerate(idx)]
            out.append(f"{self.name}[{','.join(parts)}]" if parts else self.name)
        return out


def _forward(transform: str, x: np.ndarray, lower: float = 0.0) -> np.ndarray:
    if transform == "log":
        return np.log(x - lower)
    if transform == "logit":
        return np.log(x) - np.log1p(-x)
    return x


def _inverse(transform: str, u: np.ndarray, lower: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Natural value and its derivative d value / d u."""
    if transform == "log":
        x = np.exp(u)
        return lower + x, x
    if transform == "logit":
        x = 1.0 / (1.0 + np.exp(-u))
        return x, x * (1.0 - x)
    return u, np.ones_like(u)


class Layout:
    """Packs free entries of named blocks into one vector and back."""

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = {b.name: b for b in blocks}
        self.slices: dict[str, slice] = {}
        start = 0
        for b in blocks:
            n = int(b.free.sum())
            self.slices[b.name] = slice(start, start + n)
            start += n
        self.size = start

    def initial(self) -> np.ndarray:
        """The start vector (unconstrained scale)."""
        vec = np.empty(self.size)
        for name, b in self.blocks.items():
            vec[self.slices[name]] = _forward(b.transform, b.value[b.free], b.lower)
        return vec

    def pack(self, values: dict[str, np.ndarray]) -> np.ndarray:
        """The unconstrained vector of the free entries of natural-scale ``values`` (e.g. a known truth)."""
        vec = np.empty(self.size)
        for name, b in self.blocks.items():
            vec[self.slices[name]] = _forward(b.transform, np.asarray(values[name], np.float64)[b.free], b.lower)
        return vec

    def unpack(self, vec: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Natural-scale arrays per block, and d natural / d unconstrained for the free entries."""
        values, jac = {}, {}
        for name, b in self.blocks.items():
            x = b.value.copy()
            nat, d = _inverse(b.transform, vec[self.slices[name]], b.lower)
            x[b.free] = nat
            values[name], jac[name] = x, d
        return values, jac

    def gradient(self, grads: dict[str, np.ndarray], jac: dict[str, np.ndarray]) -> np.ndarray:
        """Chain natural-scale gradients (full block shapes) to the packed vector."""
        out = np.zeros(self.size)
        for name, b in self.blocks.items():
            g = grads.get(name)
            if g is not None:
                out[self.slices[name]] = g[b.free] * jac[name]
        return out

    def labels(self) -> list[str]:
        return [label for b in self.blocks.values() for label in b.labels()]

    def natural(self, vec: np.ndarray, cov: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Free entries on the natural scale and their delta-method standard errors (NaN without ``cov``)."""
        values, jac = self.unpack(vec)
        nat = np.concatenate([values[n][b.free] for n, b in self.blocks.items()]) if self.size else np.zeros(0)
        d = np.concatenate([jac[n] for n in self.blocks]) if self.size else np.zeros(0)
        if cov is None:
            return nat, np.full(self.size, np.nan)
        var = np.diag(cov).copy()
        var[var < 0] = np.nan
        return nat, np.abs(d) * np.sqrt(var)
