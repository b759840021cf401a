"""Pools: the models and tools a manager orchestrates, as validated NumPy tables.

A pool file (JSON) holds every parameter of the simulator's item-response model (shared/DESIGN.md 3),
grouped, each group with a ``"source"`` key naming the published figure it came from
(shared/calibration_sources.md) or ``"assumed"``. Schema, by path:

- ``name``, ``description``: strings.
- ``manager``: a MODEL (the orchestrating model: it writes python code, reads search results and answers
  itself when the trajectory has no evidence). ``models``: a list of 1..16 MODELs callable by agent tools.
- MODEL: ``name``; ``skill`` {math, science, knowledge, code} in [-10, 10] (logits; used for benchmarks
  without an accuracy target); ``accuracy`` {benchmark: {"value": percent, "source"}} (direct-call accuracy
  targets); ``errors.kappa`` in [0, 1] (probability a wrong answer is the model's preferred wrong answer);
  ``anchoring.rho`` in [0, 1] (probability a call carrying the leading answer copies it);
  ``long_context.lambda`` in [0, 5] (skill lost per log(1 + context_tokens / 1000));
  ``review`` {sensitivity, specificity: per domain in [0, 1]}; ``tokens_out`` {log_median: per domain in
  [0, 12], log_sd in [0, 3], difficulty_slope in [-2, 2]}; ``latency`` {ttft_s, tokens_per_s, log_sd};
  ``price`` {input_per_mtok, output_per_mtok} in USD; ``code_exec_error.rate`` in [0, 1] (code_reasoner).
- ``tools``: one TOOL per callable tool (wire names): ``bonus`` per domain in [-10, 10]; ``cost`` {units,
  usd_per_call, usd_per_s}; ``runtime`` {overhead_s, timeout_s, tokens_scale, feedback_frac}; the basic tools
  (python, search) add ``output`` {log_median_tokens, log_sd, latency_log_median_s, latency_log_sd} and
  python an ``exec_error.rate``.
- ``protocol``: ensemble_k (samples of ensemble_solver), manager_tokens_per_round, manager_tokens_per_call,
  prompt_tokens (tool template around a subtask), status_tokens (feedback of a failed call), repair (factor
  on the exec-error rate of a code call that carries the trajectory after an exec error), max_output_tokens
  (generation cap; a call's output tokens are clipped to it).

Accuracy targets are turned into per-(model, benchmark) skills at load: theta solves
E_z[sigmoid(theta + bonus[standard_reasoner, d] - z)] = target with z ~ N(mu_b, sigma_b) integrated by
Gauss-Hermite, so that one direct standard_reasoner call reproduces the published accuracy whatever the
difficulty scale; domain skills and tool bonuses then drive everything else.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parasim.protocol.schema import NUM_DOMAINS, NUM_TOOLS, Domain, Tool
from parasim.tasks import (
    BENCHMARK_INDEX,
    BENCHMARKS,
    FREE_FORM,
    NUM_ANSWERS,
    NUM_BENCHMARKS,
)

POOL_DIR = Path(__file__).with_name("pool_files")
DOMAINS = tuple(d.name.lower() for d in Domain)
TOOLS = tuple(Tool(t).wire_name for t in range(NUM_TOOLS))
KNOWN_SOURCES = frozenset({"Q4I", "Q30I", "QTR", "OSS", "TO", "TOc", "PM", "LLB", "SR1", "RS2", "AA", "assumed"})
MAX_MODELS = 16
_GH_X, _GH_W = np.polynomial.hermite.hermgauss(48)


class PoolError(ValueError):
    """An invalid pool file; the message names the field path and the allowed range."""


def _type_name(v: Any) -> str:
    return repr(v) if isinstance(v, str) else type(v).__name__ if not isinstance(v, (int, float)) else repr(v)


def _num(obj: dict, key: str, path: str, lo: float, hi: float) -> float:
    if not isinstance(obj, dict) or key not in obj:
        raise PoolError(f"{path}.{key}: missing (expected a number in [{lo:g}, {hi:g}])")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise PoolError(f"{path}.{key}: expected a number in [{lo:g}, {hi:g}], got {_type_name(v)}")
    return float(v)


def _group(obj: Any, key: str, path: str, sources: dict[str, str]) -> dict:
    """A parameter group: an object with a non-empty string ``source``."""
    if not isinstance(obj, dict) or key not in obj:
        raise PoolError(f"{path}.{key}: missing (expected an object with a 'source' key)")
    g = obj[key]
    if not isinstance(g, dict):
        raise PoolError(f"{path}.{key}: expected an object, got {_type_name(g)}")
    src = g.get("source")
    if not isinstance(src, str) or not src.strip():
        raise PoolError(f"{path}.{key}.source: expected a source key (e.g. 'Q30I' or 'assumed'), got {src!r}")
    sources[f"{path}.{key}"] = src
    return g


def _per_domain(g: dict, key: str, path: str, lo: float, hi: float) -> np.ndarray:
    sub = g.get(key)
    if not isinstance(sub, dict):
        raise PoolError(f"{path}.{key}: expected an object with keys {list(DOMAINS)}, got {_type_name(sub)}")
    return np.array([_num(sub, d, f"{path}.{key}", lo, hi) for d in DOMAINS])


def _skill_domain(g: dict, path: str) -> np.ndarray:
    return np.array([_num(g, d, path, -10, 10) for d in DOMAINS])


def expected_accuracy(theta: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """E_z[sigmoid(theta - z)], z ~ N(mu, sigma), by Gauss-Hermite (broadcasts)."""
    z = mu[..., None] + math.sqrt(2.0) * sigma[..., None] * _GH_X
    return (1.0 / (1.0 + np.exp(-(theta[..., None] - z))) * _GH_W).sum(-1) / math.sqrt(math.pi)


def solve_skill(target: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Invert ``expected_accuracy`` in theta (vectorized bisection; accuracy is increasing in theta)."""
    lo = np.full(np.shape(target), -30.0)
    hi = np.full(np.shape(target), 30.0)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        up = expected_accuracy(mid, mu, sigma) < target
        lo = np.where(up, mid, lo)
        hi = np.where(up, hi, mid)
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class PoolSpec:
    """A pool as arrays. Model rows 0..M-1 are the agent models, row M is the manager."""

    name: str
    model_names: tuple[str, ...]  # M + 1 names, the manager last
    skill: np.ndarray  # [M+1, NB] per-benchmark skill (solved from targets, else domain skill)
    skill_domain: np.ndarray  # [M+1, D]
    accuracy_target: np.ndarray  # [M+1, NB] direct-call accuracy in [0, 1], NaN where none
    bonus: np.ndarray  # [T, D]
    kappa: np.ndarray  # [M+1]
    rho: np.ndarray  # [M+1]
    lam: np.ndarray  # [M+1]
    sens: np.ndarray  # [M+1, D]
    spec: np.ndarray  # [M+1, D]
    p_exec: np.ndarray  # [T, M+1]
    tok_mu: np.ndarray  # [T, M+1, D] log median output tokens
    tok_sd: np.ndarray  # [T, M+1]
    tok_alpha: np.ndarray  # [T, M+1] log-tokens per unit difficulty
    lat_base: np.ndarray  # [T, M+1] seconds before the first token plus tool overhead
    lat_per_tok: np.ndarray  # [T, M+1] seconds per output token
    lat_sd: np.ndarray  # [T, M+1] lognormal jitter of the latency
    price_in: np.ndarray  # [T, M+1] USD per input token
    price_out: np.ndarray  # [T, M+1] USD per output token
    usd_call: np.ndarray  # [T]
    usd_s: np.ndarray  # [T]
    cost_units: np.ndarray  # [T]
    timeout: np.ndarray  # [T]
    feedback_frac: np.ndarray  # [T] share of a call's output tokens fed back to the manager
    ensemble_k: int
    manager_tokens_round: float
    manager_tokens_call: float
    prompt_tokens: float
    status_tokens: float
    repair: float
    max_output_tokens: float
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def num_models(self) -> int:
        """Agent models the action space can address (the manager excluded)."""
        return len(self.model_names) - 1


