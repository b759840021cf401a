"""Cost of the python tool's isolation: a trivial sandboxed call against the bare interpreter it runs.

Run: ``pytest benchmarks/bench_sandbox.py --benchmark-only``. The ratio of the two medians is the
price of bwrap's namespaces, the privilege drop, rlimits and output capture per call.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from parasim.tools.sandbox import Sandbox, SandboxConfig, probe_bwrap

pytestmark = pytest.mark.skipif(probe_bwrap() is not None, reason=f"sandbox unavailable: {probe_bwrap()}")


def test_bare_interpreter_baseline(benchmark) -> None:
    """Baseline: the same interpreter, same flags, no sandbox."""
    argv = [sys.executable, "-I", "-B", "-c", "print('ok')"]
    out = benchmark(lambda: subprocess.run(argv, capture_output=True, check=True).stdout)
    assert out == b"ok\n"


def test_sandboxed_trivial_call(benchmark) -> None:
    sandbox = Sandbox(SandboxConfig())
    res = benchmark(lambda: sandbox.run("print('ok')"))
    assert res.output == "ok\n"
