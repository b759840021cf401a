"""verl bridges against the real verl 0.9 (installed by .ci/run: ``pip install --no-deps verl==0.9.1`` beside the
test extra's pieces): task export in verl's Parquet layout, ``compute_score`` loaded by verl's own
``get_custom_reward_fn`` from both documented paths, the docs' YAML files read as verl reads them, the ParaOrchText
agent loop (a subclass of verl's ``AgentLoopBase``) driven by a server manager with verl's ``generate`` signature,
and the errors of a partial or missing verl install."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import pyarrow.parquet as pq
import pytest
from tiny_lm import build_tokenizer

pytest.importorskip("verl", reason="verl: .ci/run installs it (pip install --no-deps verl==0.9.1)")

import parasim  # noqa: E402,F401  (registers the envs)
from parasim.integrations import verl as pv  # noqa: E402  (a partial verl install fails here, naming the module)
from parasim.protocol.engine import EpisodeEngineBase, EpisodeOutcome, TaskView  # noqa: E402
from parasim.protocol.schema import CallResult, Domain, Status, ToolCall  # noqa: E402
from training.llm.rollout import reset_for_group  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

ENV_KWARGS = {"max_rounds": 3, "pool": "paramanager"}
FINAL = '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "A"}}\n</tool_call>'


def calls(*names: str) -> str:
    """One turn of parallel calls, each on the pool's first model (agent tools) or with a code argument."""
    blocks = []
    for name in names:
        args = {"code": "print(1)"} if name == "python" else {"model": "GPT-OSS-20B", "subtask": "solve it"}
        blocks.append("<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>")
    return "\n".join(blocks)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tokenizer()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pv.export_verl_parquet("paramanager", tmp_path_factory.mktemp("verl") / "data" / "train.parquet", 3,
                                  env_kwargs=ENV_KWARGS, reward="paramanager", seed=1)


def rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


def env_total(extra_info: dict[str, Any], turns: list[str]) -> float:
    """The env's reward for these turns on this row, computed here: a fresh env, the trainer's group reset, the
    turns, and ``end_episode`` for an episode they leave unfinished."""
    env = gym.make("ParaOrchText-v0", reward="paramanager", **json.loads(extra_info["env_kwargs"]))
    reset_for_group(env, extra_info["task_seed"], extra_info["tool_seed"])
    for text in turns:
        _obs, _r, terminated, truncated, info = env.step(text)
        if terminated or truncated:
            return info["reward_components"]["total"]
    return env.unwrapped.end_episode()[4]["reward_components"]["total"]


def test_export_writes_verls_parquet_layout(exported: Path) -> None:
    table = pq.read_table(exported)
    assert set(table.column_names) == {"data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"}
    got = rows(exported)
    assert len(got) == 3 and len({json.dumps(r["prompt"]) for r in got}) == 3
    for k, row in enumerate(got):
        assert row["data_source"] == "parasim/paramanager" and row["agent_name"] == "parasim_agent"
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["ability"] in {d.name.lower() for d in Domain}
        assert row["reward_model"]["style"] == "rule"
        extra = row["extra_info"]
        assert extra["index"] == k and extra["split"] == "train"
        assert json.loads(extra["env_kwargs"]) == {**ENV_KWARGS, "suite": "paramanager"}
        assert json.loads(extra["reward"])["formula"] == "paramanager"
        env = gym.make("ParaOrchText-v0", **json.loads(extra["env_kwargs"]))
        _obs, info = reset_for_group(env, extra["task_seed"], extra["tool_seed"])
        assert info["messages"] == row["prompt"]  # the row replays its task
        assert row["reward_model"]["ground_truth"] == env.unwrapped.labels[0]  # answer id 0 is the gold one
        assert extra["task_index"] == info["task_index"]


