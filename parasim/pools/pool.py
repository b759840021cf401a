"""Pools: the models and tools a manager orchestrates, as validated NumPy tables.

A pool file (JSON) holds every parameter of the simulator's item-response model, grouped, each group with a
``"source"`` key naming the published figure it came from (a key of ``KNOWN_SOURCES``, or several joined by
``+``), ``"assumed"``, or ``"fit"`` / ``"fit:<call log>"`` for a group ``parasim calibrate`` estimated.
Schema, by path:

- ``name``, ``description``: strings.
- ``manager``: a MODEL (the orchestrating model: it writes python code, reads search results and answers
  itself when the trajectory has no evidence). ``models``: a list of 1..16 MODELs callable by agent tools.
- MODEL: ``name``; ``skill`` {math, science, knowledge, code} in [-30, 30] (logits; used for benchmarks
  without an accuracy target); ``accuracy`` {benchmark: {"value": percent, "source"}} (direct-call accuracy
  targets); ``errors.kappa`` in [0, 1] (probability a wrong answer is the model's preferred wrong answer) and
  the optional ``errors.affinity`` in [0, 1] (probability that preferred answer is the task's shared attractive
  distractor; absent: 0) and ``errors.family_share`` in [0, 1] (probability a preferred wrong answer that is not
  the shared distractor is the model family's own; absent: 0); the optional group ``interaction``: ``sd`` in
  [0, 10] (SD of the per-(task, model) effect on the logit; absent: 0, the one-dimensional model), ``family`` (a
  name: models with the same name form a family, e.g. one maker or base model) and ``family_share`` in [0, 1] (the
  share of the effect's variance the family's members have in common; absent: 0), ``kind`` (a name: models with the
  same name form a kind, e.g. reasoning models against chat models, whose effects share a draw of their own across
  families) and ``kind_share`` in [0, 1] (the kind's share of the effect's variance; absent: 0; with
  ``family_share`` at most 1);
  ``anchoring.rho`` in [0, 1] (probability a call carrying the leading answer copies it);
  ``long_context.lambda`` in [0, 5] (skill lost per log(1 + context_tokens / 1000));
  ``review`` {sensitivity, specificity: per domain in [0, 1]}; ``tokens_out`` {log_median: per domain in
  [0, 12], log_sd in [0, 3], difficulty_slope in [-2, 2]}; ``latency`` {ttft_s, tokens_per_s, log_sd};
  ``price`` {input_per_mtok, output_per_mtok} in USD; ``code_exec_error.rate`` in [0, 1] (code_reasoner); the
  optional group ``context.window_tokens``, an integer in [1024, 10^8] (the context window a manager's prompt
  states for the model, read only by its descriptor, ``parasim.pools.descriptors``; absent: ``DEFAULT_CONTEXT_TOKENS``,
  an assumed value).
- ``tool_spec`` (optional): the tool set, a shipped tool spec's name or a path to a tool spec file
  (``parasim.tools.spec``; default ``"default"``, the seven tools of ``parasim.protocol.schema.Tool``). Every
  per-tool table below has one row per tool of the spec, in its order.
- ``tools``: one TOOL per tool of the spec (wire names), which may be left out where the spec gives the tool a
  ``call_model`` default: ``bonus`` per domain in [-10, 10]; ``cost`` {units, usd_per_call, usd_per_s};
  ``runtime`` {overhead_s, timeout_s, tokens_scale, feedback_frac}; basic tools (python, search) add ``output``
  {log_median_tokens, log_sd, latency_log_median_s, latency_log_sd} and basic ``code_exec`` tools (python) an
  ``exec_error.rate`` (``parasim.tools.spec.parse_call_model`` checks an entry).
- ``protocol``: ensemble_k (samples of ensemble_solver), manager_tokens_per_round, manager_tokens_per_call,
  prompt_tokens (tool template around a subtask), status_tokens (feedback of a failed call), repair (factor
  on the exec-error rate of a code call that carries the trajectory after an exec error), max_output_tokens
  (generation cap; a call's output tokens are clipped to it).

The schema is strict, because a lax one loads a wrong pool silently: an unknown key (a misspelled optional
``accuracies``) or an unknown source is refused with the allowed ones; pool files are read by
``parasim.config.jsonl.read_json_file`` (UTF-8, no duplicate keys, bounded size, depth and integers, finite numbers);
and model ids, which are pasted into the manager's prompt, must pass ``parasim.protocol.prompt_text.check_prompt_text``
(no newlines or other control characters, no chat-template sequences such as ``<|im_end|>``), as must the
pool's name and description. Every error is a ``PoolError`` naming the file, the field path and the value.

Accuracy targets are turned into per-(model, benchmark) skills at load: theta solves
E_z[sigmoid(theta + bonus[standard_reasoner, d] - z)] = target (standard_reasoner: the tool spec's first agent
``solver`` tool) with z ~ N(mu_b, sqrt(sigma_b^2 + tau_m^2)) (the shared difficulty minus the model's per-task
effect, ``effective_spread``) integrated by Gauss-Hermite, so that one direct standard_reasoner call reproduces
the published accuracy whatever the difficulty scale; domain skills and tool bonuses then drive everything else.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit

from parasim.config.jsonl import JSONInputError, read_json_file
from parasim.pools.harness import (
    DEPLOYMENT_KEYS,
    HARNESS_KEYS,
    Deployment,
    SamplingSetting,
    capped_accuracy,
    concurrency_slope,
    parse_cap,
    parse_deployment,
    parse_sampling,
    solve_capped_skill,
)
from parasim.pools.param_groups import DOMAINS, FIT_SOURCE, KNOWN_SOURCES, SpecError, shipped_names, shipped_or_path
from parasim.pools.param_groups import did_you_mean as _did_you_mean
from parasim.pools.param_groups import group as _group
from parasim.pools.param_groups import number as _num
from parasim.pools.param_groups import only_keys as _only
from parasim.pools.param_groups import per_domain as _per_domain
from parasim.pools.param_groups import prompt_text_field as _text
from parasim.pools.param_groups import show as _show
from parasim.pools.param_groups import skill_domain as _skill_domain
from parasim.protocol.schema import NUM_DOMAINS
from parasim.tasks.suites import (
    BENCHMARK_INDEX,
    BENCHMARKS,
    FREE_FORM,
    NUM_ANSWERS,
    NUM_BENCHMARKS,
)
from parasim.tools.spec import ToolSpec, default_tool_spec, load_tool_spec, parse_call_model

POOL_DIR = Path(__file__).with_name("files")
TOOLS = default_tool_spec().names  # the default tool spec's tools (wire names, per-tool array order)
# pool and tool spec files share the group checks (``parasim.pools.param_groups``) and their error
PoolError = SpecError
__all__ = ["DOMAINS", "FIT_SOURCE", "KNOWN_SOURCES", "MAX_MODELS", "POOL_DIR", "TOOLS", "PoolError", "PoolSpec",
           "accuracy_under_cap", "answer_space", "assumed_parameters", "expected_accuracy", "load_pool",
           "parse_pool", "pool_file", "read_pool_file", "reliability", "shipped_pools", "solve_skill"]
MAX_MODELS = 16
# A model's context window when its pool entry has no ``context`` group: 131,072 tokens (gpt-oss's model card; the
# Qwen3-2507 cards give 262,144 natively). Assumed: no shipped pool states its models' windows yet.
DEFAULT_CONTEXT_TOKENS = 131_072
CONTEXT_TOKENS_RANGE = (1024, 100_000_000)
MAX_NAME_CHARS = 128  # a model id or pool name
MAX_DESCRIPTION_CHARS = 4096  # a refit appends a sentence to its base pool's description

# The schema's keys, object by object (``_group`` adds each group's ``source``).
TOP_KEYS = ("name", "description", "manager", "models", "tools", "protocol", "tool_spec")
MODEL_GROUPS: dict[str, tuple[str, ...]] = {
    "skill": DOMAINS, "errors": ("kappa", "affinity", "family_share"),
    "interaction": ("sd", "family", "family_share", "kind", "kind_share"), "anchoring": ("rho",),
    "long_context": ("lambda",),
    "review": ("sensitivity", "specificity"), "tokens_out": ("log_median", "log_sd", "difficulty_slope"),
    "latency": ("ttft_s", "tokens_per_s", "log_sd", "concurrency_slope"),
    "price": ("input_per_mtok", "output_per_mtok"), "code_exec_error": ("rate",), "deployment": DEPLOYMENT_KEYS,
    "context": ("window_tokens",)}
MODEL_KEYS = ("name", *MODEL_GROUPS, "accuracy")
PROTOCOL_KEYS = ("ensemble_k", "manager_tokens_per_round", "manager_tokens_per_call", "prompt_tokens",
                 "status_tokens", "repair", "max_output_tokens", *HARNESS_KEYS)
_GH_X, _GH_W = np.polynomial.hermite.hermgauss(48)



def effective_spread(sigma: np.ndarray | float, tau: np.ndarray | float) -> np.ndarray:
    """The spread of one model's difficulty on a benchmark, sqrt(sigma_b^2 + tau_m^2): a call sees the shared
    difficulty z ~ N(mu_b, sigma_b) minus its model's per-task effect ~ N(0, tau_m), so its accuracy averaged over
    tasks is ``expected_accuracy`` at this spread (broadcasts)."""
    return np.sqrt(np.square(sigma) + np.square(tau))


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
    accuracy_cap: np.ndarray  # [M+1, NB] generation cap of the setting each target was published at (inf: none)
    bonus: np.ndarray  # [T, D]
    kappa: np.ndarray  # [M+1]
    affinity: np.ndarray  # [M+1] P(the preferred wrong answer is the task's shared attractive distractor)
    tau: np.ndarray  # [M+1] SD of the per-(task, model) effect on the logit
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
    lat_slope: np.ndarray  # [T, M+1] beta: per-request decode slowdown per extra concurrent request on a replica
    replicas: np.ndarray  # int[M+1] servers a model's concurrent calls spread over
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
    sampling: SamplingSetting = SamplingSetting()
    # the factor on every call's log-odds of the right answer: T_p / T for calls sampled at T where the pool's figures
    # are stated at T_p (``parasim.pools.harness.at_temperature``); 1 at the pool's own temperature
    logit_scale: float = 1.0
    # [M+1] model families (``interaction.family``): the row of the family's first model, -1 for a model without one;
    # the share of the per-task effect's variance the family shares and P(a non-shared preferred wrong answer is the
    # family's own); all -1 / 0 for a pool without families
    family: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    family_share: np.ndarray = field(default_factory=lambda: np.zeros(0))
    family_wrong: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # [M+1] model kinds (``interaction.kind``): the row of the kind's first model, -1 for a model without one, and the
    # share of the per-task effect's variance the kind shares; empty for a pool built without them
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kind_share: np.ndarray = field(default_factory=lambda: np.zeros(0))
    context_window: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [M+1] tokens (descriptors only)
    deployments: tuple[Deployment, ...] = ()  # M + 1, the manager last
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    tools: ToolSpec = field(default_factory=default_tool_spec, compare=False)  # T = tools.num_tools rows above

    @property
    def num_models(self) -> int:
        """Agent models the action space can address (the manager excluded)."""
        return len(self.model_names) - 1


def _model(raw: Any, path: str, sources: dict[str, str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise PoolError(f"{path}: expected an object, got {_show(raw)}")
    _only(raw, MODEL_KEYS, path)
    if "name" not in raw:
        raise PoolError(f"{path}.name: missing (expected a non-empty model id of at most {MAX_NAME_CHARS} characters)")
    name = _text(raw["name"], f"{path}.name", MAX_NAME_CHARS)
    if name != name.strip():
        raise PoolError(f"{path}.name: {_show(name)} has leading or trailing whitespace; a model id must not")

    def group(key: str) -> dict:
        return _group(raw, key, path, sources, MODEL_GROUPS[key])

    out: dict[str, Any] = {"name": name}
    out["skill"] = _skill_domain(group("skill"), f"{path}.skill")
    acc = raw.get("accuracy", {})
    if not isinstance(acc, dict):
        raise PoolError(f"{path}.accuracy: expected an object {{benchmark: {{value, source}}}}, got {_show(acc)}")
    targets = np.full(NUM_BENCHMARKS, np.nan)
    caps = np.full(NUM_BENCHMARKS, np.inf)
    for bname in acc:
        if bname not in BENCHMARK_INDEX:
            raise PoolError(f"{path}.accuracy.{bname}: unknown benchmark; known: {sorted(BENCHMARK_INDEX)}"
                            f"{_did_you_mean(bname, BENCHMARK_INDEX)}")
        g = _group(acc, bname, f"{path}.accuracy", sources, ("value", "cap_tokens"))
        b = BENCHMARKS[BENCHMARK_INDEX[bname]]
        floor = 100.0 / b.options if b.options != FREE_FORM else 0.0
        targets[BENCHMARK_INDEX[bname]] = _num(g, "value", f"{path}.accuracy.{bname}", floor + 0.1, 99.9) / 100.0
        caps[BENCHMARK_INDEX[bname]] = parse_cap(g, f"{path}.accuracy.{bname}")
    out["targets"], out["caps"] = targets, caps
    g = group("errors")
    out["kappa"] = _num(g, "kappa", f"{path}.errors", 0, 1)
    out["affinity"] = _num(g, "affinity", f"{path}.errors", 0, 1) if "affinity" in g else 0.0
    out["family_wrong"] = _num(g, "family_share", f"{path}.errors", 0, 1) if "family_share" in g else 0.0
    inter = group("interaction") if "interaction" in raw else {}
    out["tau"] = _num(inter, "sd", f"{path}.interaction", 0, 10) if "interaction" in raw else 0.0
    out["family"] = _text(inter["family"], f"{path}.interaction.family", MAX_NAME_CHARS) if "family" in inter \
        else None
    out["family_share"] = _num(inter, "family_share", f"{path}.interaction", 0, 1) if "family_share" in inter \
        else 0.0
    out["kind"] = _text(inter["kind"], f"{path}.interaction.kind", MAX_NAME_CHARS) if "kind" in inter else None
    out["kind_share"] = _num(inter, "kind_share", f"{path}.interaction", 0, 1) if "kind_share" in inter else 0.0
    if out["family_share"] + out["kind_share"] > 1.0:
        raise ValueError(f"{path}.interaction.kind_share: family_share + kind_share must be at most 1 (the shares of "
                         f"one variance), got {out['family_share']!r} + {out['kind_share']!r}")
    out["rho"] = _num(group("anchoring"), "rho", f"{path}.anchoring", 0, 1)
    out["lam"] = _num(group("long_context"), "lambda", f"{path}.long_context", 0, 5)
    g = group("review")
    out["sens"] = _per_domain(g, "sensitivity", f"{path}.review", 0, 1)
    out["spec"] = _per_domain(g, "specificity", f"{path}.review", 0, 1)
    g = group("tokens_out")
    out["tok_mu"] = _per_domain(g, "log_median", f"{path}.tokens_out", 0, 12)
    out["tok_sd"] = _num(g, "log_sd", f"{path}.tokens_out", 0, 3)
    out["tok_alpha"] = _num(g, "difficulty_slope", f"{path}.tokens_out", -2, 2)
    out["deployment"] = parse_deployment(group("deployment"), f"{path}.deployment") if "deployment" in raw \
        else Deployment()
    g = group("latency")
    out["ttft"] = _num(g, "ttft_s", f"{path}.latency", 0, 600)
    out["speed"] = _num(g, "tokens_per_s", f"{path}.latency", 0.1, 1e5)
    out["lat_sd"] = _num(g, "log_sd", f"{path}.latency", 0, 3)
    out["lat_slope"] = concurrency_slope(g, f"{path}.latency", out["deployment"])
    g = group("price")
    out["price_in"] = _num(g, "input_per_mtok", f"{path}.price", 0, 1000) / 1e6
    out["price_out"] = _num(g, "output_per_mtok", f"{path}.price", 0, 1000) / 1e6
    out["p_exec"] = _num(group("code_exec_error"), "rate", f"{path}.code_exec_error", 0, 1)
    out["context"] = _context_window(raw, path, sources)
    return out


def _context_window(raw: dict, path: str, sources: dict[str, str]) -> float:
    """The optional ``context.window_tokens`` of a model (an integer in ``CONTEXT_TOKENS_RANGE``), or
    ``DEFAULT_CONTEXT_TOKENS`` (an assumed value) when the model has none; an absent group is not entered in
    ``sources``, which list the groups a file holds."""
    if "context" not in raw:
        return float(DEFAULT_CONTEXT_TOKENS)
    lo, hi = CONTEXT_TOKENS_RANGE
    g = _group(raw, "context", path, sources, MODEL_GROUPS["context"])
    window = _num(g, "window_tokens", f"{path}.context", lo, hi)
    if window != int(window):
        raise PoolError(f"{path}.context.window_tokens: expected an integer in [{lo}, {hi}], got {window!r}")
    return window


def _tool(raw: dict, tool: Any, spec: ToolSpec, sources: dict[str, str]) -> dict[str, Any]:
    """A tool's call-model parameters: the pool's ``tools.<name>`` entry, else the tool spec's ``call_model``."""
    if tool.name in raw:
        return parse_call_model(raw[tool.name], f"tools.{tool.name}", tool.kind, tool.behaviour, sources)
    if tool.call_model is None:
        raise PoolError(f"tools.{tool.name}: missing (every tool of tool spec {spec.name!r}, {list(spec.names)}, "
                        "needs an entry here or a call_model in the spec)")
    return parse_call_model(tool.call_model, f"tool_spec({spec.name}).tools.{tool.name}.call_model", tool.kind,
                            tool.behaviour, sources)


