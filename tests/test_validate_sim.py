"""parasim validate-sim: logs written by the real env over the scripted server, replayed and compared end to end; a
simulator-written log validates against its own pool and is flagged against a shifted one; bad logs are one-line
errors naming the file, the line and the field."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from scipy.stats import binom
from test_real_backend import _exact, _task

import parasim  # noqa: F401  (registers the envs)
from parasim.cli import main
from parasim.pools.pool import pool_file
from parasim.protocol.schema import CallResult, Status, Tool, ToolCall
from parasim.real.calllog import CallLogger, episodes_path
from parasim.real.engine import RealEpisodeEngine
from parasim.sim.kernel import EMPTY_SLOT, I_NANS, leading_answer
from parasim.tasks.suites import BENCHMARKS
from parasim.validation import ValidateSimConfig, validate_sim
from parasim.validation.compare import chance_rate, is_consistent, predictive_p
from parasim.validation.replay import STATUS_GROUPS

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]
K = 3
_RAN = (Status.OK, Status.EXEC_ERR, Status.TIMEOUT, Status.TRUNCATED)


def _slots(*slots: tuple[int, int, int]) -> list[int]:
    rows = list(slots) + [(EMPTY_SLOT, 0, 0)] * (K - len(slots))
    return [x for s in rows for x in s]


# ------------------------------------------------------------------------ real env over the scripted server
def _real_episodes(backend, log: Path) -> None:
    """Six episodes of ParaOrch-v0 on real tools (good answers 42, other 7, split votes 41, 42, 42)."""
    tasks = [_task(), _task(id="t1", question="What is 40 + 2?", benchmark="AMC"),
             _task(id="t2", question="Which is the gold option?", domain="science", benchmark="GPQA",
                   options=["42", "7", "1", "2"], answer="A")]
    scripts = [
        [_slots((0, 0, 0), (0, 1, 0)), _slots((1, 2, 2), (0, 1, 1))],  # good + other, then review + carry
        [_slots((4, 2, 0)), _slots((5, 0, 0))],  # ensemble on split, then python (fails as code)
        [_slots((0, 1, 0), (3, 0, 0), (6, 0, 0))],  # other, knowledge_searcher, search
        [_slots((2, 0, 0)), _slots((1, 0, 2))],  # code_reasoner, then review
    ]
    with CallLogger(log) as logger:
        engine = RealEpisodeEngine(backend, tasks, logger=logger, verifier=_exact, seed=0)
        env = gym.make("ParaOrch-v0", tools="real", engine=engine, max_parallel=K, max_rounds=4)
        for episode in range(6):
            env.reset(seed=episode, options={"task_index": episode % 3})
            for action in scripts[episode % len(scripts)]:
                _, _, done, _, _ = env.step(np.array([0, *action], np.int64))
                assert not done
            _, _, done, _, info = env.step(np.array([1, *_slots()], np.int64))
            assert done and "correct" in info


def test_episode_prices_are_logged_and_charged_by_the_replay(backend, tmp_path: Path):
    """A real episode with its own tool prices logs them (the call's USD and the episode's ``tool_prices``), and
    the replay charges the same prices: its simulated USD is the price of each ensemble call that ran."""
    from dataclasses import replace

    from parasim.pools.pool import load_pool
    from parasim.validation.logs import read_logs
    from parasim.validation.replay import replay

    log = tmp_path / "logs" / "calls.jsonl"
    with CallLogger(log) as logger:
        engine = RealEpisodeEngine(backend, [_task()], logger=logger, verifier=_exact, seed=0)
        env = gym.make("ParaOrch-v0", tools="real", engine=engine, max_parallel=K, max_rounds=4)
        for episode, prices in enumerate(({"ensemble_solver": 0.25}, None)):
            env.reset(seed=episode, options={"tool_prices": prices})
            env.step(np.array([0, *_slots((4, 2, 0))], np.int64))
            assert env.step(np.array([1, *_slots()], np.int64))[2]
    logged = [json.loads(line) for line in episodes_path(log).read_text().splitlines()]
    assert logged[0]["tool_prices"] == {"ensemble_solver": 0.25} and "tool_prices" not in logged[1]
    assert json.loads(log.read_text().splitlines()[0])["usd"] == 0.25
    episodes = read_logs(log.parent).episodes
    assert episodes[0].tool_prices == ((int(Tool.ENSEMBLE_SOLVER), 0.25),) and episodes[1].tool_prices == ()
    pool = load_pool("paramanager")
    models = {"good": 0, "other": 1, "split": 2}

    def usd(eps) -> np.ndarray:
        return replay(eps, pool, models, replicas=16, seed=0, slots=K, serial=False, token_budget=None).metrics.usd

    priced, plain = usd(episodes), usd(tuple(replace(e, tool_prices=()) for e in episodes))
    assert set(np.round(priced[0], 12)) <= {0.0, 0.25} and (priced[0] == 0.25).any()
    assert not np.allclose(priced[0], plain[0]) and np.array_equal(priced[1], plain[1])


def test_real_env_logs_episodes_and_validate_sim_reports_them(backend, tmp_path: Path, capsys):
    log = tmp_path / "logs" / "calls.jsonl"
    _real_episodes(backend, log)
    episodes = [json.loads(line) for line in episodes_path(log).read_text().splitlines()]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["episode"] for e in episodes] == list(range(6))
    assert episodes[0]["models"] == ["good", "other", "split"] and episodes[2]["options"] == 4
    assert [r["calls"] for r in episodes[0]["rounds"]] == [[0, 1], [2, 3]]
    assert episodes[1]["benchmark"] == "AMC" and episodes[0]["benchmark"] == "generic_math"
    assert sum(len(r["calls"]) for e in episodes for r in e["rounds"]) == len(calls)
    assert all(isinstance(e["correct"], bool) for e in episodes)

    out = tmp_path / "report"
    assert main(["validate-sim", str(log.parent), "--replicas", "8", "--bootstrap", "200", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "validate-sim" in printed and "accuracy" in printed and "wrote" in printed
    report = json.loads((out / "validate_sim.json").read_text())
    assert (out / "validate_sim.png").read_bytes()[:4] == b"\x89PNG"
    assert report["episodes"] == 6 and report["calls"] == len(calls) and report["replicas"] == 8
    assert report["pool"]["source"] == "fitted" and {"good", "other", "split"} <= set(report["pool"]["models"])
    # the structured env passes each round's action and each call's slot to the engine's log
    assert all(len(r["action"]) == 1 + 3 * K for e in episodes for r in e["rounds"])
    assert report["actions"] == "logged" and report["slots"] == K
    assert set(report["benchmarks"]) == {"generic_math", "AMC", "GPQA", "all"}
    pooled = report["benchmarks"]["all"]
    assert pooled["episodes"] == 6 and pooled["tasks"] == 3 and pooled["resampled_by"] == "task"
    real_acc = np.mean([e["correct"] for e in episodes])
    acc = pooled["metrics"]["accuracy"]
    assert acc["real"] == pytest.approx(real_acc) and 0 <= acc["sim"] <= 1 and 0 <= acc["p"] <= 1
    assert acc["real_ci"][0] <= acc["real"] <= acc["real_ci"][1] and acc["sim_range"][0] <= acc["sim_range"][1]
    tokens = pooled["metrics"]["tokens"]
    assert tokens["real"] == pytest.approx(sum(c["tokens_out"] for c in calls) / 6)
    ok = sum(c["status"] == "OK" for c in calls)
    assert pooled["metrics"]["status.OK"]["real"] == pytest.approx(ok / len(calls))
    assert pooled["metrics"]["tool.standard_reasoner"]["real"] == pytest.approx(
        sum(c["status"] == "OK" and c["tool"] == "standard_reasoner" for c in calls) / ok)
    for name in ("accuracy", "tokens", "cost_units", "usd", "latency_s", "call_accuracy", "model.good",
                 *(f"status.{g}" for g in STATUS_GROUPS)):
        m = pooled["metrics"][name]
        assert set(m) == {"real", "real_ci", "sim", "sim_range", "diff", "p", "consistent"}, name
    assert report["summary"]["figures"] >= 10 and 0 <= report["summary"]["flagged"] <= report["summary"]["figures"]


def test_logged_actions_are_replayed_as_logged(backend, tmp_path: Path):
    """An engine given the round's action and slots logs them; the replay then uses them (python's carry target too),
    and a slot the env refused without a call counts as REJECTED on the real side."""
    log = tmp_path / "calls.jsonl"
    with CallLogger(log) as logger:
        engine = RealEpisodeEngine(backend, [_task()], logger=logger, verifier=_exact, seed=0)
        for seed in range(4):
            engine.reset(seed=seed)
            action = [0, *_slots((0, 0, 0), (5, 0, 1), (1, 0, 2))]  # the reviewer slot refused: no lead yet
            engine.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "q"), ToolCall(Tool.PYTHON, "", "print(42)")],
                             action=action, slots=[0, 1])
            engine.finish()
        with pytest.raises(ValueError, match="slots: expected one slot per call"):
            engine.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "q")], slots=[0, 1])
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["slot"] for r in records[:2]] == [0, 1]
    episode = json.loads(episodes_path(log).read_text().splitlines()[0])
    assert episode["rounds"][0]["action"] == action
    report = validate_sim(log, ValidateSimConfig(replicas=4, bootstrap=200))
    assert report["actions"] == "logged"
    status = report["benchmarks"]["generic_math"]["metrics"]
    assert status["status.REJECTED"]["real"] == pytest.approx(1 / 3)
    assert status["status.REJECTED"]["sim"] > 0  # the simulator refuses the lead-less reviewer as the env did


# ------------------------------------------------------------------------------ simulator-written logs
def _sim_logs(path: Path, pool: str | dict, *, tasks: int, per_task: int, seed: int) -> None:
    """A log in the real engine's schema written from simulated episodes of ``pool`` under a random valid policy
    (tasks on AIME25 and GPQA, each played ``per_task`` times with its hidden draws shared: difficulty, model effects,
    preferred wrong answers). The task stream is keyed by (seed, task), so each seed is a fresh sample of tasks."""
    env = gym.make("ParaOrch-v0", pool=pool, suite="reasoning", max_parallel=K, max_rounds=3)
    sim = env.unwrapped.sim
    models = list(env.unwrapped.model_names)
    rng = np.random.default_rng(seed)
    rows = [i for i, t in enumerate(sim.suite.task_ids) if t in ("AIME25", "GPQA")]
    with CallLogger(path) as logger:
        env.reset(seed=seed)
        for n in range(tasks * per_task):
            task = n // per_task
            row = rows[task % len(rows)]
            env.reset(options={"task_index": row, "task_seed": seed * tasks + task})
            bench = BENCHMARKS[int(sim.tasks(0)["benchmark"])]
            fields = {"task_id": f"task{task}", "benchmark": bench.name, "domain": int(bench.domain),
                      "difficulty": None}
            episode = logger.new_episode()
            index, first_of, rounds_log, done = 0, {}, [], False
            for _ in range(int(rng.integers(1, 4))):
                nans = int(sim.state.st_i[0, I_NANS])
                lead = int(leading_answer(sim.state.ev, sim.state.arrival, 0, nans))
                slots = []
                for _ in range(int(rng.integers(1, K + 1))):
                    tool = int(rng.choice([0, 0, 2, 3, 4, 5, 6] + ([1, 1] if lead >= 0 else [])))
                    target = 2 if tool == 1 else int(lead >= 0 and rng.random() < 0.3)
                    slots.append((tool, int(rng.integers(len(models))), target))
                action = [0, *_slots(*slots)]
                _, _, done, _, info = env.step(np.array(action, np.int64))
                ran = [c for c in sim.last_round(0) if c["status"] in _RAN]
                rounds_log.append({"calls": list(range(index, index + len(ran))), "action": action})
                for c in ran:
                    tool, model, target = slots[c["slot"]]
                    agent = Tool(tool).is_agent
                    ok, answers = c["status"] is Status.OK, c["kind"] == "answer"
                    result = CallResult(c["status"], tokens_in=int(c["tokens_in"]), tokens_out=int(c["tokens_out"]),
                                        latency_s=c["latency_s"], usd=c["usd"], cost_units=c["cost_units"],
                                        extra={"answer": f"a{c['answer']}"} if ok and answers else {})
                    source = first_of.get(lead, -1) if target else -1
                    call = ToolCall(Tool(tool), models[model] if agent else "", "", target=source)
                    logger.log(episode=episode, call_index=index, round_index=len(rounds_log) - 1, task=fields,
                               call=call, result=result, slot=c["slot"],
                               correct=(c["answer"] == 0) if ok and answers and agent else None,
                               flagged=(c["kind"] == "flag") if ok and tool == 1 else None)
                    if ok and answers:
                        first_of.setdefault(c["answer"], index)
                    index += 1
                if done:
                    break
            if not done:
                _, _, done, _, info = env.step(np.array([1, *_slots()], np.int64))
            logger.log_episode({**fields, "episode": episode, "domain": bench.domain.name.lower(),
                                "options": bench.options, "models": models, "rounds": rounds_log,
                                "correct": bool(info["trajectory"]["outcome"] == 1.0)})


def _shifted_pool(tmp_path: Path) -> Path:
    """paramanager with every tool 3 logits worse in every domain: lower call and episode accuracy."""
    raw = json.loads(pool_file("paramanager").read_text())
    shifted = copy.deepcopy(raw)
    for tool in shifted["tools"].values():
        tool["bonus"].update({d: tool["bonus"][d] - 3.0 for d in ("math", "science", "knowledge", "code")})
    path = tmp_path / "shifted.json"
    path.write_text(json.dumps(shifted))
    return path


@pytest.fixture(scope="module")
def sim_log(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("simlog") / "calls.jsonl"
    _sim_logs(path, "paramanager", tasks=120, per_task=2, seed=3)
    return path


def test_a_simulated_log_validates_against_its_own_pool(sim_log: Path):
    """One log's report is well formed; whether its figures pass is a matter of chance at the level, which
    ``test_simulated_logs_are_flagged_at_the_nominal_rate`` checks over many logs."""
    report = validate_sim(sim_log, ValidateSimConfig(pool="paramanager", replicas=40, bootstrap=500))
    assert report["actions"] == "logged" and set(report["benchmarks"]) == {"AIME25", "GPQA", "all"}
    for bench in ("AIME25", "GPQA", "all"):
        for name, m in report["benchmarks"][bench]["metrics"].items():
            assert m["real_ci"][0] <= m["real"] <= m["real_ci"][1], (bench, name, m)
            assert m["sim_range"][0] <= m["sim"] <= m["sim_range"][1], (bench, name, m)
    summary = report["summary"]
    assert summary["expected_by_chance"] == pytest.approx(2 / 41 * summary["figures"], abs=0.01)
    assert report["replay"]["adapted_share"] < 0.02  # diverged replicas are rare under this policy


def test_a_p_of_exactly_one_minus_the_level_is_consistent():
    """With 40 replicas a real figure beyond all but one has p = 2 / 40 = 0.05, which is not below 1 - 0.95
    (0.05000000000000004 in binary); flagging it nearly doubled the chance rate. The chance rate is the uniform
    rank's: checked against exchangeable draws."""
    replicas = np.arange(40.0)
    assert predictive_p(0.5, replicas) == pytest.approx(0.05) and is_consistent(predictive_p(0.5, replicas), 0.95)
    assert not is_consistent(predictive_p(-1.0, replicas), 0.95) and not is_consistent(0.025, 0.95)
    rng = np.random.default_rng(0)
    for r, level in ((40, 0.95), (100, 0.95), (20, 0.9)):
        draws = rng.normal(size=(8_000, r + 1))
        rate = np.mean([not is_consistent(predictive_p(d[0], d[1:]), level) for d in draws])
        expected = chance_rate(level, r)
        assert abs(rate - expected) < 4 * np.sqrt(expected * (1 - expected) / len(draws)), (r, level, rate, expected)


