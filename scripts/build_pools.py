"""Builds the shipped pool files (``parasim/pools/files/*.json``) from the published figures written out below.

Run ``python scripts/build_pools.py`` to rewrite the JSON files; a test checks that the committed files equal
what this script builds, so the figures below are the single source. A developer's generator, not part of the
installed package.
Accuracy targets (percent) carry their source key; a model's per-domain skill is the mean of the skills
solved from its targets in that domain (``parasim.pools.pool.solve_skill``), and is marked assumed when a
domain has no target. Values with no published figure are marked "assumed".
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from parasim.calibration.fitted_structure import FittedStructure, load_fitted_structure
from parasim.pools.harness import solve_capped_skill
from parasim.pools.pool import DOMAINS, effective_spread, solve_skill
from parasim.tasks.suites import BENCHMARK_INDEX, BENCHMARKS

OUT = Path(__file__).resolve().parents[1] / "parasim" / "pools" / "files"


# The call model's joint structure (docs/simulator.md, section 8): every model of a pool that states the temperature
# the structure was carried to (the paramanager harness's 1.0: paramanager, paramanager_mono, openweight) carries the
# fit on the shipped per-query tables (``parasim.calibration.fitted_structure``: tau, kappa, affinity, families by
# maker within kinds and their shares; source key PQ). The toolorchestra pool states no temperature, so its v2
# structure stays assumed: TAU_TO is the SD of the per-(task, model) effect, set so that its per-query oracle gain
# over its best single model sits at the target LLMRouterBench implies for its size (scripts/simulator_stats.py,
# ``oracle_target``); AFFINITY is the probability that a model's preferred wrong answer is the task's attractive
# distractor, and KAPPA_SHIFT raises every assumed kappa so that cross-model wrong-answer agreement on 4-option items
# is Kim et al.'s ~60% (a model repeats its own wrong answer at least as often as two models share one:
# kappa^2 + (1 - kappa^2) S >= 0.6).
FIT = load_fitted_structure()
TAU_TO = 0.6
AFFINITY = 0.8
KAPPA_SHIFT = 0.25


# Generation caps of the settings the accuracy targets were published at (``cap_tokens``; absent: uncapped).
# The Qwen3-2507 Instruct cards (Q4I, Q30I, Q235I) recommend an output length of 16,384 tokens and state no other
# cap for their evaluations, so their figures are read as measured under it; the Qwen3 Technical Report (QTR)
# evaluates with 32,768 output tokens (38,912 on AIME); the Qwen3-2507 Thinking cards (Q235T, Q30T) with 81,920 on
# reasoning and coding tasks (AIME, HMMT, LiveCodeBench) and 32,768 on the others (GPQA, MMLU-Pro); the gpt-oss
# card (OSS, high effort) and the leaderboard (LLB) state no cap.
CARD_CAP = {"Q4I": 16384, "Q30I": 16384, "Q235I": 16384, "QTR": 32768, "Q235T": 32768, "Q30T": 32768}
QTR_AIME_CAP = 38912
THINKING_LONG_CAP = 81920
THINKING_LONG = ("AIME24", "AIME25", "HMMT25", "LiveCodeBench")


def card_cap(bench, src):
    """The generation cap of a published target's setting, or None (uncapped)."""
    if src == "QTR" and bench.startswith("AIME"):
        return QTR_AIME_CAP
    if src in ("Q235T", "Q30T") and bench in THINKING_LONG:
        return THINKING_LONG_CAP
    return CARD_CAP.get(src)


def solved(targets, tau, tok=None, tok_sd=0.8, slope=0.25):
    """Per target: (skill solved from the accuracy at its setting's cap, its domain, its source)."""
    out = {}
    for b, (v, src) in targets.items():
        bb = BENCHMARKS[BENCHMARK_INDEX[b]]
        cap = card_cap(b, src)
        if cap is None:
            theta = float(solve_skill(np.array(v / 100), np.array(bb.mu), effective_spread(bb.sigma, tau)))
        else:
            theta = float(solve_capped_skill(np.array(v / 100), bb.mu, bb.sigma, tau, cap, tok[int(bb.domain)],
                                             slope, tok_sd)[0])
        out[b] = (theta, bb.domain.name.lower(), src)
    return out