def _direct_tool(spec: ToolSpec) -> int:
    """The tool whose direct call an accuracy target describes: the spec's first agent solver."""
    solvers = spec.with_behaviour("solver", agent=True)
    if not solvers:
        raise PoolError(f"tool_spec: {spec.name!r} has no agent tool with behaviour 'solver' (the direct call that "
                        "models' accuracy targets describe)")
    return solvers[0]


def parse_pool(raw: Any, name: str = "pool") -> PoolSpec:
    """Validate a parsed pool file and build its tables; raises ``PoolError`` naming the bad field."""
    if not isinstance(raw, dict):
        raise PoolError(f"(top level): expected a JSON object, got {_show(raw)}")
    _only(raw, TOP_KEYS, "")
    if "name" in raw:
        _text(raw["name"], "name", MAX_NAME_CHARS)
    if "description" in raw:
        _text(raw["description"], "description", MAX_DESCRIPTION_CHARS)
    sources: dict[str, str] = {}
    models_raw = raw.get("models")
    if not isinstance(models_raw, list) or not 1 <= len(models_raw) <= MAX_MODELS:
        raise PoolError(f"models: expected a list of 1..{MAX_MODELS} models, got {_show(models_raw)}")
    if "manager" not in raw:
        raise PoolError("manager: missing (expected a model object)")
    ms = [_model(m, f"models[{i}]", sources) for i, m in enumerate(models_raw)] + [
        _model(raw["manager"], "manager", sources)]
    names = [m["name"] for m in ms[:-1]]
    if len(set(names)) != len(names):
        raise PoolError(f"models: duplicate model names {names}")
    spec_ref = raw.get("tool_spec", "default")
    if not isinstance(spec_ref, str):
        raise PoolError(f"tool_spec: expected a shipped tool spec name or a path to a tool spec file, "
                        f"got {_show(spec_ref)}")
    spec = load_tool_spec(spec_ref)
    tools_raw = raw.get("tools")
    if not isinstance(tools_raw, dict):
        raise PoolError(f"tools: expected an object keyed by tool name {list(spec.names)}, got {_show(tools_raw)}")
    extra = sorted(set(tools_raw) - set(spec.names))
    if extra:
        raise PoolError(f"tools.{extra[0]}: unknown tool; known: {list(spec.names)}"
                        f"{_did_you_mean(extra[0], spec.names)}")
    ts = [_tool(tools_raw, t, spec, sources) for t in spec.tools]
    proto = _group(raw, "protocol", "", sources, PROTOCOL_KEYS)
    k = _num(proto, "ensemble_k", "protocol", 1, 16)
    if k != int(k):
        raise PoolError(f"protocol.ensemble_k: expected an integer in [1, 16], got {k!r}")

    m1, nt = len(ms), spec.num_tools

    def col(key: str) -> np.ndarray:
        return np.array([m[key] for m in ms], np.float64)

    bonus = np.stack([t["bonus"] for t in ts])
    skill_domain = np.stack([m["skill"] for m in ms])
    targets = np.stack([m["targets"] for m in ms])
    bench_dom = np.array([b.domain for b in BENCHMARKS])
    sr = _direct_tool(spec)
    agent = np.array([t.is_agent for t in spec.tools])
    scale = np.log(np.array([t["scale"] for t in ts]))
    caps = np.stack([m["caps"] for m in ms])
    skill = _solved_skills(ms, targets, caps, skill_domain[:, bench_dom].copy(), bonus[sr, bench_dom], scale[sr],
                           col("tau"), bench_dom)

    tok_mu = np.empty((nt, m1, NUM_DOMAINS))
    tok_sd, tok_alpha = np.empty((nt, m1)), np.empty((nt, m1))
    lat_base, lat_per_tok, lat_sd = np.empty((nt, m1)), np.empty((nt, m1)), np.empty((nt, m1))
    p_in, p_out, p_exec = np.zeros((nt, m1)), np.zeros((nt, m1)), np.zeros((nt, m1))
    lat_slope = np.zeros((nt, m1))
    for t in range(nt):
        if agent[t]:
            tok_mu[t] = np.stack([m["tok_mu"] for m in ms]) + scale[t]
            tok_sd[t], tok_alpha[t] = col("tok_sd"), col("tok_alpha")
            lat_base[t] = col("ttft") + ts[t]["overhead"]
            lat_per_tok[t] = 1.0 / col("speed")
            lat_sd[t] = col("lat_sd")
            lat_slope[t] = col("lat_slope")
            p_in[t], p_out[t] = col("price_in"), col("price_out")
            p_exec[t] = col("p_exec") if spec.tools[t].behaviour == "code_exec" else 0.0
        else:
            tok_mu[t] = ts[t]["tok_mu"] + scale[t]
            tok_sd[t], tok_alpha[t] = ts[t]["tok_sd"], 0.0
            lat_base[t] = math.exp(ts[t]["lat_mu"]) + ts[t]["overhead"]
            lat_per_tok[t], lat_sd[t] = 0.0, ts[t]["lat_sd"]
            p_exec[t] = ts[t]["p_exec"]
    return PoolSpec(
        name=str(raw.get("name", name)), model_names=tuple(m["name"] for m in ms), skill=skill,
        skill_domain=skill_domain, accuracy_target=targets, accuracy_cap=caps, bonus=bonus, kappa=col("kappa"),
        affinity=col("affinity"), tau=col("tau"), rho=col("rho"), family=_first_rows(ms, "family"),
        family_share=col("family_share"), family_wrong=col("family_wrong"), kind=_first_rows(ms, "kind"),
        kind_share=col("kind_share"),
        lam=col("lam"), sens=np.stack([m["sens"] for m in ms]), spec=np.stack([m["spec"] for m in ms]),
        p_exec=p_exec, tok_mu=tok_mu, tok_sd=tok_sd, tok_alpha=tok_alpha, lat_base=lat_base,
        lat_per_tok=lat_per_tok, lat_sd=lat_sd, lat_slope=lat_slope,
        replicas=np.array([m["deployment"].replicas for m in ms], np.int64), price_in=p_in, price_out=p_out,
        usd_call=np.array([t["usd_call"] for t in ts]), usd_s=np.array([t["usd_s"] for t in ts]),
        cost_units=np.array([t["units"] for t in ts]), timeout=np.array([t["timeout"] for t in ts]),
        feedback_frac=np.array([t["feedback"] for t in ts]), ensemble_k=int(k),
        manager_tokens_round=_num(proto, "manager_tokens_per_round", "protocol", 0, 1e5),
        manager_tokens_call=_num(proto, "manager_tokens_per_call", "protocol", 0, 1e5),
        prompt_tokens=_num(proto, "prompt_tokens", "protocol", 0, 1e5),
        status_tokens=_num(proto, "status_tokens", "protocol", 0, 1e5),
        repair=_num(proto, "repair", "protocol", 0, 1),
        max_output_tokens=_num(proto, "max_output_tokens", "protocol", 1, 1e7),
        sampling=parse_sampling(proto, "protocol"), context_window=col("context"),
        deployments=tuple(m["deployment"] for m in ms), sources=sources,
        tools=spec)