def test_simulated_logs_are_flagged_at_the_nominal_rate(tmp_path: Path):
    """Logs written from the pool, each a fresh sample of tasks, policy and tool noise, validate against it at the
    nominal rate: no figure is flagged in more logs than a binomial at ``chance_rate`` allows (family-wise 0.001
    over the figures), and the share of all figures flagged stays within 3.5 standard errors of the chance rate
    (the error from the per-log counts: figures of one log are correlated, logs are independent)."""
    logs, level, replicas = 30, 0.95, 40
    flags: dict[str, int] = {}
    per_log, judged = [], []
    for seed in range(logs):
        path = tmp_path / f"log{seed}" / "calls.jsonl"
        _sim_logs(path, "paramanager", tasks=40, per_task=2, seed=100 + seed)
        report = validate_sim(path, ValidateSimConfig(pool="paramanager", replicas=replicas, bootstrap=100,
                                                      level=level, seed=seed))
        for group, g in report["benchmarks"].items():
            for name, m in g["metrics"].items():
                if m["consistent"] is not None:
                    flags[f"{group}/{name}"] = flags.get(f"{group}/{name}", 0) + (not m["consistent"])
        per_log.append(report["summary"]["flagged"])
        judged.append(report["summary"]["figures"])
    rate = chance_rate(level, replicas)
    bound = int(binom.isf(0.001 / len(flags), logs, rate))  # P(count > bound) <= 0.001 / figures
    assert max(flags.values()) <= bound, sorted(flags.items(), key=lambda kv: -kv[1])[:5]
    share = np.asarray(per_log) / np.asarray(judged)
    assert share.mean() <= rate + 3.5 * share.std(ddof=1) / np.sqrt(logs), (share.mean(), rate, per_log)
    assert sum(flags.values()) > 0  # the check can flag: at this level some figures fail by chance