def model(
    name,
    targets,
    skill_assumed,
    *,
    structure: FittedStructure | None = FIT,
    kind=None,
    kappa=0.5,
    affinity=AFFINITY,
    tau=TAU_TO,
    rho=0.35,
    lam=0.08,
    sens=(0.6, 0.55, 0.5, 0.6),
    spec=(0.85, 0.85, 0.85, 0.85),
    tok=(8.0, 7.2, 6.5, 7.8),
    tok_sd=0.8,
    slope=0.25,
    tok_src="assumed",
    ttft=0.75,
    speed=100.0,
    lat_sd=0.3,
    lat_src="LLB",
    price=(0.1, 0.3),
    price_src="LLB",
    exec_rate=0.15,
    review_src="assumed",
    slope_conc=None,
    deployment=None,
    context=None,
):
    """A MODEL entry; skills per domain come from the targets where there are any (see module doc). With a
    ``structure`` its errors and interaction groups are the fitted ones (the model's family from its name, within
    ``kind`` or the kind its name says), and ``kappa``, ``affinity`` and ``tau`` are not read; without one they are
    the assumed groups of those values."""
    if structure is not None:
        tau = structure.sd
    sol = solved(targets, tau, tok, tok_sd, slope)
    skill, skill_src = {}, set()
    for d in DOMAINS:
        th = [t for (t, dd, s) in sol.values() if dd == d]
        if th:
            skill[d] = round(float(np.mean(th)), 3)
            skill_src |= {s for (t, dd, s) in sol.values() if dd == d}
        else:
            skill[d] = skill_assumed[d]
            skill_src.add("assumed")
    # a group mixing solved and assumed domains is marked assumed (the solved ones are listed under accuracy)
    src = "assumed" if "assumed" in skill_src else "+".join(sorted(skill_src))
    return {
        "name": name,
        "skill": {**skill, "source": src},
        "accuracy": {b: {"value": v, **({"cap_tokens": card_cap(b, s)} if card_cap(b, s) else {}), "source": s}
                     for b, (v, s) in targets.items()},
        **(structure.model_groups(name, kind) if structure is not None else {
            "errors": {"kappa": round(kappa + KAPPA_SHIFT, 3), "affinity": affinity, "source": "assumed"},
            "interaction": {"sd": tau, "source": "assumed"}}),
        "anchoring": {"rho": rho, "source": "assumed"},
        "long_context": {"lambda": lam, "source": "assumed"},
        "review": {
            "sensitivity": dict(zip(DOMAINS, sens, strict=False)),
            "specificity": dict(zip(DOMAINS, spec, strict=False)),
            "source": review_src,
        },
        "tokens_out": {
            "log_median": dict(zip(DOMAINS, [round(x, 3) for x in tok], strict=False)),
            "log_sd": tok_sd,
            "difficulty_slope": slope,
            "source": tok_src,
        },
        "latency": {"ttft_s": ttft, "tokens_per_s": round(speed, 2), "log_sd": lat_sd,
                    **({"concurrency_slope": slope_conc} if slope_conc is not None else {}), "source": lat_src},
        "price": {"input_per_mtok": price[0], "output_per_mtok": price[1], "source": price_src},
        "code_exec_error": {"rate": exec_rate, "source": "AA"},
        **({"deployment": deployment} if deployment is not None else {}),
        # the context window a manager's prompt states (observation descriptors only), with its card
        **({"context": {"window_tokens": context[0], "source": context[1]}} if context is not None else {}),
    }


def dom(m, s, k, c):
    """A per-domain table."""
    return {"math": m, "science": s, "knowledge": k, "code": c}


def agent_tool(bonus, units, *, scale=1.0, feedback=0.1, overhead=0.05, timeout=900.0, bsrc="assumed"):
    """An agent tool entry."""
    return {
        "bonus": {**bonus, "source": bsrc},
        "cost": {"units": units, "usd_per_call": 0.0, "usd_per_s": 0.0, "source": "assumed"},
        "runtime": {
            "overhead_s": overhead,
            "timeout_s": timeout,
            "tokens_scale": scale,
            "feedback_frac": feedback,
            "source": "assumed",
        },
    }


