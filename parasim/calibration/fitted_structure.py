"""The call model's joint structure as the shipped pools carry it: what the fit on the shipped per-query tables
gives at the pools' sampling temperature (docs/simulator.md, section 8).

``scripts/joint_structure.py --update docs/simulator.md`` fits the tables and writes ``STRUCTURE_FILE``;
``scripts/build_pools.py`` reads it for every pool that states the temperature it was fitted at, and the benchmark
catalogue (``parasim.tasks.suites.BENCHMARKS``) holds its difficulty spreads and Zipf exponents (a test checks
both against the file), so one fitted number has one definition and the pool files cite it by ``SOURCE_KEY``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from parasim.calibration.model_groups import kind_of, pool_family
from parasim.config.jsonl import read_json_file
from parasim.config.writes import atomic_write_json

STRUCTURE_FILE = Path(__file__).resolve().parent / "data" / "fitted_structure.json"
SOURCE_KEY = "PQ"  # the pool-file source key of a group carried from this fit (parasim.pools.param_groups)
DECIMALS = 3  # the values are carried rounded, as the page's table shows them


@dataclass(frozen=True)
class FittedStructure:
    """Per-model call-model parameters (every model of a pool gets the same) and per-benchmark difficulty
    parameters, at ``temperature`` under the temperature law ``law``; ``benchmarks`` maps a catalogue benchmark to
    its ``sigma`` and, where fitted, ``zipf_s``, and ``sources`` each value to where it was fitted."""

    temperature: float
    law: str
    sd: float  # tau: the SD of the per-(task, model) effect
    kappa: float
    affinity: float
    family_share: float  # w
    kind_share: float  # o
    benchmarks: dict[str, dict[str, float]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def rounded(self) -> FittedStructure:
        """The same structure with every number rounded to DECIMALS (what the pools carry)."""
        def r(x: float) -> float:
            return round(float(x), DECIMALS)

        return FittedStructure(self.temperature, self.law, r(self.sd), r(self.kappa), r(self.affinity),
                               r(self.family_share), r(self.kind_share),
                               {b: {k: r(v) for k, v in p.items()} for b, p in self.benchmarks.items()},
                               dict(self.sources))

    def model_groups(self, name: str, kind: str | None = None) -> dict[str, dict[str, Any]]:
        """A pool model's ``errors`` and ``interaction`` groups: this structure, the model's family by maker
        within its kind (``kind``, or the kind its name says; ``parasim.calibration.model_groups``)."""
        kind = kind or kind_of(name)
        return {"errors": {"kappa": self.kappa, "affinity": self.affinity, "source": SOURCE_KEY},
                "interaction": {"sd": self.sd, "family": pool_family(name, kind), "kind": kind,
                                "family_share": self.family_share, "kind_share": self.kind_share,
                                "source": SOURCE_KEY}}


def write_fitted_structure(structure: FittedStructure, path: Path = STRUCTURE_FILE) -> None:
    """Write ``structure`` (rounded) atomically as JSON."""
    atomic_write_json(path, asdict(structure.rounded()))


def load_fitted_structure(path: Path = STRUCTURE_FILE) -> FittedStructure:
    """The fitted structure as written by ``write_fitted_structure``."""
    return FittedStructure(**read_json_file(path))
