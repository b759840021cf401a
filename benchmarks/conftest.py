"""pytest setup for the benchmark suites: collect ``bench_*.py`` and let ``--benchmark-only`` run them.

The project's pytest options disable pytest-benchmark (tests/ runs its ``benchmark`` fixtures once, untimed);
inside benchmarks/ asking for ``--benchmark-only`` is asking for timings, so it re-enables them.
"""
from __future__ import annotations

from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("benchmark_only", default=False):
        config.option.benchmark_enable = True


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    # a file named on the command line is collected by pytest itself; only add the ones found by walking
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None