def _first_rows(ms: list[dict[str, Any]], key: str) -> np.ndarray:
    """Per model row, the row of the first model (manager last) with its ``interaction.<key>`` name (a family or a
    kind); -1 where the model names none."""
    first: dict[str, int] = {}
    out = np.full(len(ms), -1, np.int64)
    for i, m in enumerate(ms):
        if m[key] is not None:
            out[i] = first.setdefault(m[key], i)
    return out


def _solved_skills(ms: list[dict[str, Any]], targets: np.ndarray, caps: np.ndarray, skill: np.ndarray,
                   shift: np.ndarray, log_scale: float, tau: np.ndarray, bench_dom: np.ndarray) -> np.ndarray:
    """Per-(model, benchmark) skills: where a target exists, theta solves the accuracy at the target's own setting
    (``parasim.pools.harness.capped_accuracy`` under its ``cap_tokens``, truncated calls wrong; uncapped targets by
    ``solve_skill``) minus the direct tool's bonus ``shift``; elsewhere ``skill`` (the per-domain values) stays."""
    mu = np.broadcast_to(np.array([b.mu for b in BENCHMARKS]), targets.shape)
    spread = effective_spread(np.array([b.sigma for b in BENCHMARKS])[None, :], tau[:, None])
    shift = np.broadcast_to(shift, targets.shape)
    free = ~np.isnan(targets) & np.isinf(caps)
    if free.any():
        skill[free] = solve_skill(targets[free], mu[free], spread[free]) - shift[free]
    capped = ~np.isnan(targets) & ~np.isinf(caps)
    if capped.any():
        tok_mu = np.stack([m["tok_mu"][bench_dom] for m in ms]) + log_scale
        per_model = np.broadcast_to(np.array([[m["tok_alpha"], m["tok_sd"]] for m in ms]).T[:, :, None],
                                    (2, *targets.shape))
        sigma = np.broadcast_to(np.array([b.sigma for b in BENCHMARKS]), targets.shape)
        taus = np.broadcast_to(tau[:, None], targets.shape)
        theta, ceiling = solve_capped_skill(targets[capped], mu[capped], sigma[capped], taus[capped], caps[capped],
                                            tok_mu[capped], per_model[0][capped], per_model[1][capped])
        bad = targets[capped] >= ceiling - 1e-4
        if bad.any():
            m, b = (ix[bad][0] for ix in np.nonzero(capped))
            raise PoolError(f"models[{m}].accuracy.{BENCHMARKS[b].name}: {100 * targets[m, b]:g}% is more than the "
                            f"{100 * ceiling[bad][0]:.1f}% of calls its token distribution leaves untruncated under "
                            f"cap_tokens {caps[m, b]:g}")
        skill[capped] = theta - shift[capped]
    return skill