def tools():
    """The tool tables shared by the shipped pools (bonuses, cost units and runtimes are assumed)."""
    t = {
        "standard_reasoner": agent_tool(dom(0.0, 0.0, 0.0, 0.0), 1.0),
        "critical_reviewer": agent_tool(dom(0.0, 0.0, 0.0, 0.0), 1.0, scale=0.5),
        "code_reasoner": agent_tool(dom(0.3, 0.0, -0.5, 0.6), 1.0),
        "knowledge_searcher": agent_tool(dom(-0.3, 0.3, 0.6, -0.3), 1.0, overhead=1.6),
        "ensemble_solver": agent_tool(dom(0.0, 0.0, 0.0, 0.0), 3.0),
        "python": {
            "bonus": {**dom(0.8, 0.2, -1.5, 0.5), "source": "assumed"},
            "cost": {"units": 0.2, "usd_per_call": 0.0, "usd_per_s": 8.3e-6, "source": "TOc"},
            "runtime": {
                "overhead_s": 0.1,
                "timeout_s": 30.0,
                "tokens_scale": 1.0,
                "feedback_frac": 1.0,
                "source": "assumed",
            },
            "output": {
                "log_median_tokens": round(math.log(150), 3),
                "log_sd": 0.8,
                "latency_log_median_s": 0.0,
                "latency_log_sd": 1.2,
                "source": "assumed",
            },
            "exec_error": {"rate": 0.15, "source": "AA"},
        },
        "search": {
            "bonus": {**dom(-2.0, 0.2, 0.8, -2.0), "source": "assumed"},
            "cost": {"units": 0.2, "usd_per_call": 0.01, "usd_per_s": 0.0, "source": "TOc"},
            "runtime": {
                "overhead_s": 0.0,
                "timeout_s": 30.0,
                "tokens_scale": 1.0,
                "feedback_frac": 1.0,
                "source": "assumed",
            },
            "output": {
                "log_median_tokens": round(math.log(400), 3),
                "log_sd": 0.3,
                "latency_log_median_s": round(math.log(1.6), 3),
                "latency_log_sd": round(math.sqrt(2 * math.log(2.5 / 1.6)), 3),
                "source": "assumed",
            },
        },
    }
    return t


PROTOCOL = {
    "ensemble_k": 3,
    "manager_tokens_per_round": 200,
    "manager_tokens_per_call": 60,
    "prompt_tokens": 300,
    "status_tokens": 30,
    "repair": 0.5,
    "max_output_tokens": 24576,
    "source": "assumed",
}
# ParaManager's harness (PM): every invocation at temperature 1.0 with 24,576 generation tokens; reasoning effort
# "high" is the setting of GPT-OSS-20B's targets and token lengths (OSS; PM states none).
PM_PROTOCOL = {**PROTOCOL, "temperature": 1.0, "reasoning_effort": "high"}

# Self-hosted serving (docs/simulator.md, "Deployment and harness"). PM trains and evaluates on H200 GPUs and names no
# API provider, so its three pool models are served there with vLLM; one replica on one GPU each and the released
# checkpoints' precision are assumed (PM states neither). Per-request speed: MSA's vLLM measurement of a 3B-active
# MoE on one H200 SXM (single request 210.8 tokens/s and TTFT 379 ms at 1K context; 5.6x the single-request
# throughput at 10 concurrent requests, so s(10) / s(1) = 0.56 and beta = (1 / 0.56 - 1) / 9), carried to all three
# models, which are MoEs of 3.3B (Qwen3-30B-A3B family) and 3.6B (gpt-oss-20b) active parameters.
H200_TTFT, H200_SPEED, H200_BETA = 0.379, 210.8, round((1 / 0.56 - 1) / 9, 4)


def self_hosted(precision, active, total, gpus=1):
    """A one-replica vLLM deployment on ``gpus`` H200s."""
    return {"kind": "self_hosted", "gpu": "H200", "gpus_per_replica": gpus, "replicas": 1, "precision": precision,
            "active_params_b": active, "total_params_b": total, "engine": "vLLM", "source": "assumed"}