def test_export_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"env_kwargs\['reward'\]: set by export_verl_parquet itself"):
        pv.export_verl_parquet("paramanager", tmp_path / "x.parquet", 1, env_kwargs={"reward": "xrouter"})
    with pytest.raises(ValueError, match="n: expected an int >= 1"):
        pv.export_verl_parquet("paramanager", tmp_path / "x.parquet", 0)
    with pytest.raises(TypeError, match="suite: expected a suite name or a tasks file path"):
        pv.export_verl_parquet(None, tmp_path / "x.parquet", 1)  # type: ignore[arg-type]


def test_compute_score_is_the_envs_reward_of_the_solution(exported: Path) -> None:
    row = rows(exported)[0]
    extra = row["extra_info"]
    truth = row["reward_model"]["ground_truth"]
    scores = [pv.compute_score(row["data_source"], text, truth, dict(extra))
              for text in (FINAL, "no call", calls("python", "standard_reasoner"))]
    assert [s["score"] for s in scores] == [env_total(extra, [t]) for t in (FINAL, "no call",
                                                                           calls("python", "standard_reasoner"))]
    assert scores[0]["score"] != scores[1]["score"]
    assert set(scores[0]) >= {"score", "acc", "outcome", "protocol"} and scores[0]["acc"] in (0.0, 1.0)
    turns = [calls("python", "standard_reasoner"), FINAL]  # the agent loop's turns, merged into extra_info by verl
    multi = pv.compute_score(row["data_source"], "ignored", truth, {**extra, "manager_turns": turns})
    assert multi["score"] == env_total(extra, turns)
    with pytest.raises(ValueError, match=r"extra_info: missing \['task_seed', 'tool_seed'"):
        pv.compute_score("parasim/paramanager", FINAL, truth, {"env_kwargs": "{}", "reward": "{}"})
    assert pv.compute_score("openai/gsm8k", "so #### 3", "3", {}) == 1.0  # other sources are verl's own


@dataclass
class TokenOutput:
    """What verl's server manager returns from ``generate``: sampled ids and their logprobs."""

    token_ids: list[int]
    log_probs: list[float] | None = None


class Server:
    """A server manager with verl's ``generate(request_id, *, prompt_ids, sampling_params)`` that answers with
    scripted manager turns (each ended by the end-of-turn token) and records its requests. A plain class, as verl's
    own server handle is: hydra would turn a dataclass argument into a config node."""

    def __init__(self, tokenizer: Any, script: list[str]) -> None:
        self.tokenizer, self.script = tokenizer, script
        self.requests: list[tuple[list[int], dict[str, Any]]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        self.requests.append((list(prompt_ids), dict(sampling_params)))
        text = self.script[min(len(self.requests), len(self.script)) - 1]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        ids = ids[:sampling_params["max_tokens"]]
        return TokenOutput(ids, [-0.25] * len(ids))


def agent_loop(tokenizer: Any, server: Server, response_length: int = 2048, **options: Any) -> Any:
    """The agent loop built as verl's worker builds it (keyword arguments, configs wrapped)."""
    config = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(
        prompt_length=8192, response_length=response_length)))
    return pv.ParaOrchAgentLoop(trainer_config=pv.DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
                                processor=None, dataset_cls=None, data_config=pv.DictConfigWrap({}), **options)


def test_agent_loop_runs_parallel_rounds_and_masks_the_envs_tokens(tokenizer: Any, exported: Path) -> None:
    row = rows(exported)[1]
    script = [calls("python", "standard_reasoner", "code_reasoner"), FINAL]
    server = Server(tokenizer, script)
    out = asyncio.run(agent_loop(tokenizer, server).run({"temperature": 1.0, "logprobs": True}, **row))
    extra = row["extra_info"]
    env = gym.make("ParaOrchText-v0", **json.loads(extra["env_kwargs"]))
    obs, _ = reset_for_group(env, extra["task_seed"], extra["tool_seed"])
    assert tokenizer.decode(out.prompt_ids) == obs
    assert out.extra_fields["manager_turns"] == script
    generated = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in script]
    masked_in = [t for t, m in zip(out.response_ids, out.response_mask) if m]
    assert masked_in == generated[0] + generated[1] and len(out.response_mask) == len(out.response_ids)
    assert out.response_logprobs == [-0.25 if m else 0.0 for m in out.response_mask]
    feedback = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if not m])
    assert feedback.count("<tool_response>") == 3  # the three calls ran as one round
    assert out.reward_score == env_total(extra, script) == out.extra_fields["reward_components"]["total"]
    assert out.num_turns == 4  # the question, two manager turns, one env reply
    first, second = server.requests
    assert first[0] == out.prompt_ids and second[0] == out.prompt_ids + out.response_ids[:len(second[0]) - len(
        out.prompt_ids)]  # each request extends the token stream, never re-tokenizing it
    assert first[1]["max_tokens"] == 2048 and first[1]["temperature"] == 1.0