def accuracy_under_cap(pool: PoolSpec, cap: np.ndarray | float) -> np.ndarray:
    """acc[m, b] of one direct call (the spec's first agent solver on a fresh question) under generation cap ``cap``
    (broadcast to [M+1, NB]; inf: uncapped), truncated calls counted wrong (``parasim.pools.harness.capped_accuracy``).
    At each target's own ``accuracy_cap`` it reproduces the targets; at the pool's ``max_output_tokens`` it is the
    harness-corrected target a fresh simulation is checked against."""
    sr = _direct_tool(pool.tools)
    dom = np.array([b.domain for b in BENCHMARKS])
    shape = pool.skill.shape
    mu = np.broadcast_to(np.array([b.mu for b in BENCHMARKS]), shape)
    sigma = np.broadcast_to(np.array([b.sigma for b in BENCHMARKS]), shape)
    theta = pool.skill + pool.bonus[sr, dom]
    return capped_accuracy(theta, mu, sigma, pool.tau[:, None], np.broadcast_to(cap, shape), pool.tok_mu[sr][:, dom],
                           pool.tok_alpha[sr][:, None], pool.tok_sd[sr][:, None])


def assumed_parameters(pool: str | Path | dict | PoolSpec) -> list[str]:
    """Paths of the parameter groups of a pool with no published source (the README's assumed list)."""
    return sorted(path for path, src in load_pool(pool).sources.items() if src == "assumed")


