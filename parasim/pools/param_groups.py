"""The strict checks of a parameter file's groups, shared by pool files (``parasim.pools.pool``) and tool spec files
(``parasim.tools.spec``): every group is an object of known keys plus a ``source``, every number within its range,
every text that may reach a prompt clean, and every error a ``SpecError`` naming the field path, the value and
what is allowed (with a did-you-mean hint for a misspelled key).
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parasim.config.jsonl import finite_in, show_value
from parasim.protocol.prompt_text import PromptTextError, check_prompt_text
from parasim.protocol.schema import Domain

DOMAINS = tuple(d.name.lower() for d in Domain)
KNOWN_SOURCES = frozenset({
    "Q4I",  # Qwen3-4B-Instruct-2507 model card
    "Q30I",  # Qwen3-30B-A3B-Instruct-2507 model card
    "Q30T",  # Qwen3-30B-A3B-Thinking-2507 model card
    "Q3C",  # Qwen3-Coder-30B-A3B-Instruct model card
    "Q235I",  # Qwen3-235B-A22B-Instruct-2507 model card
    "Q235T",  # Qwen3-235B-A22B-Thinking-2507 model card
    "QTR",  # Qwen3 Technical Report, arXiv 2505.09388
    "OSS",  # gpt-oss-120b and gpt-oss-20b model card, arXiv 2508.10925
    "TO",  # ToolOrchestra paper, arXiv 2511.21689
    "TOc",  # ToolOrchestra's released evaluation code (prices, mean call latencies)
    "PM",  # ParaManager paper, arXiv 2604.17009
    "LLB",  # a public 2025 leaderboard dataset of accuracies, provider prices, throughput and TTFT
    "MSA",  # Millstone AI's vLLM benchmark of a 3B-active FP8 MoE on one H200 SXM
    "NVH200",  # NVIDIA H200 Tensor Core GPU datasheet: 141 GB HBM3e at 4.8 TB/s
    "SR1",  # Search-R1's retrieval setup, arXiv 2503.09516
    "RS2",  # rStar2-Agent, arXiv 2508.20722
    "AA",  # AlphaApollo, arXiv 2510.06261
    "PQ",  # the joint-structure fit on the shipped per-query tables (parasim.calibration.fitted_structure)
    "assumed",  # no published figure
})
FIT_SOURCE = "fit"  # a group ``parasim calibrate`` estimated: "fit", or "fit:<call log name>"
MAX_SOURCE_CHARS = 256


class SpecError(ValueError):
    """An invalid pool or tool spec file; the message names the file (when read from one), the field path, the
    value and what is allowed."""


show = show_value  # one way to show a value in an error, for every reader


def at(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def did_you_mean(word: Any, allowed: Iterable[str]) -> str:
    """A ``; did you mean 'x'?`` hint for a misspelled key or name (case-insensitive), or ''."""
    by_lower = {a.lower(): a for a in allowed}
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1)
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""


def only_keys(obj: dict, allowed: Sequence[str], path: str) -> None:
    """Refuse a key of ``obj`` that the schema does not define: a misspelled optional key would be ignored."""
    for key in obj:
        if key not in allowed:
            raise SpecError(f"{at(path, key)}: unknown key {show(key)}; allowed: {list(allowed)}"
                            f"{did_you_mean(key, allowed)}")


def prompt_text_field(value: Any, path: str, max_len: int) -> str:
    """Text that may reach a prompt (``parasim.protocol.prompt_text``), as a ``SpecError``."""
    try:
        return check_prompt_text(path, value, max_len=max_len)
    except PromptTextError as err:
        raise SpecError(str(err)) from None


def source_key(src: Any, path: str) -> str:
    """A group's source: a key of ``KNOWN_SOURCES``, published keys joined by '+', ``fit`` or
    ``fit:<call log name>``."""
    if not isinstance(src, str) or not src.strip():
        raise SpecError(f"{path}: expected a source key (e.g. 'Q30I' or 'assumed'), got {show(src)}")
    if src == FIT_SOURCE or (src.startswith(f"{FIT_SOURCE}:") and len(src) > len(FIT_SOURCE) + 1):
        return prompt_text_field(src, path, MAX_SOURCE_CHARS)
    parts = src.split("+")
    allowed = (f"one of {sorted(KNOWN_SOURCES)}, published keys joined by '+' (e.g. 'Q30I+QTR'), "
               f"'{FIT_SOURCE}' or '{FIT_SOURCE}:<call log name>'")
    for part in parts:
        if part not in KNOWN_SOURCES:
            within = f" in {show(src)}" if len(parts) > 1 else ""
            raise SpecError(f"{path}: unknown source {show(part)}{within}; allowed: {allowed}"
                            f"{did_you_mean(part, KNOWN_SOURCES)}")
    if len(parts) > 1 and ("assumed" in parts or len(set(parts)) < len(parts)):
        raise SpecError(f"{path}: {show(src)} repeats a key or joins 'assumed' to published keys; allowed: {allowed}")
    return src


def number(obj: dict, key: str, path: str, lo: float, hi: float) -> float:
    if not isinstance(obj, dict) or key not in obj:
        raise SpecError(f"{path}.{key}: missing (expected a number in [{lo:g}, {hi:g}])")
    v = obj[key]
    # the range is compared before any float conversion, so a huge integer is out of range, not an OverflowError
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not finite_in(v, lo, hi):
        raise SpecError(f"{path}.{key}: expected a number in [{lo:g}, {hi:g}], got {show(v)}")
    return float(v)


def group(obj: Any, key: str, path: str, sources: dict[str, str], fields: Sequence[str]) -> dict:
    """A parameter group: an object of ``fields`` and a ``source`` (see ``source_key``)."""
    where = at(path, key)
    if not isinstance(obj, dict) or key not in obj:
        raise SpecError(f"{where}: missing (expected an object with a 'source' key)")
    g = obj[key]
    if not isinstance(g, dict):
        raise SpecError(f"{where}: expected an object, got {show(g)}")
    only_keys(g, (*fields, "source"), where)
    sources[where] = source_key(g.get("source"), f"{where}.source")
    return g


def per_domain(g: dict, key: str, path: str, lo: float, hi: float) -> np.ndarray:
    sub = g.get(key)
    if not isinstance(sub, dict):
        raise SpecError(f"{path}.{key}: expected an object with keys {list(DOMAINS)}, got {show(sub)}")
    only_keys(sub, DOMAINS, f"{path}.{key}")
    return np.array([number(sub, d, f"{path}.{key}", lo, hi) for d in DOMAINS])


def skill_domain(g: dict, path: str) -> np.ndarray:
    return np.array([number(g, d, path, -30, 30) for d in DOMAINS])


def shipped_names(directory: Path) -> list[str]:
    """Names of the JSON files shipped in ``directory`` (pools, tool specs)."""
    return sorted(p.stem for p in directory.glob("*.json"))


def shipped_or_path(name_or_path: str | Path, directory: Path, what: str) -> Path:
    """The path of a file shipped in ``directory`` (by name) or of a JSON file given by path; a ``SpecError``
    naming ``what`` and the shipped names when it is neither (also for a value that is no name at all: None, 3)."""
    if not isinstance(name_or_path, str | os.PathLike) or not str(name_or_path).strip():
        raise SpecError(f"{what}: expected one of {shipped_names(directory)} or a path to a {what.replace('_', ' ')} "
                        f"JSON file, got {repr(name_or_path) if name_or_path is None else show(name_or_path)}")
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = directory / f"{name_or_path}.json"
    if not shipped.is_file():
        raise SpecError(f"{what}: expected one of {shipped_names(directory)} or a path to a {what.replace('_', ' ')} "
                        f"JSON file, got {str(name_or_path)!r}")
    return shipped