def test_agent_loop_ends_an_episode_at_the_response_length(tokenizer: Any, exported: Path) -> None:
    row = rows(exported)[2]
    script = [calls("python")] * 3
    server = Server(tokenizer, script)
    out = asyncio.run(agent_loop(tokenizer, server, response_length=40, max_turn_tokens=16).run({}, **row))
    assert len(out.response_ids) == 40
    assert all(req[1]["max_tokens"] <= 16 for req in server.requests)
    turns = out.extra_fields["manager_turns"]
    assert out.reward_score == env_total(row["extra_info"], turns)  # cut off: ended, never answered
    with pytest.raises(ValueError, match="max_turn_tokens: expected None or an int >= 1, got 0"):
        agent_loop(tokenizer, server, max_turn_tokens=0)


class RealEngine(EpisodeEngineBase):
    """A real-tools engine that records the rounds it is asked to run."""

    model_names = ("m1", "m2")

    def __init__(self, extra_info: dict[str, Any]) -> None:
        self.rounds: list[list[ToolCall]] = []
        self.task_id = f"row-{extra_info['index']}"

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> TaskView:
        return TaskView(self.task_id, "What is 3 + 4?", 0)

    def run_round(self, calls: list[ToolCall], **_: Any) -> list[CallResult]:
        self.rounds.append(list(calls))
        return [CallResult(Status.OK, output="7", tokens_in=10, tokens_out=2) for _ in calls]

    def finish(self, manager_answer: str | None = None, lead: str | None = None) -> EpisodeOutcome:
        return EpisodeOutcome("7", manager_answer == "7")


def test_agent_loop_runs_real_tools_through_an_engine_factory(tokenizer: Any, exported: Path) -> None:
    engines: list[RealEngine] = []

    def factory(extra_info: dict[str, Any]) -> RealEngine:
        engines.append(RealEngine(extra_info))
        return engines[-1]

    turn = "\n".join("<tool_call>\n" + json.dumps({"name": "standard_reasoner", "arguments": {
        "model": m, "subtask": "add"}}) + "\n</tool_call>" for m in ("m1", "m2"))
    answer = FINAL.replace('"A"', '"7"')
    server = Server(tokenizer, [turn, answer])
    out = asyncio.run(agent_loop(tokenizer, server, engine_factory=factory).run({}, **rows(exported)[0]))
    assert [[c.model for c in r] for r in engines[0].rounds] == [["m1", "m2"]]  # one round of two parallel calls
    assert out.extra_fields["correct"] is True and out.extra_fields["manager_turns"] == [turn, answer]
    with pytest.raises(ValueError, match="engine_factory: expected a callable or 'package.module:function'"):
        agent_loop(tokenizer, server, engine_factory="no_colon")


def test_agent_loop_is_registered_and_built_from_the_docs_yaml_as_verls_worker_does(tokenizer: Any) -> None:
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, ToolListWrap, _agent_loop_registry
    from verl.utils.import_utils import resolve_config_path

    assert issubclass(pv.ParaOrchAgentLoop, AgentLoopBase) and pv.VERL_INSTALLED
    assert _agent_loop_registry["parasim_agent"] == {"_target_": "parasim.integrations.verl_bridge.ParaOrchAgentLoop"}
    entries = OmegaConf.load(resolve_config_path(str(ROOT / "docs" / "bridges" / "verl_agent_loop.yaml")))
    assert [e.name for e in entries] == ["parasim_agent"]
    config = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(
        prompt_length=8192, response_length=64)))
    loop = hydra.utils.instantiate(  # as verl's AgentLoopWorker builds an agent loop from its config entry
        config=entries[0], trainer_config=pv.DictConfigWrap(config), server_manager=Server(tokenizer, [FINAL]),
        tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=None,
        data_config=pv.DictConfigWrap({}), tools=ToolListWrap([]))
    assert isinstance(loop, pv.ParaOrchAgentLoop) and loop.max_turn_tokens == 1024
    assert loop.use_chat_template is False


