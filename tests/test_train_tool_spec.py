"""The small trainer on a pool whose tool spec is not the default one (the default tools without ``search``).

The expert, SFT, GRPO and the evaluation read the tool count and names from the pool's spec: the expert's empty slot
is the spec's tool count, its domain preferences keep the tools the spec has, and the trajectories have one count
column per tool of the spec. (scripts/sim_to_real.py trains its managers on such a pool.)
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from parasim.pools.pool import load_pool, pool_file
from parasim.tools.spec import TOOL_SPEC_DIR
from training.config import make_config
from training.expert import ExpertConfig, ScriptedExpert
from training.pipeline import run_pipeline

pytestmark = pytest.mark.slow  # a training run of seconds


@pytest.fixture(scope="module")
def no_search_pool(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("spec")
    spec = json.loads((TOOL_SPEC_DIR / "default.json").read_text())
    spec.update(name="no_search", tools=[t for t in spec["tools"] if t["name"] != "search"])
    (root / "spec.json").write_text(json.dumps(spec))
    raw = json.loads(pool_file("paramanager").read_text())
    raw.update(tool_spec=str(root / "spec.json"), tools={k: v for k, v in raw["tools"].items() if k != "search"})
    (root / "pool.json").write_text(json.dumps(raw))
    return str(root / "pool.json")


def test_the_trainer_runs_on_a_pool_without_search(no_search_pool: str, one_torch_thread) -> None:
    cfg = make_config("default")
    cfg = replace(cfg, env=replace(cfg.env, pool=no_search_pool), expert=replace(cfg.expert, episodes=128),
                  grpo=replace(cfg.grpo, steps=2), eval=replace(cfg.eval, tasks=16, k=1)).validate()
    result = run_pipeline(cfg)
    names = list(load_pool(no_search_pool).tools.names)
    assert "search" not in names and result["tool_names"] == names and len(result["tool_dist"]) == len(names)
    assert 0.0 <= result["accuracy"] <= 1.0 and len(result["expert"]["tool_share"]) == len(names)
    assert result["expert"]["kept"] > 0  # the expert's demonstrations play the spec's tools


def test_the_expert_refuses_a_spec_it_cannot_play() -> None:
    nvec = [2] + [7, 3, 3] * 4  # six tools and the empty slot
    with pytest.raises(ValueError, match="5 names for an action space of 6 tools"):
        ScriptedExpert(4, nvec, ExpertConfig(), np.random.default_rng(0), ["a", "b", "c", "d", "e"])
    with pytest.raises(ValueError, match="lacks"):
        ScriptedExpert(4, nvec, ExpertConfig(), np.random.default_rng(0), ["a", "b", "c", "d", "e", "f"])
    expert = ScriptedExpert(4, nvec, ExpertConfig(), np.random.default_rng(0),
                            [n for n in load_pool("paramanager").tools.names if n != "search"])
    assert expert.num_tools == 6 and 6 not in {t for prefs in expert._prefs.values() for t in prefs}
