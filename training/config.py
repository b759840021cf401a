"""One training run's full configuration, addressable by name for the sweep grid and the CLI.

A ``TrainConfig`` is the reward (a core ``RewardConfig``, by preset plus overrides), the environment
options and each trainer's hyperparameter dataclass (kept at the top of its own file, CleanRL style).
Any field is addressable as ``section.field`` or, when unambiguous, by its plain name (``c_tar=8``,
``grpo.lr=1e-3``, ``max_parallel=1``), so a grid axis is just a name and a list of strings. Every
value is validated with a message naming the field and its allowed range.

The ablation presets of the issue (``serial``, ``mono``, ``no_diversity``, ``sft_only``,
``rl_from_base``) are named sets of overrides on the default, so they compose with a grid.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from parasim.rewards import PRESETS, RewardConfig
from parasim.training.evaluate import EvalConfig
from parasim.training.expert import ExpertConfig
from parasim.training.fields import opt, parse_value, validate_section
from parasim.training.grpo import GRPOConfig
from parasim.training.policy import PolicyConfig
from parasim.training.sft import SFTConfig


@dataclass(frozen=True)
class EnvConfig:
    """Options passed to ``gym.make_vec("ParaOrch-v0", ...)`` (see ``parasim.envs.paraorch``)."""

    pool: str = opt("paramanager", help="shipped pool name (paramanager, paramanager_mono, ...) or pool JSON path")
    suite: str = opt("paramanager", help="task suite (paramanager, math, reasoning, a benchmark, a JSONL file)")
    max_rounds: int = opt(12, lo=1, hi=12, help="rounds before the episode ends without final_answer")
    max_parallel: int = opt(4, lo=1, hi=4, help="calls per round (1 = the serial ablation)")
    serial: bool = opt(False, help="calls of a round run one after another (latency sums)")
    token_budget: float = opt(0.0, lo=0.0, hi=1e9, help="calls past this trajectory length are refused (0 = none)")


SECTIONS: dict[str, type] = {
    "env": EnvConfig,
    "policy": PolicyConfig,
    "expert": ExpertConfig,
    "sft": SFTConfig,
    "grpo": GRPOConfig,
    "eval": EvalConfig,
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
        """Check every section; raises ``ValueError`` naming the field and its allowed range."""
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**31:
            raise ValueError(f"seed={self.seed!r}: allowed range [0, 2**31 - 1]")
        if self.reward_preset not in PRESETS:
            raise ValueError(f"reward_preset={self.reward_preset!r}: allowed one of {', '.join(PRESETS)}")
        for name in SECTIONS:
            validate_section(getattr(self, name), name)
        _check_cross(self)
        return self

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready nested dict (results store, checkpoints); the reward lists the fields its formula reads."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update({name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS})
        out["reward"] = self.reward.to_dict()
        return out


def _check_cross(cfg: TrainConfig) -> None:
    """Constraints across fields that a per-field range cannot express."""
    g = cfg.grpo
    if g.clip_eps_high < g.clip_eps:
        raise ValueError(f"grpo.clip_eps_high={g.clip_eps_high}: must be >= grpo.clip_eps={g.clip_eps}")
    if (g.tasks_per_step * g.group_size) % g.minibatches:
        raise ValueError(
            f"grpo.minibatches={g.minibatches}: must divide grpo.tasks_per_step * grpo.group_size = "
            f"{g.tasks_per_step * g.group_size}"
        )


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
    for name, hits in plain.items():
        if len(hits) == 1 and name not in names:
            names[name] = hits[0]
    return names


def resolve(name: str) -> tuple[str, str]:
    """Map a grid or CLI name to (section, field); errors list the near matches and ambiguities."""
    names = addressable_names()
    key = name.strip().replace("-", "_")
    if key in names:
        return names[key]
    hits = [n for n in names if "." in n and n.split(".", 1)[1] == key]
    if len(hits) > 1:
        raise ValueError(f"option {name!r} is ambiguous: use one of {', '.join(sorted(hits))}")
    close = sorted(n for n in names if key in n or n in key)[:8]
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ValueError(f"unknown option {name!r}{hint}; `parasim train --list-options` shows all")


def apply_overrides(cfg: TrainConfig, overrides: Mapping[str, Any]) -> TrainConfig:
    """Return ``cfg`` with overrides applied; a reward preset switch is applied before reward fields."""
    resolved = [(resolve(k), k, v) for k, v in overrides.items()]
    resolved.sort(key=lambda item: item[0] != ("", "reward_preset"))
    for (sec, name), raw_name, value in resolved:
        if sec == "":
            f = next(f for f in dataclasses.fields(TrainConfig) if f.name == name)
            value = parse_value(f, value, raw_name)
            cfg = dataclasses.replace(cfg, **{name: value})
            if name == "reward_preset":
                if value not in PRESETS:
                    raise ValueError(f"reward_preset={value!r}: allowed one of {', '.join(PRESETS)}")
                cfg = dataclasses.replace(cfg, reward=PRESETS[value])
            continue
        section = getattr(cfg, sec)
        f = next(f for f in dataclasses.fields(section) if f.name == name)
        if sec == "reward":
            section = section.replace(**{name: value})  # the core parses and range-checks its own fields
        else:
            section = dataclasses.replace(section, **{name: parse_value(f, value, raw_name)})
        cfg = dataclasses.replace(cfg, **{sec: section})
    return cfg


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
        raise ValueError(f"preset={preset!r}: allowed one of {', '.join(ABLATIONS)}")
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
    """``parasim train --config``: an ablation preset name, or a JSON / TOML file of overrides.

    A file holds a mapping of names to values (nested tables become ``section.field``) and may name
    ``preset`` (an ablation) to start from.
    """
    if spec in ABLATIONS:
        return make_config(spec)
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"--config {spec!r}: neither a preset ({', '.join(ABLATIONS)}) nor a file")
    text = path.read_text()
    data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    preset = data.pop("preset", "default")
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return make_config(preset, flat)