def test_a_shifted_pool_is_flagged(sim_log: Path, tmp_path: Path):
    report = validate_sim(sim_log, ValidateSimConfig(pool=str(_shifted_pool(tmp_path)), replicas=40, bootstrap=500))
    own = validate_sim(sim_log, ValidateSimConfig(pool="paramanager", replicas=40, bootstrap=500))
    for bench in ("AIME25", "GPQA", "all"):
        metrics = report["benchmarks"][bench]["metrics"]
        # worse tools lower the replay's episode accuracy too, though the vote absorbs most of it (a few points,
        # within one log's noise: so against the same replay under the log's own pool, not against the log)
        assert metrics["accuracy"]["sim"] < own["benchmarks"][bench]["metrics"]["accuracy"]["sim"], bench
        assert metrics["call_accuracy"]["consistent"] is False and metrics["call_accuracy"]["p"] < 0.01, bench
        assert metrics["call_accuracy"]["sim_range"][1] < metrics["call_accuracy"]["real"]
        assert metrics["tokens"]["consistent"] and metrics["cost_units"]["consistent"]  # the shift is in accuracy only
    assert "all/call_accuracy" in report["summary"]["flagged_figures"]


def test_fitting_the_pool_to_a_simulated_log_recovers_its_accuracy(sim_log: Path):
    report = validate_sim(sim_log, ValidateSimConfig(replicas=40, bootstrap=500))
    assert report["pool"]["source"] == "fitted" and report["pool"]["calls"] > 500
    pooled = report["benchmarks"]["all"]["metrics"]
    assert pooled["accuracy"]["consistent"], pooled["accuracy"]
    assert pooled["call_accuracy"]["consistent"], pooled["call_accuracy"]