def shipped_pools() -> list[str]:
    """Names of the pools shipped in ``parasim/pools/files``."""
    return shipped_names(POOL_DIR)


def pool_file(name_or_path: str | Path) -> Path:
    """The path of a shipped pool (by name) or of a pool JSON file; ``PoolError`` when it is neither."""
    return shipped_or_path(name_or_path, POOL_DIR, "pool")


def read_pool_file(path: str | Path) -> tuple[dict[str, Any], PoolSpec]:
    """A pool JSON file's parsed content, read strictly (``parasim.config.jsonl.read_json_file``), and its tables;
    every error is a ``PoolError`` prefixed with the file."""
    try:
        raw = read_json_file(path)
    except JSONInputError as err:
        raise PoolError(str(err)) from None
    try:
        return raw, parse_pool(raw, name=Path(path).stem)
    except PoolError as err:
        raise PoolError(f"{path}: {err}") from None


def load_pool(name_or_path: str | Path | dict | PoolSpec) -> PoolSpec:
    """A shipped pool by name, a path to a pool JSON file, a parsed pool dict, or a PoolSpec (returned as is)."""
    if isinstance(name_or_path, PoolSpec):
        return name_or_path
    if isinstance(name_or_path, dict):
        return parse_pool(name_or_path)
    return read_pool_file(pool_file(name_or_path))[1]


