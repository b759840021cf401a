"""The CPU pool generator (``scripts/cpu_pool.py``, ``scripts/cpu_pool_tasks.py``): the task family's gold answers
recomputed independently of the generator, the held-out suites kept out of training, the build's cache and
determinism, a trained checkpoint's text through transformers, and one served by vLLM through the real backend."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from contextlib import redirect_stdout
from dataclasses import replace
from io import StringIO
from pathlib import Path

import cpu_pool as C
import cpu_pool_tasks as T
import pytest

from parasim.protocol.schema import Tool
from parasim.real import prompts
from parasim.real.engine import default_verifier
from parasim.real.tasks import parse_task

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = Path(os.environ.get("PARASIM_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))


def _program_output(source: str) -> str:
    out = StringIO()
    with redirect_stdout(out):
        exec(source, {})  # the generator's own straight-line program, no input
    return out.getvalue().strip()


def test_tasks_are_deterministic_and_their_gold_answers_are_right():
    tasks = T.suite(3, 12)
    assert [t.record() for t in tasks] == [t.record() for t in T.suite(3, 12)]
    assert [t.record() for t in tasks] != [t.record() for t in T.suite(4, 12)]
    facts = {name: number for name, number, _ in T.fact_table(3)}
    for task in tasks:
        real = parse_task(task.record(), task.task_id)  # a valid RealTask line
        assert real.benchmark == f"generic_{task.domain}" and task.level in T.LEVELS[task.domain]
        if task.domain == "math":
            a, b = map(int, re.fullmatch(r"What is (\d+) \+ (\d+)\?", task.question).groups())
            assert int(task.answer) == a + b and len(task.steps) == max(len(str(a)), len(str(b)))
            assert [len(str(a)), len(str(b))] in ([*T.MATH_DIGITS[task.level]], [*T.MATH_DIGITS[task.level]][::-1])
        elif task.domain == "code":
            source = task.question.removeprefix("What does this program print? ")
            assert _program_output(source.replace("; ", "\n")) == task.answer
            assert source.count("x = x") == task.level
        elif task.domain == "knowledge":
            name = re.fullmatch(r"What is the registry number of (\w+)\?", task.question).group(1)
            assert task.answer == str(facts[name])
        else:
            values = [int(v) for v in task.options]
            pick = max(values) if "largest" in task.question else min(values)
            assert len(set(values)) == 4 and task.answer == "ABCD"[values.index(pick)]
        # the worked solution and the program give the gold answer through the real backend's readers
        assert default_verifier(prompts.extract_answer(T.solution(task)), real)
        assert _program_output(T.program(task)) in (task.answer, repr(task.answer).strip("'"))


def test_eval_and_train_suites_are_disjoint_and_never_in_a_models_training_stream():
    config = replace(C.POOL, eval_per_cell=20, train_per_cell=30)
    evals, trains = C.held_out(config)
    key = lambda tasks: {t.question_key for t in tasks if t.domain != "knowledge"}  # noqa: E731
    assert len(key(evals)) == len([t for t in evals if t.domain != "knowledge"])  # no repeats inside a suite
    assert not key(evals) & key(trains)
    held = frozenset(key(evals) | key(trains))
    stream = C.Stream(config, config.models[1], held)
    seen = [stream.task() for _ in range(3000)]
    assert not {t.question_key for t in seen} & held
    known = {f[0] for f in C.known_facts(config, config.models[1])}
    assert {t.question.split()[-1].rstrip("?") for t in seen if t.domain == "knowledge"} <= known
    # the models know different parts of the fact table, and more of the popular facts
    parts = [{f[0] for f in C.known_facts(config, plan) if f[2] == 3} for plan in config.models]
    assert len({frozenset(p) for p in parts}) == len(parts)


def test_training_examples_are_the_backend_prompts_with_the_answer_forms_it_reads():
    rng = __import__("random").Random(0)
    task = T.math_task(0, 3, 7)
    messages, target = C.example(rng, task, Tool.STANDARD_REASONER)
    assert messages[0]["content"] == prompts.SYSTEM_PROMPTS[Tool.STANDARD_REASONER]
    assert prompts.extract_answer(target) == task.answer
    flags = set()
    for _ in range(40):
        messages, target = C.example(rng, task, Tool.CRITICAL_REVIEWER)
        assert "Earlier result:" in messages[1]["content"] and prompts.extract_answer(target) == task.answer
        flags.add(prompts.review_verdict(target))
        candidate = re.findall(r"(?:Final answer|votes\)): (\d+)", messages[1]["content"])[-1]
        assert prompts.review_verdict(target) is (candidate != task.answer)
    assert flags == {True, False}
    messages, target = C.example(rng, task, Tool.CODE_REASONER)
    assert _program_output(prompts.extract_code(target)) == task.answer


def _weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_quick_build_is_cached_and_deterministic(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    first = C.build(a, C.QUICK, vllm_python="/opt/vllm/bin/python", log=None)
    assert first["cached"] == [] and set(first["models"]) == {m.model_id for m in C.QUICK.models}
    again = C.build(a, C.QUICK, vllm_python="/opt/vllm/bin/python", log=None)
    assert again["cached"] == list(first["models"]) and again["config_hash"] == first["config_hash"]
    other = C.build(b, C.QUICK, vllm_python="/opt/vllm/bin/python", log=None)
    for model_id in first["models"]:
        wa, wb = _weights(a / "models" / model_id), _weights(b / "models" / model_id)
        assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)  # bit-identical
    same = lambda m: {k: (v["model_hash"], v["parameters"], v["final_loss"]) for k, v in m["models"].items()}  # noqa: E731
    assert same(other) == same(first)
    changed = replace(C.QUICK, models=(replace(C.QUICK.models[0], seed=99), *C.QUICK.models[1:]))
    rebuilt = C.build(a, changed, vllm_python="/opt/vllm/bin/python", log=None)
    assert rebuilt["config_hash"] != first["config_hash"] and rebuilt["cached"] == [C.QUICK.models[1].model_id]
    w0 = _weights(a / "models" / C.QUICK.models[0].model_id)
    assert any((w0[k] != wb[k]).any() for k in w0 if k in (wb := _weights(b / "models" / C.QUICK.models[0].model_id)))
    # the files the lead's loop reads
    for name in ("tasks_eval.jsonl", "tasks_train.jsonl"):
        lines = (a / name).read_text().splitlines()
        assert lines and all(parse_task(json.loads(x)) for x in lines)
    import yaml

    from parasim.real.serve_pool import load_serve_config

    serve = load_serve_config(a / "pool_serving.yaml")
    assert serve.python == "/opt/vllm/bin/python" and len(serve.models) == len(C.QUICK.models)
    prices = [dict(m.endpoint)["output_per_mtok"] for m in serve.models]
    params = [first["models"][m.model_id]["parameters"] for m in serve.models]
    assert prices[0] / prices[1] == pytest.approx(params[0] / params[1], rel=1e-3)
    assert yaml.safe_load((a / "pool_serving.yaml").read_text())["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"


FORMAT = replace(C.POOL, models=(replace(C.POOL.models[3], model_id="fmt", steps=120, domains={"math": 1.0}),),
                 eval_per_cell=4, train_per_cell=4, tokenizer_samples=300,
                 tool_weights={"standard_reasoner": 1.0})


@pytest.mark.slow
def test_a_trained_checkpoint_writes_a_final_answer_line_in_transformers(tmp_path: Path):
    manifest = C.build(tmp_path, FORMAT, log=None)
    assert manifest["models"]["fmt"]["final_loss"] < 1.5
    tasks = [t for t in T.suite(0, 4) if t.domain == "math"]
    texts = C.generate_local(tmp_path / "models" / "fmt", [
        prompts.agent_messages(Tool.STANDARD_REASONER, t.question, t.question) for t in tasks])
    for text in texts:
        assert re.search(r"^Final answer: \d+$", text, re.MULTILINE), text
        assert re.fullmatch(r"\d+", prompts.extract_answer(text)), text


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.pool_tier  # out of the README's command (its 10-minute budget): .ci/run runs it with the sim-to-real tier
def test_served_pool_answers_through_the_real_backend(tmp_path: Path):
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM environment at {VLLM_PYTHON}: run scripts/setup_vllm_venv.sh (or set "
                    "PARASIM_VLLM_PYTHON)")
    import socket

    import yaml

    from parasim.protocol.schema import Status, ToolCall
    from parasim.real.backend import CallInput, RealToolBackend

    C.build(tmp_path, FORMAT, vllm_python=str(VLLM_PYTHON), log=None)
    serving = yaml.safe_load((tmp_path / "pool_serving.yaml").read_text())
    with socket.socket() as s:  # a free port, not the file's default
        s.bind(("127.0.0.1", 0))
        serving["base_port"] = s.getsockname()[1]
    (tmp_path / "pool_serving.yaml").write_text(yaml.safe_dump(serving))
    endpoints = tmp_path / "endpoints.json"
    proc = subprocess.Popen([sys.executable, "-m", "parasim.cli", "serve-pool", "--config",
                             str(tmp_path / "pool_serving.yaml"), "--endpoints-out", str(endpoints)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout=600)
    try:
        assert line and line[0].strip(), "serve-pool printed no endpoint map"
        task = T.math_task(0, 1, 3)
        with RealToolBackend(json.loads(line[0]), pool=None) as backend:
            results = backend.run_round([ToolCall(Tool.STANDARD_REASONER, "fmt", task.question)] * 4,
                                        [CallInput(task.question, seed=s) for s in range(4)])
        for res in results:
            assert res.status is Status.OK and res.tokens_out > 3 and res.usd > 0
            assert re.fullmatch(r"\d+", res.extra["answer"]), res.output
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
