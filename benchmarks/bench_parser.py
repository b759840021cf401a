"""Parse time of the tool-call parser against input size on every hostile shape, next to a linear baseline.

Run: ``pytest benchmarks/bench_parser.py --benchmark-only``: one group per shape of ``tests/hostile_corpus.py``,
the parser (``parse``) and a C-speed linear pass over the same text (``scan``: ``str.count`` of ``{``) at 4 KiB,
16 KiB, 64 KiB (the text env's action limit) and 1 MiB. ``extra_info`` of each ``parse`` row holds
``us_per_kib``, ``growth`` (time per KiB at this size over time per KiB at 4 KiB: about 1 or below when the
parser is linear, 16 at 64 KiB and 256 at 1 MiB when quadratic) and ``per_scan`` (parse time over scan time,
flat across sizes when linear). Or ``python benchmarks/bench_parser.py [--against OLD_PARSER.py]`` for a table,
with the same measurements of another parser module (e.g. ``git show HEAD~1:parasim/protocol/parser.py``) at
the sizes up to 64 KiB, once each (a quadratic parser takes minutes there).
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from parasim.protocol.parser import parse_tool_calls

KIB = 1024
SIZES = [4 * KIB, 16 * KIB, 64 * KIB, 1024 * KIB]
AGAINST_MAX = 64 * KIB
MODELS = ("qwen3-30b-a3b-instruct", "qwen3-coder-30b-a3b", "gpt-oss-20b")


def load_module(path: Path, name: str) -> ModuleType:
    """Import a module from a file, registered under ``name`` (dataclasses look their module up there).

    A module already imported under that name (tests/ collected in the same session) is reused.
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"path: not a Python module: {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


corpus = load_module(Path(__file__).resolve().parents[1] / "tests" / "hostile_corpus.py", "hostile_corpus")


@functools.cache
def text_of(shape: str, size: int) -> str:
    return corpus.shape_text(shape, size)


def scan(text: str) -> int:
    """The linear floor: one C pass over the text."""
    return text.count("{")


def best_seconds(fn: Callable[[], object], budget_s: float = 0.2, max_rounds: int = 50) -> float:
    """Best of as many runs as fit in ``budget_s`` (at least one): the machine is shared."""
    best, spent, rounds = float("inf"), 0.0, 0
    while rounds < 1 or (spent < budget_s and rounds < max_rounds):
        t0 = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t0
        best, spent, rounds = min(best, elapsed), spent + elapsed, rounds + 1
    return best


@functools.cache
def us_per_kib_at_4k(shape: str) -> float:
    """The reference for ``growth``: measured here, so that any selection of rows has it."""
    text = text_of(shape, SIZES[0])
    return best_seconds(lambda: parse_tool_calls(text, MODELS)) * 1e6 / (len(text) / KIB)


def _label(size: int) -> str:
    return f"{size // KIB}KiB"


@pytest.mark.parametrize("size", SIZES, ids=_label)
@pytest.mark.parametrize("shape", list(corpus.SHAPES))
@pytest.mark.parametrize("impl", ["parse", "scan"])
def test_parser_scaling(benchmark, impl: str, shape: str, size: int) -> None:
    benchmark.group = f"parser {shape}"
    text = text_of(shape, size)
    fn = (lambda: parse_tool_calls(text, MODELS)) if impl == "parse" else (lambda: scan(text))
    if size > AGAINST_MAX:
        benchmark.pedantic(fn, rounds=3, iterations=1)
    else:
        benchmark(fn)
    if impl == "parse" and not benchmark.disabled:  # disabled (a plain pytest run): one untimed call, no stats
        per_kib = benchmark.stats.stats.min * 1e6 / (len(text) / KIB)
        benchmark.extra_info.update(us_per_kib=per_kib, growth=per_kib / us_per_kib_at_4k(shape),
                                    per_scan=benchmark.stats.stats.min / best_seconds(lambda: scan(text)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="another parser module file, timed at sizes up to 64 KiB")
    parser.add_argument("--shapes", default=",".join(corpus.SHAPES), help="comma-separated shape names")
    args = parser.parse_args(argv)
    other = load_module(args.against, "parser_against") if args.against else None
    print(f"{'shape':32} {'size':>8} {'parse':>10} {'us/KiB':>8} {'growth':>7} {'per scan':>9}"
          + (f" {'against':>10} {'x slower':>9}" if other else ""))
    for shape in args.shapes.split(","):
        for size in SIZES:
            text = text_of(shape, size)
            best = best_seconds(lambda: parse_tool_calls(text, MODELS))  # noqa: B023 (called within the iteration)
            per_kib = best * 1e6 / (len(text) / KIB)
            line = (f"{shape:32} {_label(size):>8} {best * 1e3:8.2f}ms {per_kib:8.1f} "
                    f"{per_kib / us_per_kib_at_4k(shape):7.2f} {best / best_seconds(lambda: scan(text)):9.0f}")  # noqa: B023
            if other and size <= AGAINST_MAX:
                t0 = time.perf_counter()
                other.parse_tool_calls(text, MODELS)
                then = time.perf_counter() - t0
                line += f" {then * 1e3:8.1f}ms {then / best:9.1f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