def reliability(pool: PoolSpec, ensemble: bool = True) -> np.ndarray:
    """Expected accuracy acc[b, t, m] of an OK call (z integrated out): the termination model's prior.

    The termination model weighs a call's answer by the log-odds of this accuracy, which is what a
    manager trained on the pool would know about its tools, never the task's hidden difficulty.
    """
    mu = np.array([b.mu for b in BENCHMARKS])
    sigma = effective_spread(np.array([b.sigma for b in BENCHMARKS])[:, None], pool.tau[None, :])  # [NB, M+1]
    dom = np.array([b.domain for b in BENCHMARKS])
    theta = pool.skill[None, :, :].transpose(2, 0, 1) + pool.bonus[:, dom].T[:, :, None]  # [NB, T, M+1]
    z = mu[:, None, None, None] + math.sqrt(2.0) * sigma[:, None, :, None] * _GH_X
    p = expit(pool.logit_scale * (theta[..., None] - z))
    acc = (p * _GH_W).sum(-1) / math.sqrt(math.pi)
    if ensemble:
        k = pool.ensemble_k
        j = np.arange(k + 1)
        binom = np.array([math.comb(k, i) for i in j], np.float64)
        pk = binom * p[..., None] ** j * (1 - p[..., None]) ** (k - j)
        win = np.where(2 * j > k, 1.0, np.where(2 * j == k, 0.5, 0.0))
        pmaj = (pk * win).sum(-1)
        ens = list(pool.tools.with_behaviour("ensemble"))
        acc[:, ens] = ((pmaj * _GH_W).sum(-1) / math.sqrt(math.pi))[:, ens]
    return acc


def answer_space(options: int) -> int:
    """How many distinct answers a task admits: its options, or NUM_ANSWERS for free-form answers."""
    return NUM_ANSWERS if options == FREE_FORM else options