SERVED = {"ttft": H200_TTFT, "speed": H200_SPEED, "slope_conc": H200_BETA, "lat_src": "MSA", "price_src": "LLB"}
# GPT-OSS-20B at high effort: its card's mean CoT length on AIME is about 20k tokens (OSS), so the math log median
# is set so that the lognormal's mean on AIME-level items (mu_b 1.55, the catalogue's sigma_b, slope 0.25, log sd
# 0.8) is 20,000.
OSS_AIME_MEAN = 20000
_AIME_MU = 0.5 * (BENCHMARKS[BENCHMARK_INDEX["AIME24"]].mu + BENCHMARKS[BENCHMARK_INDEX["AIME25"]].mu)
_AIME_SIGMA = 0.5 * (BENCHMARKS[BENCHMARK_INDEX["AIME24"]].sigma + BENCHMARKS[BENCHMARK_INDEX["AIME25"]].sigma)


def aime_log_median(aime_mean):
    """The math log median whose lognormal has mean ``aime_mean`` on AIME-level items (slope 0.25, log sd 0.8)."""
    return math.log(aime_mean) - 0.25 * _AIME_MU - (0.25**2 * _AIME_SIGMA**2 + 0.8**2) / 2


OSS_MATH_LOG_MEDIAN = aime_log_median(OSS_AIME_MEAN)
LN = math.log
q30 = model(
    "Qwen3-30B-A3B-Instruct-2507",
    {
        "AIME25": (61.3, "Q30I"),
        "HMMT25": (43.0, "Q30I"),
        "GPQA": (70.4, "Q30I"),
        "MMLU-Pro": (78.4, "Q30I"),
        "LiveCodeBench": (43.2, "Q30I"),
    },
    dom(0, 0, 0, 0),
    tok=(LN(5000), LN(1500), LN(800), LN(3000)),
    deployment=self_hosted("bf16", 3.3, 30.5),
    **SERVED,
    context=(262144, "Q30I"),
)
coder = model(
    "Qwen3-Coder-30B-A3B-Instruct",
    {"LiveCodeBench": (56.0, "assumed")},
    dom(
        round(q30["skill"]["math"] - 1.0, 3),
        round(q30["skill"]["science"] - 0.8, 3),
        round(q30["skill"]["knowledge"] - 0.8, 3),
        0,
    ),
    tok=(LN(2500), LN(1000), LN(600), LN(2000)),
    sens=(0.5, 0.45, 0.45, 0.65),
    deployment=self_hosted("bf16", 3.3, 30.5),
    **SERVED,
    context=(262144, "Q3C"),
)
oss = model(
    "GPT-OSS-20B",
    {"AIME24": (92.1, "OSS"), "AIME25": (91.7, "OSS"), "GPQA": (71.5, "OSS")},
    dom(0, 0, round(q30["skill"]["knowledge"], 3), round(coder["skill"]["code"], 3)),
    tok=(OSS_MATH_LOG_MEDIAN, LN(3000), LN(1200), LN(5000)),
    tok_src="OSS",
    deployment=self_hosted("mxfp4", 3.6, 20.9),
    **SERVED,
    price=(0.05, 0.20),
    sens=(0.7, 0.6, 0.55, 0.65),
    spec=(0.9, 0.88, 0.88, 0.88),
    context=(131072, "OSS"),
)
mgr4 = model(
    "Qwen3-4B-Instruct-2507",
    {
        "AIME25": (47.4, "Q4I"),
        "HMMT25": (31.0, "Q4I"),
        "GPQA": (62.0, "Q4I"),
        "MMLU-Pro": (69.6, "Q4I"),
        "LiveCodeBench": (35.1, "Q4I"),
    },
    dom(0, 0, 0, 0),
    tok=(LN(4000), LN(1200), LN(600), LN(2500)),
    price_src="assumed",
    lat_src="assumed",
    speed=150.0,
    ttft=0.2,
)


def pool(name, desc, models, manager, protocol=PM_PROTOCOL):
    """A pool file body."""
    return {
        "name": name,
        "description": desc,
        "manager": manager,
        "models": models,
        "tools": tools(),
        "protocol": protocol,
    }


pm = pool(
    "paramanager",
    "ParaManager's pool (PM): Qwen3-30B-A3B-Instruct-2507, Qwen3-Coder-30B-A3B-Instruct, GPT-OSS-20B, "
    "self-hosted on H200 GPUs with vLLM; manager Qwen3-4B-Instruct-2507. Accuracy targets are model-card figures "
    "at their own generation caps; the harness caps every call at 24,576 tokens (temperature 1.0).",
    [q30, coder, oss],
    mgr4,
)
mono = pool(
    "paramanager_mono",
    "ParaManager's first pool model alone (Qwen3-30B-A3B-Instruct-2507), manager Qwen3-4B-Instruct-2507.",
    [q30],
    mgr4,
)