def _model(raw: Any, path: str, sources: dict[str, str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise PoolError(f"{path}: expected an object, got {_type_name(raw)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PoolError(f"{path}.name: expected a non-empty string, got {name!r}")
    out: dict[str, Any] = {"name": name}
    out["skill"] = _skill_domain(_group(raw, "skill", path, sources), f"{path}.skill")
    acc = raw.get("accuracy", {})
    if not isinstance(acc, dict):
        raise PoolError(f"{path}.accuracy: expected an object {{benchmark: {{value, source}}}}, got {_type_name(acc)}")
    targets = np.full(NUM_BENCHMARKS, np.nan)
    for bname in acc:
        if bname not in BENCHMARK_INDEX:
            raise PoolError(f"{path}.accuracy.{bname}: unknown benchmark; known: {sorted(BENCHMARK_INDEX)}")
        g = _group(acc, bname, f"{path}.accuracy", sources)
        b = BENCHMARKS[BENCHMARK_INDEX[bname]]
        floor = 100.0 / b.options if b.options != FREE_FORM else 0.0
        targets[BENCHMARK_INDEX[bname]] = _num(g, "value", f"{path}.accuracy.{bname}", floor + 0.1, 99.9) / 100.0
    out["targets"] = targets
    out["kappa"] = _num(_group(raw, "errors", path, sources), "kappa", f"{path}.errors", 0, 1)
    out["rho"] = _num(_group(raw, "anchoring", path, sources), "rho", f"{path}.anchoring", 0, 1)
    out["lam"] = _num(_group(raw, "long_context", path, sources), "lambda", f"{path}.long_context", 0, 5)
    g = _group(raw, "review", path, sources)
    out["sens"] = _per_domain(g, "sensitivity", f"{path}.review", 0, 1)
    out["spec"] = _per_domain(g, "specificity", f"{path}.review", 0, 1)
    g = _group(raw, "tokens_out", path, sources)
    out["tok_mu"] = _per_domain(g, "log_median", f"{path}.tokens_out", 0, 12)
    out["tok_sd"] = _num(g, "log_sd", f"{path}.tokens_out", 0, 3)
    out["tok_alpha"] = _num(g, "difficulty_slope", f"{path}.tokens_out", -2, 2)
    g = _group(raw, "latency", path, sources)
    out["ttft"] = _num(g, "ttft_s", f"{path}.latency", 0, 600)
    out["speed"] = _num(g, "tokens_per_s", f"{path}.latency", 0.1, 1e5)
    out["lat_sd"] = _num(g, "log_sd", f"{path}.latency", 0, 3)
    g = _group(raw, "price", path, sources)
    out["price_in"] = _num(g, "input_per_mtok", f"{path}.price", 0, 1000) / 1e6
    out["price_out"] = _num(g, "output_per_mtok", f"{path}.price", 0, 1000) / 1e6
    out["p_exec"] = _num(_group(raw, "code_exec_error", path, sources), "rate", f"{path}.code_exec_error", 0, 1)
    return out


def _tool(raw: dict, tname: str, sources: dict[str, str]) -> dict[str, Any]:
    path = f"tools.{tname}"
    if tname not in raw:
        raise PoolError(f"{path}: missing (every tool of {list(TOOLS)} needs an entry)")
    t = raw[tname]
    if not isinstance(t, dict):
        raise PoolError(f"{path}: expected an object, got {_type_name(t)}")
    out: dict[str, Any] = {"bonus": _skill_domain(_group(t, "bonus", path, sources), f"{path}.bonus")}
    g = _group(t, "cost", path, sources)
    out["units"] = _num(g, "units", f"{path}.cost", 0, 1000)
    out["usd_call"] = _num(g, "usd_per_call", f"{path}.cost", 0, 100)
    out["usd_s"] = _num(g, "usd_per_s", f"{path}.cost", 0, 10)
    g = _group(t, "runtime", path, sources)
    out["overhead"] = _num(g, "overhead_s", f"{path}.runtime", 0, 3600)
    out["timeout"] = _num(g, "timeout_s", f"{path}.runtime", 0.1, 1e5)
    out["scale"] = _num(g, "tokens_scale", f"{path}.runtime", 0.01, 100)
    out["feedback"] = _num(g, "feedback_frac", f"{path}.runtime", 0, 1)
    if not Tool.from_wire(tname).is_agent:
        g = _group(t, "output", path, sources)
        out["tok_mu"] = _num(g, "log_median_tokens", f"{path}.output", 0, 12)
        out["tok_sd"] = _num(g, "log_sd", f"{path}.output", 0, 3)
        out["lat_mu"] = _num(g, "latency_log_median_s", f"{path}.output", -10, 10)
        out["lat_sd"] = _num(g, "latency_log_sd", f"{path}.output", 0, 3)
    out["p_exec"] = (_num(_group(t, "exec_error", path, sources), "rate", f"{path}.exec_error", 0, 1)
                     if tname == "python" else 0.0)
    return out


def parse_pool(raw: Any, name: str = "pool") -> PoolSpec:
    """Validate a parsed pool file and build its tables; raises ``PoolError`` naming the bad field."""
    if not isinstance(raw, dict):
        raise PoolError(f"{name}: expected a JSON object at the top level, got {_type_name(raw)}")
    sources: dict[str, str] = {}
    models_raw = raw.get("models")
    if not isinstance(models_raw, list) or not 1 <= len(models_raw) <= MAX_MODELS:
        raise PoolError(f"models: expected a list of 1..{MAX_MODELS} models, got {_type_name(models_raw)}")
    if "manager" not in raw:
        raise PoolError("manager: missing (expected a model object)")
    ms = [_model(m, f"models[{i}]", sources) for i, m in enumerate(models_raw)] + [
        _model(raw["manager"], "manager", sources)]
    names = [m["name"] for m in ms[:-1]]
    if len(set(names)) != len(names):
        raise PoolError(f"models: duplicate model names {names}")
    tools_raw = raw.get("tools")
    if not isinstance(tools_raw, dict):
        raise PoolError(f"tools: expected an object keyed by tool name {list(TOOLS)}, got {_type_name(tools_raw)}")
    extra = sorted(set(tools_raw) - set(TOOLS))
    if extra:
        raise PoolError(f"tools.{extra[0]}: unknown tool; known: {list(TOOLS)}")
    ts = [_tool(tools_raw, t, sources) for t in TOOLS]
    proto = _group(raw, "protocol", "", sources)
    k = _num(proto, "ensemble_k", "protocol", 1, 16)
    if k != int(k):
        raise PoolError(f"protocol.ensemble_k: expected an integer in [1, 16], got {k!r}")

    m1, nt = len(ms), NUM_TOOLS

    def col(key: str) -> np.ndarray:
        return np.array([m[key] for m in ms], np.float64)

    bonus = np.stack([t["bonus"] for t in ts])
    skill_domain = np.stack([m["skill"] for m in ms])
    targets = np.stack([m["targets"] for m in ms])
    bench_dom = np.array([b.domain for b in BENCHMARKS])
    mu = np.array([b.mu for b in BENCHMARKS])
    sigma = np.array([b.sigma for b in BENCHMARKS])
    sr = int(Tool.STANDARD_REASONER)
    skill = skill_domain[:, bench_dom].copy()
    has = ~np.isnan(targets)
    if has.any():
        shift = np.broadcast_to(bonus[sr, bench_dom], targets.shape)[has]
        mub, sgb = np.broadcast_to(mu, targets.shape)[has], np.broadcast_to(sigma, targets.shape)[has]
        skill[has] = solve_skill(targets[has], mub, sgb) - shift

    agent = np.array([Tool(t).is_agent for t in range(nt)])
    scale = np.log(np.array([t["scale"] for t in ts]))
    tok_mu = np.empty((nt, m1, NUM_DOMAINS))
    tok_sd, tok_alpha = np.empty((nt, m1)), np.empty((nt, m1))
    lat_base, lat_per_tok, lat_sd = np.empty((nt, m1)), np.empty((nt, m1)), np.empty((nt, m1))
    p_in, p_out, p_exec = np.zeros((nt, m1)), np.zeros((nt, m1)), np.zeros((nt, m1))
    for t in range(nt):
        if agent[t]:
            tok_mu[t] = np.stack([m["tok_mu"] for m in ms]) + scale[t]
            tok_sd[t], tok_alpha[t] = col("tok_sd"), col("tok_alpha")
            lat_base[t] = col("ttft") + ts[t]["overhead"]
            lat_per_tok[t] = 1.0 / col("speed")
            lat_sd[t] = col("lat_sd")
            p_in[t], p_out[t] = col("price_in"), col("price_out")
            p_exec[t] = col("p_exec") if t == Tool.CODE_REASONER else 0.0
        else:
            tok_mu[t] = ts[t]["tok_mu"] + scale[t]
            tok_sd[t], tok_alpha[t] = ts[t]["tok_sd"], 0.0
            lat_base[t] = math.exp(ts[t]["lat_mu"]) + ts[t]["overhead"]
            lat_per_tok[t], lat_sd[t] = 0.0, ts[t]["lat_sd"]
            p_exec[t] = ts[t]["p_exec"]
    return PoolSpec(
        name=str(raw.get("name", name)), model_names=tuple(m["name"] for m in ms), skill=skill,
        skill_domain=skill_domain, accuracy_target=targets, bonus=bonus, kappa=col("kappa"), rho=col("rho"),
        lam=col("lam"), sens=np.stack([m["sens"] for m in ms]), spec=np.stack([m["spec"] for m in ms]),
        p_exec=p_exec, tok_mu=tok_mu, tok_sd=tok_sd, tok_alpha=tok_alpha, lat_base=lat_base,
        lat_per_tok=lat_per_tok, lat_sd=lat_sd, price_in=p_in, price_out=p_out,
        usd_call=np.array([t["usd_call"] for t in ts]), usd_s=np.array([t["usd_s"] for t in ts]),
        cost_units=np.array([t["units"] for t in ts]), timeout=np.array([t["timeout"] for t in ts]),
        feedback_frac=np.array([t["feedback"] for t in ts]), ensemble_k=int(k),
        manager_tokens_round=_num(proto, "manager_tokens_per_round", "protocol", 0, 1e5),
        manager_tokens_call=_num(proto, "manager_tokens_per_call", "protocol", 0, 1e5),
        prompt_tokens=_num(proto, "prompt_tokens", "protocol", 0, 1e5),
        status_tokens=_num(proto, "status_tokens", "protocol", 0, 1e5),
        repair=_num(proto, "repair", "protocol", 0, 1),
        max_output_tokens=_num(proto, "max_output_tokens", "protocol", 1, 1e7), sources=sources)


def assumed_parameters(pool: str | Path | dict | PoolSpec) -> list[str]:
    """Paths of the parameter groups of a pool with no published source (the README's assumed list)."""
    return sorted(path for path, src in load_pool(pool).sources.items() if src == "assumed")


def shipped_pools() -> list[str]:
    """Names of the pools shipped in ``parasim/pool_files``."""
    return sorted(p.stem for p in POOL_DIR.glob("*.json"))


def load_pool(name_or_path: str | Path | dict | PoolSpec) -> PoolSpec:
    """A shipped pool by name, a path to a pool JSON file, a parsed pool dict, or a PoolSpec (returned as is)."""
    if isinstance(name_or_path, PoolSpec):
        return name_or_path
    if isinstance(name_or_path, dict):
        return parse_pool(name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        shipped = POOL_DIR / f"{name_or_path}.json"
        if not shipped.is_file():
            raise PoolError(f"pool: expected one of {shipped_pools()} or a path to a pool JSON file, "
                            f"got {str(name_or_path)!r}")
        path = shipped
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise PoolError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    return parse_pool(raw, name=path.stem)


def reliability(pool: PoolSpec, ensemble: bool = True) -> np.ndarray:
    """Expected accuracy acc[b, t, m] of an OK call (z integrated out): the termination model's prior.

    The termination model weighs a call's answer by the log-odds of this accuracy, which is what a
    manager trained on the pool would know about its tools, never the task's hidden difficulty.
    """
    mu = np.array([b.mu for b in BENCHMARKS])
    sigma = np.array([b.sigma for b in BENCHMARKS])
    dom = np.array([b.domain for b in BENCHMARKS])
    theta = pool.skill[None, :, :].transpose(2, 0, 1) + pool.bonus[:, dom].T[:, :, None]  # [NB, T, M+1]
    z = mu[:, None, None, None] + math.sqrt(2.0) * sigma[:, None, None, None] * _GH_X
    p = 1.0 / (1.0 + np.exp(-(theta[..., None] - z)))
    acc = (p * _GH_W).sum(-1) / math.sqrt(math.pi)
    if ensemble:
        k = pool.ensemble_k
        j = np.arange(k + 1)
        binom = np.array([math.comb(k, i) for i in j], np.float64)
        pk = binom * p[..., None] ** j * (1 - p[..., None]) ** (k - j)
        win = np.where(2 * j > k, 1.0, np.where(2 * j == k, 0.5, 0.0))
        pmaj = (pk * win).sum(-1)
        acc[:, Tool.ENSEMBLE_SOLVER] = ((pmaj * _GH_W).sum(-1) / math.sqrt(math.pi))[:, Tool.ENSEMBLE_SOLVER]
    return acc


def answer_space(options: int) -> int:
    """How many distinct answers a task admits: its options, or NUM_ANSWERS for free-form answers."""
    return NUM_ANSWERS if options == FREE_FORM else options