# -------------------------------------------------------------------------------------------- bad input
def _error(capsys, *argv: str) -> str:
    assert main(["validate-sim", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("parasim validate-sim: error: "), err
    return err


def _copy_log(sim_log: Path, tmp_path: Path, edit=None, episodes_edit=None) -> Path:
    calls = sim_log.read_text().splitlines()
    episodes = episodes_path(sim_log).read_text().splitlines()
    if edit:
        calls = edit(calls)
    if episodes_edit:
        episodes = episodes_edit(episodes)
    out = tmp_path / "calls.jsonl"
    out.write_text("".join(line + "\n" for line in calls))
    episodes_path(out).write_text("".join(line + "\n" for line in episodes))
    return out


def test_bad_logs_are_one_line_errors_naming_the_file_and_field(sim_log: Path, tmp_path: Path, capsys):
    assert "no such file or directory" in _error(capsys, str(tmp_path / "missing"))
    (tmp_path / "empty_dir").mkdir()
    assert "no episode logs" in _error(capsys, str(tmp_path / "empty_dir"))
    lone = tmp_path / "lone" / "calls.jsonl"
    lone.parent.mkdir()
    lone.write_text(sim_log.read_text())
    assert "calls.episodes.jsonl: the episode log of this log pair is missing" in _error(capsys, str(lone))

    log = _copy_log(sim_log, tmp_path, episodes_edit=lambda lines: [])
    assert f"{episodes_path(log)}: no episodes" in _error(capsys, str(log))
    log = _copy_log(sim_log, tmp_path, edit=lambda lines: lines[:3] + ["{not json"] + lines[3:])
    assert f"{log}:4: not valid JSON" in _error(capsys, str(log))

    def drop_tokens(lines):
        rec = json.loads(lines[0])
        del rec["tokens_out"]
        return [json.dumps(rec)] + lines[1:]
    log = _copy_log(sim_log, tmp_path, edit=drop_tokens)
    assert f"{log}:1.tokens_out: required field is missing" in _error(capsys, str(log))

    def bad_round(lines):
        rec = json.loads(lines[0])
        rec["rounds"][0]["calls"] = [999]
        return [json.dumps(rec)] + lines[1:]
    log = _copy_log(sim_log, tmp_path, episodes_edit=bad_round)
    assert f"{episodes_path(log)}:1.rounds[0].calls[0]: no call 999 of episode 0" in _error(capsys, str(log))

    def bad_correct(lines):
        rec = json.loads(lines[1])
        rec["correct"] = "yes"
        return lines[:1] + [json.dumps(rec)] + lines[2:]
    log = _copy_log(sim_log, tmp_path, episodes_edit=bad_correct)
    assert f"{episodes_path(log)}:2.correct: expected true or false" in _error(capsys, str(log))

    def rename_model(lines):
        return [line.replace('"GPT-OSS-20B"', '"not-in-the-pool"') for line in lines]
    log = _copy_log(sim_log, tmp_path, edit=rename_model)
    err = _error(capsys, str(log), "--pool", "paramanager")
    assert f"{log}:" in err and ".model: model 'not-in-the-pool'" in err and "is not in the pool 'paramanager'" in err


def test_validate_sim_settings_follow_the_config_style(tmp_path: Path, capsys):
    config = tmp_path / "v.toml"
    config.write_text("replicas = 4\nlevel = 0.9\n")
    assert main(["validate-sim", "unused", "--config", str(config), "--seed", "3", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert "replicas = 4" in printed and "level = 0.9" in printed and "seed = 3" in printed
    assert "replicas" in _error(capsys, "unused", "--replicas", "0")
    config.write_text("replica = 4\n")
    assert "replica" in _error(capsys, "unused", "--config", str(config))