def to_model(name, targets, assumed, *, mean_lat, lat_src, price, tok, ttft=0.5, **kw):
    """A ToolOrchestra model: tokens/s chosen so a math call's mean latency is the published mean (TOc)."""
    mean_tokens = math.exp(tok[0] + 0.8**2 / 2)
    speed = mean_tokens / max(mean_lat - ttft, 1.0)
    return model(
        name, targets, assumed, ttft=ttft, speed=speed, lat_src=lat_src, price=price, price_src="TOc", tok=tok,
        structure=None, deployment={"kind": "api", "source": "TOc"}, **kw
    )


gpt5 = to_model(
    "GPT-5",
    {"AIME25": (94.6, "LLB"), "HMMT25": (93.3, "LLB"), "GPQA": (85.7, "LLB")},
    dom(0, 0, 3.5, 3.0),
    mean_lat=96,
    lat_src="TOc",
    price=(1.25, 10.0),
    tok=(LN(8000), LN(4000), LN(1500), LN(6000)),
    sens=(0.8, 0.75, 0.7, 0.8),
    spec=(0.92, 0.9, 0.9, 0.9),
    kappa=0.4,
)
gpt5m = to_model(
    "GPT-5-mini",
    {"AIME25": (91.1, "LLB"), "HMMT25": (87.8, "LLB"), "GPQA": (82.3, "LLB")},
    dom(0, 0, 3.0, 2.5),
    mean_lat=27,
    lat_src="TOc",
    price=(0.25, 2.0),
    tok=(LN(6000), LN(3000), LN(1200), LN(5000)),
    sens=(0.75, 0.7, 0.65, 0.75),
    spec=(0.9, 0.88, 0.88, 0.88),
    kappa=0.45,
)
q32 = to_model(
    "Qwen3-32B",
    {"AIME24": (81.4, "QTR"), "AIME25": (72.9, "QTR"), "GPQA": (68.4, "QTR"), "LiveCodeBench": (65.7, "QTR")},
    dom(0, 0, 1.8, 0),
    mean_lat=11,
    lat_src="TOc",
    price=(0.8, 0.8),
    tok=(LN(6000), LN(3000), LN(1200), LN(5000)),
)
q8 = to_model(
    "Qwen3-8B",
    {"AIME24": (76.0, "QTR"), "AIME25": (67.3, "QTR"), "GPQA": (62.0, "QTR"), "LiveCodeBench": (57.5, "QTR")},
    dom(0, 0, 1.2, 0),
    mean_lat=9,
    lat_src="assumed",
    price=(0.2, 0.2),
    tok=(LN(6000), LN(3000), LN(1200), LN(5000)),
)
llama = to_model(
    "Llama-3.3-70B-Instruct",
    {"GPQA": (50.5, "LLB"), "MMLU-Pro": (68.9, "LLB")},
    dom(-0.5, 0, 0, 0.2),
    mean_lat=15,
    lat_src="TOc",
    price=(0.9, 0.9),
    tok=(LN(800), LN(600), LN(400), LN(700)),
    kappa=0.55,
)
m72 = to_model(
    "Qwen2.5-Math-72B-Instruct",
    {},
    dom(0.3, -0.5, -0.5, -1.0),
    mean_lat=13,
    lat_src="TOc",
    price=(0.9, 0.9),
    tok=(LN(1000), LN(600), LN(400), LN(700)),
    kappa=0.55,
)
m7 = to_model(
    "Qwen2.5-Math-7B-Instruct",
    {},
    dom(-0.6, -1.5, -1.5, -2.0),
    mean_lat=9,
    lat_src="TOc",
    price=(0.2, 0.2),
    tok=(LN(900), LN(600), LN(400), LN(700)),
    kappa=0.6,
)
coder32 = to_model(
    "Qwen2.5-Coder-32B-Instruct",
    {},
    dom(-0.5, -0.5, -0.3, 1.0),
    mean_lat=9,
    lat_src="TOc",
    price=(0.8, 0.8),
    tok=(LN(900), LN(600), LN(400), LN(900)),
    kappa=0.55,
)
orch = model(
    "Orchestrator-8B (Qwen3-8B, non-thinking)",
    {"AIME24": (29.1, "QTR"), "AIME25": (20.9, "QTR"), "GPQA": (39.3, "QTR"), "LiveCodeBench": (22.8, "QTR")},
    dom(0, 0, 0.5, 0),
    tok=(LN(1500), LN(800), LN(500), LN(1200)),
    price=(0.2, 0.2),
    price_src="TOc",
    lat_src="assumed",
    speed=135.0,
    ttft=0.064,
    structure=None,
)
to = pool(
    "toolorchestra",
    "ToolOrchestra's pool (TO, TOc): eight models with third-party API prices and the mean call latencies shown to "
    "its orchestrator; manager Orchestrator-8B (Qwen3-8B base, non-thinking skill).",
    [gpt5, gpt5m, q32, q8, llama, m72, m7, coder32],
    orch,
    protocol=PROTOCOL,
)


