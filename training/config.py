"""One training run's full configuration, addressable by name for the sweep grid and the CLI.

A ``TrainConfig`` is the reward (a core ``RewardConfig``, by preset plus overrides), the environment
options and each trainer's hyperparameter dataclass (kept at the top of its own file, CleanRL style).
Any field is addressable as ``section.field`` or, when unambiguous, by its plain name (``c_tar=8``,
``grpo.learning_rate=1e-3``, ``max_parallel=1``), so a grid axis is just a name and a list of strings. A pool
parameter is addressable as ``pool.<path>`` (``pool.interaction.sd=0.5``): each such key is one override in
``env.pool_set`` (``parasim.pools.overrides``), checked against the pool when the config is validated. Every
value is declared and checked through ``parasim.config.fields``, with a message naming the field, the
value and its allowed range.

The ablation presets of the issue (``serial``, ``mono``, ``no_diversity``, ``sft_only``,
``rl_from_base``) are named sets of overrides on the default, so they compose with a grid.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parasim.config.env_options import MAX_TEMPERATURE, POOL_TEMPERATURE, ROUND_LIMIT, SLOT_LIMIT
from parasim.config.fields import (
    ConfigError,
    check,
    describe,
    load_mapping,
    opt,
    spec_of,
    table,
    to_toml,
    validate,
)
from parasim.pools.harness import with_harness
from parasim.pools.overrides import PREFIX as POOL_PREFIX
from parasim.pools.overrides import check_path, format_set, load_with_set, parse_set, with_override
from parasim.scoring.rewards import PRESETS, RewardConfig
from training.evaluate import EvalConfig, check_eval_pool
from training.expert import ExpertConfig
from training.grpo import GRPOConfig
from training.policy import PolicyConfig
from training.sft import SFTConfig


@dataclass(frozen=True)
class EnvConfig:
    """Options passed to ``gym.make_vec("ParaOrch-v0", ...)`` (see ``envs.paraorch``)."""

    pool: str = opt("paramanager", help="shipped pool name (paramanager, paramanager_mono, ...) or pool JSON path")
    suite: str = opt("paramanager", help="task suite (paramanager, math, reasoning, a benchmark, a JSONL file)")
    max_rounds: int = opt(12, lo=1, hi=ROUND_LIMIT, help="rounds before the episode ends without final_answer")
    max_parallel: int = opt(4, lo=1, hi=SLOT_LIMIT, help="calls per round (1 = the serial ablation)")
    serial: bool = opt(False, help="calls of a round run one after another (latency sums)")
    token_budget: float = opt(0.0, lo=0.0, hi=1e9, help="calls past this trajectory length are refused (0 = none)")
    pool_set: str = opt("", help="overrides of the pool's parameters, PATH=VALUE;PATH=VALUE (parasim.pools.overrides); "
                                 "the keys pool.PATH=VALUE add to it")
    temperature: float = opt(POOL_TEMPERATURE, lo=POOL_TEMPERATURE, hi=MAX_TEMPERATURE,
                             help="the simulated pool's calls sampled at this temperature by the softmax law "
                                  "(parasim.pools.harness.at_temperature); -1: the pool's own")
    router_signal: str = opt("off", pattern=r"off|calibrated|0(\.\d+)?|1(\.0*)?|\.\d+",
                             help="the observation key router: off, calibrated (15% of the per-query oracle's gain "
                                  "for the router that reads it best, parasim.sim.router_signal), or its rho in [0, 1]")


SECTIONS: dict[str, type] = {
    "env": EnvConfig,
    "policy": PolicyConfig,
    "expert": ExpertConfig,
    "sft": SFTConfig,
    "grpo": GRPOConfig,
    "eval": EvalConfig,
}

POOL_SECTION = "pool"  # the section ``resolve`` gives a ``pool.<path>`` key: an override in ``env.pool_set``

# Settings renamed so that both trainers use one name (the LLM trainer's); the old names are errors for a release.
RENAMED: dict[str, str] = {
    "grpo.lr": "grpo.learning_rate", "sft.lr": "sft.learning_rate", "lr": "grpo.learning_rate or sft.learning_rate",
    "grpo.advantage": "grpo.adv_method", "advantage": "adv_method",
    "grpo.ent_coef": "grpo.entropy_coef", "ent_coef": "entropy_coef",
    "grpo.update_epochs": "grpo.ppo_epochs", "update_epochs": "ppo_epochs",
}


@dataclass(frozen=True)
class TrainConfig:
    """Everything one grid point needs: reward, environment, policy, SFT, GRPO and evaluation."""

    seed: int = opt(0, lo=0, hi=2**31 - 1, help="seeds torch, the expert and every env reset")
    reward_preset: str = opt("paramanager", choices=tuple(PRESETS), help="base reward preset")
    reward: RewardConfig = field(default_factory=lambda: PRESETS["paramanager"])
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    expert: ExpertConfig = field(default_factory=ExpertConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def validate(self) -> TrainConfig:
        """Check every section; raises ``ValueError`` naming the field, the value and its allowed range."""
        for name in ("seed", "reward_preset"):
            check(spec_of(TrainConfig, name), getattr(self, name), name)
        for name in SECTIONS:
            validate(getattr(self, name), name)
        _check_cross(self)
        check_eval_pool(self)
        return self

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready nested dict (results store, checkpoints); the reward lists the fields its formula reads."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update({name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS})
        out["reward"] = self.reward.to_dict()
        return out


def _check_cross(cfg: TrainConfig) -> None:
    """Constraints across fields, and names (pools, suites) that must exist before any worker starts."""
    g = cfg.grpo
    if g.clip_eps_high < g.clip_eps:
        raise ConfigError(f"grpo.clip_eps_high = {g.clip_eps_high}: must be >= grpo.clip_eps = {g.clip_eps}")
    if (g.tasks_per_step * g.group_size) % g.minibatches:
        raise ConfigError(f"grpo.minibatches = {g.minibatches}: must divide grpo.tasks_per_step * grpo.group_size "
                          f"= {g.tasks_per_step * g.group_size}")
    from parasim.pools.pool import shipped_pools
    from parasim.tasks.suites import SUITES

    if cfg.env.pool not in shipped_pools():
        try:
            _checked_file("pool", cfg.env.pool)
        except ValueError as err:
            raise ConfigError(f"env.pool = {cfg.env.pool!r}: must be a shipped pool ({', '.join(shipped_pools())}) "
                              f"or a valid pool JSON file: {err}") from None
    if cfg.env.pool_set.strip() or cfg.env.temperature != POOL_TEMPERATURE:
        try:
            pool = load_with_set(cfg.env.pool, cfg.env.pool_set)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        t = cfg.env.temperature
        if t != POOL_TEMPERATURE:
            if t < 0:
                raise ConfigError(f"env.temperature = {t!r}: must be {POOL_TEMPERATURE:g} (the pool's own) or a "
                                  f"number in [0, {MAX_TEMPERATURE:g}]")
            try:
                with_harness(pool, {"temperature": t})
            except ValueError as err:
                raise ConfigError(f"env.temperature = {t!r}: {err}") from None
    suites = [("env.suite", cfg.env.suite)] + [("eval.suites", s.strip()) for s in cfg.eval.suites.split(",")
                                               if s.strip()]
    for where, suite in suites:
        if suite in SUITES:
            continue
        if not Path(suite).is_file():
            raise ConfigError(f"{where} = {suite!r}: must be a suite or benchmark ({', '.join(sorted(SUITES))}) "
                              "or a JSONL task file")
        try:
            _checked_file("suite", suite)
        except ValueError as err:
            raise ConfigError(f"{where} = {suite!r}: not a valid JSONL task file: {err}") from None


def _checked_file(kind: str, path: str) -> None:
    """Read a pool or task file through its own reader now, so that a bad file is a config error before any run
    starts (not a traceback in every worker); cached by the file's size and modification time, since a config is
    validated once per grid point."""
    stat = Path(path).stat() if Path(path).is_file() else None
    _read_checked(kind, str(Path(path).resolve()) if stat else path, stat and (stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _read_checked(kind: str, path: str, version: tuple[int, int] | None) -> None:
    if kind == "pool":
        from parasim.pools.pool import load_pool

        load_pool(path)
    else:
        from parasim.tasks.suites import load_tasks

        load_tasks(path)


def addressable_names() -> dict[str, tuple[str, str]]:
    """Every ``section.field`` name and its plain alias (when unique) -> (section, field)."""
    names: dict[str, tuple[str, str]] = {}
    plain: dict[str, list[tuple[str, str]]] = {}
    sections = {**SECTIONS, "reward": RewardConfig}
    for sec, cls in sections.items():
        for f in dataclasses.fields(cls):
            names[f"{sec}.{f.name}"] = (sec, f.name)
            plain.setdefault(f.name, []).append((sec, f.name))
    for top in ("seed", "reward_preset"):
        names[top] = ("", top)
    names["reward.preset"] = names["reward"] = ("", "reward_preset")
    names["pool"] = ("env", "pool")  # not eval.pool: a bare `pool` is the training pool
    for name, hits in plain.items():
        if len(hits) == 1 and name not in names:
            names[name] = hits[0]
    return names


def resolve(name: str) -> tuple[str, str]:
    """Map a grid or CLI name to (section, field); errors list the near matches and ambiguities. A pool key
    ``pool.<path>`` maps to (``"pool"``, path), one target per path, so two paths are two options."""
    if name.strip().startswith(POOL_PREFIX):  # a pool parameter: its path, which may hold '-' (model names)
        return POOL_SECTION, check_path(name.strip()[len(POOL_PREFIX):], f"option {name.strip()!r}")
    names = addressable_names()
    key = name.strip().replace("-", "_")
    if key in names:
        return names[key]
    if key in RENAMED:
        raise ConfigError(f"option {name!r} was renamed to {RENAMED[key]!r}")
    hits = [n for n in names if "." in n and n.split(".", 1)[1] == key]
    if len(hits) > 1:
        raise ConfigError(f"option {name!r} is ambiguous: use one of {', '.join(sorted(hits))}")
    close = sorted(n for n in names if key in n or n in key)[:8]
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConfigError(f"unknown option {name!r}{hint}; `parasim train --list-options` shows all")


def apply_overrides(cfg: TrainConfig, overrides: Mapping[str, Any]) -> TrainConfig:
    """Return ``cfg`` with overrides applied; a reward preset switch is applied before reward fields, and
    ``env.pool_set`` (which replaces the set) before the ``pool.<path>`` keys that add to it."""
    resolved = [(resolve(k), k, v) for k, v in overrides.items()]
    resolved.sort(key=lambda item: (item[0] != ("", "reward_preset"), item[0][0] == POOL_SECTION))
    for (sec, name), raw_name, value in resolved:
        if sec == POOL_SECTION:
            try:
                pool_set = with_override(cfg.env.pool_set, name, value)
            except ValueError as err:
                raise ConfigError(f"{raw_name}: {err}") from None
            cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, pool_set=pool_set))
            continue
        if sec == "":
            value = check(spec_of(TrainConfig, name), value, raw_name, text=True)
            cfg = dataclasses.replace(cfg, **{name: value})
            if name == "reward_preset":
                cfg = dataclasses.replace(cfg, reward=PRESETS[value])
            continue
        section = getattr(cfg, sec)
        if sec == "reward":
            section = section.replace(**{name: value})  # the core parses and range-checks its own fields
        else:
            value = check(spec_of(SECTIONS[sec], name), value, f"{sec}.{name}", text=True)
            if (sec, name) == ("env", "pool_set"):  # canonical, so that the same overrides are the same env
                try:
                    value = format_set(parse_set(value))
                except ValueError as err:
                    raise ConfigError(str(err)) from None
            section = dataclasses.replace(section, **{name: value})
        cfg = dataclasses.replace(cfg, **{sec: section})
    return cfg


def parse_sets(items: Iterable[str], flag: str = "--set") -> dict[str, str]:
    """Repeated ``--set NAME=VALUE`` as a mapping; a malformed item or an option given twice (by any of its
    names, ``c_tar`` and ``reward.c_tar`` alike) is an error naming it."""
    out: dict[str, str] = {}
    seen: dict[tuple[str, str], str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{flag} {item!r}: expected NAME=VALUE (e.g. c_tar=4)")
        target = resolve(name)
        if target in seen:
            raise ConfigError(f"{flag}: option {name.strip()!r} is set twice ({seen[target]} and {item})")
        seen[target] = item
        out[name.strip()] = value
    return out


ABLATIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "serial": {"env.max_parallel": 1},
    "mono": {"env.pool": "paramanager_mono"},
    "no_diversity": {"reward.w_diversity": 0.0},
    "sft_only": {"grpo.steps": 0},
    "rl_from_base": {"sft.epochs": 0},
}


def make_config(preset: str = "default", overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """The default config, then an ablation preset, then ``overrides``; validated."""
    if preset not in ABLATIONS:
        raise ConfigError(f"preset = {preset!r}: must be one of {', '.join(ABLATIONS)}")
    cfg = apply_overrides(TrainConfig(), ABLATIONS[preset])
    return apply_overrides(cfg, overrides or {}).validate()


def from_dict(data: Mapping[str, Any]) -> TrainConfig:
    """Inverse of ``TrainConfig.to_dict`` (nested sections), validated."""
    data = dict(data)
    reward = RewardConfig.from_dict(data.pop("reward", {}))
    flat = {f"{sec}.{k}": v for sec in SECTIONS for k, v in data.pop(sec, {}).items()}
    cfg = apply_overrides(TrainConfig(), {**data, **flat})
    return dataclasses.replace(cfg, reward=reward).validate()


def load_config(spec: str) -> TrainConfig:
    """``parasim train --config``: an ablation preset name, or a YAML / JSON / TOML file of overrides.

    A file holds a mapping of names to values (nested tables become ``section.field``) and may name
    ``preset`` (an ablation) to start from; what ``--print-config`` prints is such a file.
    """
    if spec in ABLATIONS:
        return make_config(spec)
    if not Path(spec).suffix and not Path(spec).exists():
        raise ConfigError(f"--config {spec!r}: neither a preset ({', '.join(ABLATIONS)}) nor a file")
    data = load_mapping(spec, "--config")
    preset = data.pop("preset", "default")
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return make_config(preset, flat)


def config_toml(cfg: TrainConfig, comment: str = "") -> str:
    """``cfg`` fully resolved, as the TOML file ``load_config`` reads back to the same config."""
    return to_toml(cfg.to_dict(), comment)


def options_table(extra: Iterable[tuple[str, ...]] = ()) -> str:
    """Every option once, by its shortest name (the plain name where it is unique): type, default, allowed
    values, help."""
    shown = {f"{sec}.{f}": name for name, (sec, f) in addressable_names().items() if "." not in name and sec}
    rows = describe(TrainConfig, "", {"reward_preset": "reward_preset (or reward)"})[:2]
    rows += describe(RewardConfig, "reward", shown)
    for sec, cls in SECTIONS.items():
        rows += describe(cls, sec, shown)
    rows.append(("pool.PATH", "pool value", "-", "what parasim.pools.pool.parse_pool allows there",
                 "one pool parameter (pool.interaction.sd, pool.models.GPT-OSS-20B.latency.concurrency_slope, "
                 "pool.protocol.max_output_tokens, pool.tools.python.bonus.math): an override in env.pool_set"))
    rows += list(extra)
    note = ("Each option is also SECTION.NAME (reward.c_tar, grpo.steps); use it with --set NAME=VALUE, "
            "--grid NAME=V1,V2 or a --config file.\n")
    return note + table(rows, ("option", "type", "default", "allowed", "help"))