def test_verls_loader_reads_compute_score_from_both_documented_paths(exported: Path) -> None:
    """verl 0.9's ``get_custom_reward_fn`` on the docs' reward config (``pkg://``) and on the file path of
    ``parasim/integrations/verl.py`` (loaded with ``exec_module`` outside ``sys.modules``): both give parasim's
    ``compute_score``, scoring as it does."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    docs = OmegaConf.load(ROOT / "docs" / "bridges" / "verl_reward.yaml")
    assert docs.reward.custom_reward_function.path == "pkg://parasim.integrations.verl"
    row = rows(exported)[0]
    args = (row["data_source"], FINAL, row["reward_model"]["ground_truth"], dict(row["extra_info"]))
    for path in (docs.reward.custom_reward_function.path, pv.__file__, "file://" + pv.__file__):
        config = OmegaConf.merge(docs, {"reward": {"custom_reward_function": {"path": path}}})
        fn = get_custom_reward_fn(config)
        assert fn(*args) == pv.compute_score(*args), path
    assert pv.__file__.endswith("parasim/integrations/verl.py")


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_a_partial_verl_install_is_an_error_naming_the_missing_import() -> None:
    """verl found, one module its agent loop imports missing (``tensordict`` blocked): importing the bridge raises
    an ImportError that names it, instead of falling back to anything."""
    run = _python("import sys; sys.modules['tensordict'] = None\nimport parasim.integrations.verl")
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: verl is installed but its agent loop") and "tensordict is missing" in last


def test_without_verl_the_export_works_and_the_agent_loop_says_verl_is_missing(tmp_path: Path) -> None:
    run = _python("import sys; sys.modules['verl'] = None\n"
                  "import parasim.integrations.verl as pv\n"
                  f"pv.export_verl_parquet('paramanager', {str(tmp_path / 'x.parquet')!r}, 2)\n"
                  "print('exported', pv.VERL_INSTALLED)\n"
                  "pv.ParaOrchAgentLoop")
    assert "exported False" in run.stdout and (tmp_path / "x.parquet").exists()
    assert run.stderr.strip().splitlines()[-1].startswith(
        "ImportError: ParaOrchAgentLoop subclasses verl's AgentLoopBase and verl is not installed")


def test_end_episode_ends_as_cut_off_without_charging_rounds() -> None:
    """What the bridges do when a trainer's token limit cuts the manager off: the episode ends at once, never
    answered (``ended_with_final`` 0), with no round and no format violation added."""
    from parasim import TrajectoryBatch, compute_rewards

    env = gym.make("ParaOrchText-v0", max_rounds=5)
    env.reset(seed=3)
    env.step(calls("python"))
    _obs, reward, terminated, truncated, info = env.unwrapped.end_episode()
    assert (terminated, truncated) == (False, True)
    traj = info["trajectory"]
    assert traj["ended_with_final"] == 0 and traj["format_violations"] == 0 and int(traj["rounds"]) == 1
    batch = TrajectoryBatch.from_arrays(**{k: [v] for k, v in traj.items()})
    assert reward == info["reward_components"]["total"] == float(compute_rewards(batch, "paramanager").total[0])
    with pytest.raises(RuntimeError, match="the episode is over; call reset"):
        env.unwrapped.end_episode()
    env.reset(seed=3)
    env.step(calls("python"))
    answered = env.step(FINAL)[4]
    assert answered["trajectory"]["ended_with_final"] == 1 and answered["reward_components"]["total"] > reward