# The `openweight` pool (docs/simulator.md, section 5.1): six public open-weight checkpoints, larger and more
# varied than paramanager's, self-hosted on H200 GPUs with vLLM under paramanager's manager, tools and harness, for
# evaluating a policy trained on paramanager on a pool it has never seen (pool shift).


# Serving the openweight models (docs/simulator.md, section 5.1). GPUs per replica: the fewest H200s (141 GB
# HBM3e each, NVH200) in a power of two whose memory holds the released checkpoint's weights within WEIGHT_SHARE of it
# (vLLM's default gpu_memory_utilization is 0.9; the rest of that is the KV cache). Single-request decode speed: the
# derivation of the paramanager pool (MSA's 3B-active FP8 MoE on one H200, 210.8 tokens/s), with the time to read the
# active weights a token needs beyond MSA's (per GPU of the replica, tensor parallel) at the H200's 4.8 TB/s HBM
# bandwidth (NVH200) added to MSA's time per token: decode at one request is memory-bandwidth bound. A model that reads
# no more bytes per token than MSA's takes MSA's figure unchanged (source MSA), as the paramanager models do; TTFT
# (379 ms) and the concurrency slope are MSA's for every model.
H200_GB, H200_TBPS = 141.0, 4.8
MSA_ACTIVE_GB = 3.0  # MSA's model: 3B active parameters in FP8, one byte each
BYTES_PER_PARAM = {"bf16": 2.0, "fp8": 1.0, "mxfp4": 4.25 / 8}  # MXFP4: 4-bit values and one 8-bit scale per 32
WEIGHT_SHARE = 0.85


def h200_served(precision, active, total):
    """A self-hosted H200 deployment and its latency figures (see above) for a checkpoint of ``active`` / ``total``
    billion parameters in ``precision``."""
    width = BYTES_PER_PARAM[precision]
    gpus = 1
    while total * width > WEIGHT_SHARE * H200_GB * gpus:
        gpus *= 2
    extra_gb = max(0.0, active * width / gpus - MSA_ACTIVE_GB)
    speed = 1.0 / (1.0 / H200_SPEED + extra_gb / (H200_TBPS * 1000.0))
    return {"deployment": self_hosted(precision, active, total, gpus), "ttft": H200_TTFT, "speed": speed,
            "slope_conc": H200_BETA, "lat_src": "MSA" if extra_gb == 0 else "MSA+NVH200"}


