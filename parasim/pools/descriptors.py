"""Model and tool descriptors: what a manager's prompt tells it about its pool, as feature rows.

A policy that picks models by index can only act on the pool it was trained on. Described by what a prompt would
say of them (price, speed, context window, published accuracy; a tool's kind and cost), models and tools become
rows of features, and a policy that scores rows (``training.policy``, ``model_head="descriptor"``) acts on
any pool with the same tool spec, whatever its number of models. The envs add them to the observation with the
option ``descriptors=True`` (keys ``models`` and ``tools``); this module is their one definition.

``models`` float32[M, F_m], one row per agent model (action index order), columns ``MODEL_FEATURES``:
  - ``price_in``, ``price_out``: USD per million input / output tokens (``PoolSpec.price_in`` / ``price_out`` of
    the direct-call tool, the spec's first agent solver);
  - ``decode_speed``: single-request decode tokens/s (``1 / PoolSpec.lat_per_tok``);
  - ``ttft``: seconds before the first token, the direct tool's overhead included (``PoolSpec.lat_base``);
  - ``acc_<domain>`` for math, science, knowledge, code: the mean of the model's published direct-call accuracy
    targets (``PoolSpec.accuracy_target``) over the suite's benchmarks of that domain that have one, and
    ``has_acc_<domain>``, 1 where at least one does (the accuracy column is then 0, never NaN);
  - ``context``: the context window in tokens (``PoolSpec.context_window``;
    ``parasim.pools.pool.DEFAULT_CONTEXT_TOKENS``, assumed, where the pool gives none).

``tools`` float32[T, F_t], one row per tool of the pool's tool spec, columns ``TOOL_FEATURES``: ``agent`` /
``basic`` (kind one-hot), ``cost_units``, ``usd_per_call``, ``usd_per_s`` (``PoolSpec.cost_units`` / ``usd_call``
/ ``usd_s``); an episode with its own tool prices (task options) shows those in ``usd_per_call``
(``episode_tool_rows``); the tools it does not offer are masked in ``action_mask``.

Scaling: every non-negative quantity ``x`` with a unit is squashed as ``x / (x + ref)``, its own reference
``REFERENCES`` (a typical value, which maps to 0.5): monotone, about linear around the typical values and
log-like across orders of magnitude (prices of 0.05 and 10 USD per Mtok stay apart), bounded by construction, so
the spaces' bounds [0, 1] are true bounds for any pool the parser accepts, and no running statistics make a run
depend on its history. Accuracies and flags are already in [0, 1].
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from parasim.pools.param_groups import DOMAINS
from parasim.pools.pool import PoolSpec
from parasim.tasks.suites import BENCHMARKS, TaskSuite

MODEL_FEATURES = ("price_in", "price_out", "decode_speed", "ttft", *(f"acc_{d}" for d in DOMAINS),
                  *(f"has_acc_{d}" for d in DOMAINS), "context")
TOOL_FEATURES = ("agent", "basic", "cost_units", "usd_per_call", "usd_per_s")
DESCRIPTOR_KEYS = ("models", "tools")  # the observation keys ``descriptors=True`` adds
# the value of each squashed quantity that maps to 0.5 (units: USD per Mtok, tokens/s, s, tokens, units, USD, USD/s)
REFERENCES = {"price_in": 1.0, "price_out": 1.0, "decode_speed": 100.0, "ttft": 1.0, "context": 131_072.0,
              "cost_units": 1.0, "usd_per_call": 0.01, "usd_per_s": 1e-3}


@dataclass(frozen=True)
class Descriptors:
    """A pool's descriptor rows (see the module docstring), read-only: an env hands the same arrays out every
    step."""

    models: np.ndarray  # float32[M, len(MODEL_FEATURES)]
    tools: np.ndarray  # float32[T, len(TOOL_FEATURES)]


def squash(x: np.ndarray, name: str) -> np.ndarray:
    """``x / (x + REFERENCES[name])`` for ``x >= 0``: in [0, 1), 0.5 at the reference."""
    return x / (x + REFERENCES[name])


def direct_tool(pool: PoolSpec) -> int:
    """The tool whose per-model price, speed and first-token time describe a model: the spec's first agent solver,
    the direct call the accuracy targets were published for."""
    return pool.tools.with_behaviour("solver", agent=True)[0]


def domain_accuracy(pool: PoolSpec, suite: TaskSuite) -> tuple[np.ndarray, np.ndarray]:
    """Per agent model and domain: the mean published accuracy over the suite's benchmarks of that domain that
    have a target (0 where none), and whether any does (float64[M, D] each)."""
    benches = np.unique(suite.benchmark)
    targets = pool.accuracy_target[:-1][:, benches]  # [M, B]
    domain = np.array([int(BENCHMARKS[b].domain) for b in benches])
    acc = np.zeros((pool.num_models, len(DOMAINS)))
    has = np.zeros_like(acc)
    for d in range(len(DOMAINS)):
        cols = targets[:, domain == d]
        known = ~np.isnan(cols)
        count = known.sum(1)
        has[:, d] = count > 0
        acc[:, d] = np.where(count > 0, np.where(known, cols, 0.0).sum(1) / np.maximum(count, 1), 0.0)
    return acc, has


def pool_descriptors(pool: PoolSpec, suite: TaskSuite, model_names: Sequence[str] | None = None) -> Descriptors:
    """The descriptors of ``pool``'s agent models (or of the models named ``model_names``, in that order: the
    real-tools env's engine ids, each of which must be a model of the pool, the only source of its figures) and of
    its tools, the accuracy columns over ``suite``'s benchmarks."""
    agents = pool.model_names[:-1]
    unknown = [n for n in (model_names or ()) if n not in agents]
    if unknown:
        raise ValueError(f"descriptors: model id(s) {unknown} are not models of pool {pool.name!r} ({list(agents)}); "
                         "descriptors describe a model by its pool entry, so name the engine's models in the pool")
    t = direct_tool(pool)
    m = slice(0, pool.num_models)
    acc, has = domain_accuracy(pool, suite)
    models = np.column_stack([
        squash(pool.price_in[t, m] * 1e6, "price_in"), squash(pool.price_out[t, m] * 1e6, "price_out"),
        squash(1.0 / pool.lat_per_tok[t, m], "decode_speed"), squash(pool.lat_base[t, m], "ttft"),
        acc, has, squash(pool.context_window[m], "context")])
    if model_names is not None:
        models = models[[agents.index(n) for n in model_names]]
    agent = np.array([tool.is_agent for tool in pool.tools.tools], np.float64)
    tools = np.column_stack([agent, 1.0 - agent, squash(pool.cost_units, "cost_units"),
                             squash(pool.usd_call, "usd_per_call"), squash(pool.usd_s, "usd_per_s")])
    out = Descriptors(np.ascontiguousarray(models, np.float32), np.ascontiguousarray(tools, np.float32))
    out.models.flags.writeable = False
    out.tools.flags.writeable = False
    return out