THINKING_REVIEW = {"sens": (0.7, 0.6, 0.55, 0.65), "spec": (0.9, 0.88, 0.88, 0.88)}  # assumed, as GPT-OSS-20B's
q235t = model(
    "Qwen3-235B-A22B-Thinking-2507",
    {
        "AIME25": (92.3, "Q235T"),
        "HMMT25": (83.9, "Q235T"),
        "GPQA": (81.1, "Q235T"),
        "MMLU-Pro": (84.4, "Q235T"),
        "LiveCodeBench": (74.1, "Q235T"),
    },
    dom(0, 0, 0, 0),
    tok=(aime_log_median(20000), LN(6000), LN(2500), LN(10000)),
    price=(0.65, 3.0),
    price_src="assumed",
    **THINKING_REVIEW,
    **h200_served("bf16", 22.0, 235.0),
    context=(262144, "Q235T"),
)
q235i = model(
    "Qwen3-235B-A22B-Instruct-2507",
    {
        "AIME25": (70.3, "Q235I"),
        "HMMT25": (55.4, "Q235I"),
        "GPQA": (77.5, "Q235I"),
        "MMLU-Pro": (83.0, "Q235I"),
        "LiveCodeBench": (51.8, "Q235I"),
    },
    dom(0, 0, 0, 0),
    tok=(LN(5000), LN(1500), LN(800), LN(3000)),
    price=(0.22, 0.88),
    price_src="assumed",
    **h200_served("bf16", 22.0, 235.0),
    context=(262144, "Q235I"),
)
q30t = model(
    "Qwen3-30B-A3B-Thinking-2507",
    {
        "AIME25": (85.0, "Q30T"),
        "HMMT25": (71.4, "Q30T"),
        "GPQA": (73.4, "Q30T"),
        "MMLU-Pro": (80.9, "Q30T"),
        "LiveCodeBench": (66.0, "Q30T"),
    },
    dom(0, 0, 0, 0),
    tok=(aime_log_median(20000), LN(6000), LN(2500), LN(10000)),
    price=(0.10, 0.30),
    price_src="assumed",
    **THINKING_REVIEW,
    **h200_served("bf16", 3.3, 30.5),
    context=(262144, "Q30T"),
)
oss120 = model(
    "GPT-OSS-120B",
    {"AIME24": (95.8, "OSS"), "AIME25": (92.5, "OSS"), "GPQA": (80.1, "OSS")},
    # assumed: knowledge and code as Qwen3-235B-A22B-Thinking-2507's (the pool's other high-effort reasoner)
    dom(0, 0, q235t["skill"]["knowledge"], q235t["skill"]["code"]),
    tok=(OSS_MATH_LOG_MEDIAN, LN(3000), LN(1200), LN(5000)),  # assumed: GPT-OSS-20B's (OSS gives 20b's length)
    price=(0.15, 0.60),
    price_src="assumed",
    **THINKING_REVIEW,
    **h200_served("mxfp4", 5.1, 116.8),
    context=(131072, "OSS"),
)
q32t = model(
    "Qwen3-32B",
    {"AIME24": (81.4, "QTR"), "AIME25": (72.9, "QTR"), "GPQA": (68.4, "QTR"), "LiveCodeBench": (65.7, "QTR")},
    dom(0, 0, 1.8, 0),  # knowledge assumed, as the toolorchestra pool's Qwen3-32B
    kind="reasoning",  # served in thinking mode (the targets are QTR's thinking results), which its name does not say
    tok=(aime_log_median(14000), LN(5000), LN(2000), LN(8000)),
    price=(0.8, 0.8),
    price_src="TOc",
    **h200_served("bf16", 32.8, 32.8),
)
llama70 = model(
    "Llama-3.3-70B-Instruct",
    {"GPQA": (50.5, "LLB"), "MMLU-Pro": (68.9, "LLB")},
    dom(-0.5, 0, 0, 0.2),  # math and code assumed, as the toolorchestra pool's
    tok=(LN(800), LN(600), LN(400), LN(700)),
    price=(0.9, 0.9),
    price_src="TOc",
    **h200_served("bf16", 70.6, 70.6),
)
ow = pool(
    "openweight",
    "Six public open-weight checkpoints, larger and more varied than paramanager's, for evaluating pool shift (a "
    "policy trained on paramanager evaluated on a pool it has never seen): Qwen3-235B-A22B-Thinking-2507, "
    "Qwen3-235B-A22B-Instruct-2507, Qwen3-30B-A3B-Thinking-2507, GPT-OSS-120B, Qwen3-32B (thinking mode), "
    "Llama-3.3-70B-Instruct, self-hosted on H200 GPUs with vLLM; manager, tools and harness as paramanager's "
    "(Qwen3-4B-Instruct-2507; 24,576-token cap, temperature 1.0). Accuracy targets are model-card figures at their "
    "own generation caps.",
    [q235t, q235i, q30t, oss120, q32t, llama70],
    mgr4,
)


def build() -> dict[str, dict]:
    """The shipped pools as parsed JSON, by name."""
    return {p["name"]: p for p in (pm, mono, to, ow)}


if __name__ == "__main__":
    for name, pool in build().items():
        (OUT / f"{name}.json").write_text(json.dumps(pool, indent=1) + "\n")