def episode_tool_rows(tools: np.ndarray, price_usd: np.ndarray) -> np.ndarray:
    """The ``tools`` rows of n episodes, float32[n, T, F_t]: the pool's rows ``tools`` with each episode's own USD
    per call (``price_usd`` float[n, T], NaN: the pool's figure; ``parasim.sim.state.episode_tools``) in the
    ``usd_per_call`` column, so an episode priced by its task options (docs/task_options.md) shows the manager the
    prices it pays, as ToolOrchestra's prompt lists them."""
    rows = np.repeat(np.asarray(tools, np.float32)[None], len(price_usd), axis=0)
    col = TOOL_FEATURES.index("usd_per_call")
    priced = np.isfinite(price_usd)
    rows[..., col] = np.where(priced, squash(np.where(priced, price_usd, 0.0), "usd_per_call"), rows[..., col])
    return rows


def descriptor_spaces(num_models: int, num_tools: int) -> dict[str, spaces.Box]:
    """The observation spaces of the two keys (every feature is in [0, 1], see the module docstring)."""
    return {"models": spaces.Box(0.0, 1.0, (num_models, len(MODEL_FEATURES)), np.float32),
            "tools": spaces.Box(0.0, 1.0, (num_tools, len(TOOL_FEATURES)), np.float32)}
