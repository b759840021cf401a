"""A real heterogeneous pool of small language models, trained here on CPU and served by vLLM's CPU server.

``python scripts/cpu_pool.py build [OUT_DIR] [--quick]`` (default ``parasim_out/cpu_pool``, git-ignored) trains the
pool's models from fixed seeds and writes one Hugging Face checkpoint per model (``models/<id>/``: a
``Qwen3ForCausalLM`` of ``scripts/tiny_lm.py``'s architecture, tokenizer and chat template), the task suite
(``tasks_train.jsonl``, ``tasks_eval.jsonl``: ``parasim.real.tasks`` records with domain, ``generic_*`` benchmark,
difficulty and level), ``pool_serving.yaml`` for ``parasim serve-pool`` and ``manifest.json`` (seeds, sizes,
parameter counts, steps, wall times, the config hash). A second build of the same config is a cache hit (each
model directory records the hash of everything its weights depend on); a changed config retrains what changed.
``python scripts/cpu_pool.py measure OUT_DIR --endpoints E`` measures the served pool through the real backend
(``scripts/cpu_pool.md`` has the table and the commands).

Why: the simulator's calibration (``parasim calibrate``) and its check (``parasim validate-sim``) need a pool whose
models really differ, which no single tiny random model gives. The models differ on purpose, as real pools do:
sizes (d_model 64-128, 2-3 layers, 0.15-0.69 M parameters), training mixes (math-heavy, code-heavy, generalist,
a small knowledge-heavy one), learning rates, and the part of the fact table each saw. The task family is
``scripts/cpu_pool_tasks.py``; the measured accuracies are in ``scripts/cpu_pool.md``.

What each agent tool's prompt is trained to produce (the model sees exactly the text the backend sends:
``parasim.real.prompts.agent_messages`` rendered by the chat template with the generation prompt; the loss is on
the assistant's tokens only):

- standard_reasoner, and ensemble_solver (the same system prompt in the tool spec, so the same model behaviour;
  the backend samples it k times and votes): the worked solution, longer for harder tasks, then
  ``Final answer: X``.
- critical_reviewer: given ``Earlier result:`` with a candidate answer (right or wrong, half each, as a worked
  solution or a bare final line, sometimes in the ensemble's ``Majority of k samples`` form), the model works the
  task again, writes ``Verdict: CORRECT`` or ``Verdict: WRONG`` and its own ``Final answer``.
- code_reasoner: a fenced python block that the backend runs in the sandbox: the traced program itself, or
  ``print(<the sum>)`` copied from a math question, so the answer is exact when the model copies right and a
  miscopy is a wrong answer or an EXEC_ERR (as a real coder's bug is); for knowledge and science it prints the
  model's recalled answer, so there the tool is no better than the model.
- knowledge_searcher: the standard_reasoner's text under its own prompt. With no retriever configured the backend
  sends the prompt alone, so the tool is the model's closed-book recall; with a retriever the passages would be in
  the context, which these models were not trained to read.

The termination model's prompt is not trained: run the engine with ``use_termination_model=False`` (the rules'
vote lead) on this pool.

Determinism: the data stream of a model is ``random.Random`` of its seed; weights start from
``torch.manual_seed``; torch runs ``threads`` threads with deterministic algorithms, so a seed gives bit-identical
weights on one machine (the test checks it).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tiny_lm, cpu_pool_tasks: siblings, not in the wheel

import cpu_pool_tasks as T  # noqa: E402
from tiny_lm import TinyLMSpec, build_tokenizer, qwen3_config, save_checkpoint  # noqa: E402

from parasim.config.writes import atomic_write_bytes, atomic_write_json  # noqa: E402
from parasim.protocol.schema import Tool  # noqa: E402
from parasim.real import prompts  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "parasim_out" / "cpu_pool"
# Part of every cache key: bump it with any change to the task generator, the examples or the training loop that
# changes the weights a config trains (a change elsewhere, such as to ``measure``, keeps the built pools valid).
GENERATOR_VERSION = 1
_AGENT_TOOLS = (Tool.STANDARD_REASONER, Tool.CRITICAL_REVIEWER, Tool.CODE_REASONER, Tool.KNOWLEDGE_SEARCHER)
_SUBTASKS = ("Solve it.", "Compute the answer.", "Answer the question.", "Work it out step by step.")
_REVIEW_SUBTASKS = ("Check the answer {c}.", "Verify the earlier result.", "Is {c} right?", "Review the answer.")


@dataclass(frozen=True)
class ModelPlan:
    """One model of the pool: its sizes, what it is trained on and for how long."""

    model_id: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    domains: dict[str, float]  # training share of each domain
    facts: dict[int, float]  # share of each knowledge level's facts this model is trained on
    steps: int
    seed: int
    lr: float = 3e-3
    batch_size: int = 32

    def spec(self, vocab_size: int, max_len: int) -> TinyLMSpec:
        return TinyLMSpec(vocab_size=vocab_size, hidden_size=self.hidden_size,
                          intermediate_size=self.intermediate_size, num_hidden_layers=self.num_hidden_layers,
                          num_attention_heads=self.num_attention_heads,
                          num_key_value_heads=self.num_key_value_heads, head_dim=32,
                          max_position_embeddings=max_len)


@dataclass(frozen=True)
class PoolConfig:
    """Everything a build depends on; its hash (with ``GENERATOR_VERSION``) keys the cache."""

    models: tuple[ModelPlan, ...]
    task_seed: int = 0
    vocab_size: int = 768
    max_len: int = 1024
    threads: int = 1  # torch threads per model; models train in ``workers`` processes at once
    workers: int = 2
    eval_per_cell: int = 50
    train_per_cell: int = 150
    tool_weights: dict[str, float] = field(default_factory=lambda: {
        "standard_reasoner": 0.5, "critical_reviewer": 0.3, "code_reasoner": 0.1, "knowledge_searcher": 0.1})
    tokenizer_samples: int = 3000


POOL = PoolConfig(models=(
    ModelPlan("cp-general", 128, 3, 4, 2, 384, {"math": 0.25, "code": 0.25, "knowledge": 0.25, "science": 0.25},
              {1: 1.0, 2: 0.6, 3: 0.35}, steps=1000, seed=11),
    ModelPlan("cp-math", 96, 3, 3, 1, 256, {"math": 0.55, "code": 0.15, "knowledge": 0.1, "science": 0.2},
              {1: 1.0, 2: 0.3, 3: 0.15}, steps=1000, seed=12),
    ModelPlan("cp-code", 96, 3, 3, 1, 256, {"math": 0.15, "code": 0.55, "knowledge": 0.1, "science": 0.2},
              {1: 1.0, 2: 0.3, 3: 0.15}, steps=1000, seed=13),
    ModelPlan("cp-small", 64, 2, 2, 1, 192, {"math": 0.15, "code": 0.15, "knowledge": 0.45, "science": 0.25},
              {1: 1.0, 2: 0.8, 3: 0.6}, steps=1000, seed=14, lr=5e-3),
))
QUICK = replace(POOL, models=tuple(replace(m, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                           num_key_value_heads=1, intermediate_size=128, steps=3, batch_size=4)
                                   for m in POOL.models[:2]),
                eval_per_cell=4, train_per_cell=4, tokenizer_samples=300, workers=1)


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_hash(config: PoolConfig) -> str:
    return _digest([asdict(config), GENERATOR_VERSION])


def model_hash(config: PoolConfig, plan: ModelPlan) -> str:
    """What one model's weights depend on: its plan, the shared data and tokenizer settings, the code's version."""
    shared = {k: v for k, v in asdict(config).items() if k != "models"}
    return _digest([asdict(plan), shared, GENERATOR_VERSION])


# ------------------------------------------------------------------------------------------------ training data
def held_out(config: PoolConfig) -> tuple[list[T.GenTask], list[T.GenTask]]:
    """The eval and train suites: disjoint questions (knowledge aside: a fact table is closed-book), and never in
    any model's training stream."""
    evals = T.suite(config.task_seed, config.eval_per_cell)
    exclude = frozenset(t.question_key for t in evals if t.domain != "knowledge")
    trains = T.suite(config.task_seed, config.train_per_cell, offset=1_000_000, exclude=exclude)
    return evals, trains


def known_facts(config: PoolConfig, plan: ModelPlan) -> list[tuple[str, int, int]]:
    """The facts ``plan`` is trained on: each level's share, picked by a hash of (model, fact), so two models'
    sets overlap partly."""
    facts = []
    for fact in T.fact_table(config.task_seed):
        draw = int(hashlib.sha256(f"{plan.model_id}:{fact[0]}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        if draw < plan.facts.get(fact[2], 0.0):
            facts.append(fact)
    return facts


def _wrong_answer(rng: random.Random, task: T.GenTask) -> str:
    """A plausible wrong candidate: a letter off for multiple choice, one digit changed otherwise."""
    if task.options:
        return rng.choice([c for c in "ABCD"[:len(task.options)] if c != task.answer])
    digits = list(task.answer)
    i = rng.randrange(len(digits))
    digits[i] = rng.choice([d for d in "0123456789" if d != digits[i] and (i or len(digits) == 1 or d != "0")])
    return "".join(digits)


def _candidate_text(rng: random.Random, task: T.GenTask, candidate: str) -> str:
    """An earlier call's output that proposes ``candidate``: a worked solution, a bare final line, or the
    ensemble's vote line (the forms ``RealEpisodeEngine`` carries as context)."""
    form = rng.random()
    body = "\n".join((*task.steps, f"Final answer: {candidate}")) if form < 0.6 else f"Final answer: {candidate}"
    if form >= 0.85:
        body += f"\n\nMajority of 3 samples ({rng.randint(2, 3)} votes): {candidate}"
    return body


def example(rng: random.Random, task: T.GenTask, tool: Tool) -> tuple[list[dict[str, str]], str]:
    """The chat messages the backend sends for ``tool`` on ``task`` and the text the model is trained to write."""
    subtask, context = task.question, ""
    if tool is Tool.CRITICAL_REVIEWER:
        right = rng.random() < 0.5
        candidate = task.answer if right else _wrong_answer(rng, task)
        context = _candidate_text(rng, task, candidate)
        if rng.random() < 0.25:
            subtask = rng.choice(_REVIEW_SUBTASKS).format(c=candidate)
        target = "\n".join((*task.steps, f"Verdict: {'CORRECT' if right else 'WRONG'}",
                            f"Final answer: {task.answer}"))
    else:
        if rng.random() < 0.25:
            subtask = rng.choice(_SUBTASKS)
        target = f"```python\n{T.program(task)}\n```" if tool is Tool.CODE_REASONER else T.solution(task)
    return prompts.agent_messages(tool, task.question, subtask, context, task.options), target


class Stream:
    """A model's training examples, deterministic from its seed: domain by the plan's shares, level uniform,
    tool by the config's weights, questions never in the held-out suites, facts from the model's own part of the
    table weighted by popularity."""

    def __init__(self, config: PoolConfig, plan: ModelPlan, held: frozenset[str]) -> None:
        self.rng = random.Random(f"stream:{plan.seed}")
        self.config, self.held = config, held
        self.domains = [d for d in T.DOMAINS if plan.domains.get(d, 0) > 0]
        self.domain_w = [plan.domains[d] for d in self.domains]
        self.tools = [Tool[name.upper()] for name in config.tool_weights]
        self.tool_w = list(config.tool_weights.values())
        self.facts = known_facts(config, plan)
        self.fact_w = [T.FACT_WEIGHT[f[2]] for f in self.facts]
        self.index = 0

    def task(self) -> T.GenTask:
        domain = self.rng.choices(self.domains, self.domain_w)[0]
        if domain == "knowledge":
            if not self.facts:
                domain = "math"
            else:
                fact = self.rng.choices(self.facts, self.fact_w)[0]
                return T.knowledge_task(self.config.task_seed, fact, 0)
        level = self.rng.choice(T.LEVELS[domain])
        while True:
            self.index += 1
            task = T.generate(self.config.task_seed, domain, level, 2_000_000 + self.index * 7919 + level)
            if task.question_key not in self.held:
                return task

    def __next__(self) -> tuple[list[dict[str, str]], str]:
        task = self.task()
        return example(self.rng, task, self.rng.choices(self.tools, self.tool_w)[0])


def tokenizer_corpus(config: PoolConfig) -> list[str]:
    """Texts like the ones the models see (every tool and domain, and the chat template's role names), for the
    tokenizer's merges (the turn markers are added tokens)."""
    plan = ModelPlan("corpus", 64, 1, 2, 1, 64, {d: 1.0 for d in T.DOMAINS}, {1: 1.0, 2: 1.0, 3: 1.0}, 0, 0)
    stream, lines = Stream(config, plan, frozenset()), ["system\n", "user\n", "assistant\n"] * 50
    for _ in range(config.tokenizer_samples):
        messages, target = next(stream)
        lines += [m["content"] for m in messages] + [target]
    return lines


def encode(tokenizer: Any, messages: list[dict[str, str]], target: str) -> tuple[list[int], int]:
    """Token ids of prompt + target + end of turn, and where the target starts. The prompt is encoded on its own,
    as the server encodes it, so the model learns to continue exactly what it will be sent."""
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    t_ids = tokenizer(target, add_special_tokens=False)["input_ids"]
    return p_ids + t_ids + [tokenizer.convert_tokens_to_ids("<|im_end|>")], len(p_ids)


# ----------------------------------------------------------------------------------------------------- training
def train_model(config: PoolConfig, plan: ModelPlan, tokenizer: Any, held: frozenset[str], out_dir: Path,
                log: Any = None) -> dict[str, Any]:
    """Train one model (AdamW, warmup then cosine decay, loss on the assistant's tokens) and save it."""
    import torch
    from transformers import Qwen3ForCausalLM

    torch.set_num_threads(config.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(plan.seed)
    model = Qwen3ForCausalLM(qwen3_config(plan.spec(config.vocab_size, config.max_len), tokenizer)).float()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=plan.lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, plan.steps // 20)

    def lr_scale(step: int) -> float:  # linear warmup, then cosine down to a tenth
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, plan.steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_scale)
    stream = Stream(config, plan, held)
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    start, cpu_start, losses, tokens = time.perf_counter(), time.process_time(), [], 0
    model.train()
    for step in range(plan.steps):
        rows = [encode(tokenizer, *next(stream)) for _ in range(plan.batch_size)]
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (row, cut) in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row)
            labels[i, cut:len(row)] = torch.tensor(row[cut:])
            mask[i, :len(row)] = 1
        tokens += int(mask.sum())
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log is not None and (step % 100 == 0 or step == plan.steps - 1):
            print(f"[cpu_pool] {plan.model_id} step {step + 1}/{plan.steps} loss {losses[-1]:.3f} "
                  f"({time.perf_counter() - start:.0f} s)", file=log, flush=True)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    meta = {"model_hash": model_hash(config, plan), "plan": asdict(plan), "parameters": params,
            "train_wall_s": round(wall, 2), "train_cpu_s": round(cpu, 2), "train_tokens": tokens,
            "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
            **plan.spec(config.vocab_size, config.max_len).__dict__}
    save_checkpoint(model.eval(), tokenizer, out_dir, meta)
    return meta


def generate_local(model_dir: str | Path, requests: Sequence[list[dict[str, str]]], max_new_tokens: int = 96,
                   batch_size: int = 64) -> list[str]:
    """Greedy completions by transformers of each request's chat messages (a check without a server)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    texts = []
    for i in range(0, len(requests), batch_size):
        prompts_ = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False)
                    for m in requests[i:i + batch_size]]
        enc = tok(prompts_, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        texts += tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return texts


def _read_meta(model_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((model_dir / "parasim_tiny_lm.json").read_text())
    except (OSError, ValueError):
        return None


def _write_jsonl(path: Path, tasks: Sequence[T.GenTask]) -> None:
    atomic_write_bytes(path, "".join(json.dumps(t.record()) + "\n" for t in tasks).encode())


def serving_config(config: PoolConfig, out: Path, metas: dict[str, dict[str, Any]], vllm_python: str,
                   base_port: int = 8300) -> dict[str, Any]:
    """The ``parasim serve-pool`` file: one single-thread CPU server per model (pinned to the cores in turn), a
    small KV cache and context, and USD prices proportional to each model's parameter count (0.1 $ per million
    output tokens per million parameters, input a quarter of that), so the pool's models differ in cost."""
    cores = max(1, os.cpu_count() or 1)
    models = []
    for i, plan in enumerate(config.models):
        mparams = metas[plan.model_id]["parameters"] / 1e6
        models.append({
            "id": plan.model_id, "path": str((out / "models" / plan.model_id).resolve()),
            "args": ["--dtype", "float32", "--max-model-len", str(config.max_len), "--enforce-eager",
                     "--seed", "0", "--max-num-seqs", "32"],
            "env": {"VLLM_CPU_OMP_THREADS_BIND": str(i % cores)},
            "endpoint": {"input_per_mtok": round(0.025 * mparams, 6), "output_per_mtok": round(0.1 * mparams, 6)},
        })
    return {
        "python": vllm_python, "host": "127.0.0.1", "base_port": base_port,
        "log_dir": str((out / "serve_logs").resolve()), "startup_timeout_s": 600, "grace_s": 20,
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1"},
        "endpoint": {"timeout_s": 120, "retries": 1, "max_tokens": 96, "max_concurrency": 16,
                     "temperature": 0.7},
        "termination": {"model": config.models[0].model_id, "max_tokens": 48},
        "models": models,
    }


def _train_job(job: tuple[PoolConfig, ModelPlan, frozenset[str], Path, bool]) -> dict[str, Any]:
    """Train one model into a temporary directory and move it into place (a process of its own when the build
    trains several at once: the tokenizer is rebuilt there, deterministically)."""
    config, plan, held, out, verbose = job
    tokenizer = build_tokenizer(config.vocab_size, corpus=tokenizer_corpus(config), split_digits=True)
    final, tmp = out / "models" / plan.model_id, out / "models" / f".{plan.model_id}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    meta = train_model(config, plan, tokenizer, held, tmp, sys.stderr if verbose else None)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return meta


def build(out_dir: str | Path = DEFAULT_OUT, config: PoolConfig = POOL, vllm_python: str | None = None,
          log: Any = sys.stderr) -> dict[str, Any]:
    """Train what is stale, write the suites, the serving file and the manifest; returns the manifest."""
    import yaml

    out = Path(out_dir)
    (out / "models").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    evals, trains = held_out(config)
    held = frozenset(t.question_key for t in evals + trains if t.domain != "knowledge")
    metas, cached, stale = {}, [], []
    for plan in config.models:
        meta = _read_meta(out / "models" / plan.model_id)
        if meta is not None and meta.get("model_hash") == model_hash(config, plan):
            metas[plan.model_id] = meta
            cached.append(plan.model_id)
        else:
            stale.append(plan)
    jobs = [(config, plan, held, out, log is not None) for plan in stale]
    if config.workers > 1 and len(jobs) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(config.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = list(pool.map(_train_job, jobs))
    else:
        done = [_train_job(job) for job in jobs]
    metas.update((plan.model_id, meta) for plan, meta in zip(stale, done))
    _write_jsonl(out / "tasks_eval.jsonl", evals)
    _write_jsonl(out / "tasks_train.jsonl", trains)
    python = vllm_python or str(REPO / ".venv-vllm" / "bin" / "python")
    serve = serving_config(config, out, metas, python)
    atomic_write_bytes(out / "pool_serving.yaml", yaml.safe_dump(serve, sort_keys=False).encode())
    manifest = {
        "config_hash": config_hash(config), "task_seed": config.task_seed, "threads": config.threads,
        "vocab_size": config.vocab_size, "tasks": {"eval": len(evals), "train": len(trains)},
        "models": {mid: {k: m[k] for k in ("model_hash", "parameters", "train_wall_s", "train_cpu_s",
                                             "train_tokens", "final_loss", "plan")} for mid, m in metas.items()},
        "cached": cached, "train_wall_s_total": round(sum(m["train_wall_s"] for m in metas.values()), 2),
        "train_cpu_s_total": round(sum(m["train_cpu_s"] for m in metas.values()), 2),
        "build_wall_s": round(time.perf_counter() - start, 2),
    }
    atomic_write_json(out / "manifest.json", manifest)
    return manifest


# ---------------------------------------------------------------------------------------------------- measuring
def _phi(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """The correlation of two error indicators (None when either never or always errs)."""
    n = len(a)
    pa, pb = sum(a) / n, sum(b) / n
    if pa in (0, 1) or pb in (0, 1):
        return None
    pab = sum(x and y for x, y in zip(a, b)) / n
    return round((pab - pa * pb) / math.sqrt(pa * (1 - pa) * pb * (1 - pb)), 3)


def measure(out_dir: str | Path, endpoints: str | Path, per_cell: int = 50) -> dict[str, Any]:
    """Each served model on the eval suite through ``RealToolBackend`` (the real call path, the endpoints'
    temperature): standard_reasoner and code_reasoner accuracy and output tokens per domain and level,
    critical_reviewer's verdicts on the next model's real standard_reasoner outputs, and the pairwise correlation
    of the models' standard_reasoner errors."""
    from parasim.protocol.schema import ToolCall
    from parasim.real.backend import CallInput, RealToolBackend
    from parasim.real.endpoints import load_endpoint_map
    from parasim.real.engine import _call_seed, default_verifier
    from parasim.real.tasks import parse_task

    out = Path(out_dir)
    records = [json.loads(line) for line in (out / "tasks_eval.jsonl").read_text().splitlines() if line.strip()]
    cells: dict[tuple[str, int], int] = {}
    chosen = []
    for rec in records:
        key = (rec["domain"], rec["level"])
        if cells.get(key, 0) < per_cell:
            cells[key] = cells.get(key, 0) + 1
            chosen.append(rec)
    tasks = [parse_task(rec, f"tasks_eval[{i}]") for i, rec in enumerate(chosen)]
    emap = load_endpoint_map(endpoints).to_json()
    emap.setdefault("python", {})  # code_reasoner's programs run in the sandbox (bubblewrap)
    models = list(emap["endpoints"])
    backend = RealToolBackend.from_config(emap, pool=None)

    def run(jobs: Sequence[tuple[Tool, str, Sequence[str] | None]]) -> list[list[Any]]:
        """Every (tool, model, contexts) job over all tasks, all models' calls in flight together."""
        calls, inputs = [], []
        for tool, model, contexts in jobs:
            calls += [ToolCall(tool, model, t.question) for t in tasks]
            inputs += [CallInput(t.question, t.options, contexts[i] if contexts else "", _call_seed(int(tool), i))
                       for i, t in enumerate(tasks)]
        results = backend.run_round(calls, inputs)  # the endpoints' max_concurrency paces them
        return [results[j * len(tasks):(j + 1) * len(tasks)] for j in range(len(jobs))]

    def correct(result: Any, task: Any) -> bool:
        return result.status.name == "OK" and default_verifier(result.extra.get("answer", ""), task)

    report: dict[str, Any] = {"tasks": len(tasks), "per_cell": per_cell, "models": {}}
    errors, standard = {}, {}
    start = time.perf_counter()
    try:
        done = run([(tool, model, None) for model in models
                    for tool in (Tool.STANDARD_REASONER, Tool.CODE_REASONER)])
        for j, model in enumerate(models):
            res = standard[model] = done[2 * j]
            code = done[2 * j + 1]
            errors[model] = [not correct(r, t) for r, t in zip(res, tasks)]
            table: dict[str, Any] = {}
            for key in sorted(cells):
                idx = [i for i, rec in enumerate(chosen) if (rec["domain"], rec["level"]) == key]
                table[f"{key[0]}/L{key[1]}"] = {
                    "standard": round(sum(not errors[model][i] for i in idx) / len(idx), 3),
                    "code": round(sum(correct(code[i], tasks[i]) for i in idx) / len(idx), 3),
                    "tokens_out": round(sum(res[i].tokens_out for i in idx) / len(idx), 1),
                    "not_ok": sum(res[i].status.name != "OK" for i in idx)}
            report["models"][model] = {"cells": table,
                                       "standard_accuracy": round(1 - sum(errors[model]) / len(tasks), 3)}
        # each reviewer checks the next model's real standard_reasoner outputs
        others = [models[(j + 1) % len(models)] for j in range(len(models))]
        contexts = {m: [r.output if r.status.name == "OK" else "" for r in standard[m]] for m in models}
        reviews = run([(Tool.CRITICAL_REVIEWER, model, contexts[other]) for model, other in zip(models, others)])
        for model, other, review in zip(models, others, reviews):
            flags: dict[bool, list[bool]] = {True: [], False: []}
            for r, wrong, ctx in zip(review, errors[other], contexts[other]):
                if ctx and r.status.name == "OK":
                    flags[wrong].append(r.extra.get("flagged") is True)
            entry = report["models"][model]
            entry["review_of"] = other
            entry["flag_rate_when_wrong"] = round(sum(flags[True]) / max(1, len(flags[True])), 3)
            entry["flag_rate_when_right"] = round(sum(flags[False]) / max(1, len(flags[False])), 3)
            entry["review_accuracy"] = round(sum(correct(r, t) for r, t in zip(review, tasks)) / len(tasks), 3)
    finally:
        backend.close()
    report["error_correlation"] = {f"{a}~{b}": _phi(errors[a], errors[b])
                                   for i, a in enumerate(models) for b in models[i + 1:]}
    report["wall_s"] = round(time.perf_counter() - start, 1)
    return report


def report_markdown(report: dict[str, Any]) -> str:
    """The measured table: per model, accuracy (standard_reasoner / code_reasoner) and mean output tokens per
    cell, then the reviewer rates and the error correlations."""
    models = list(report["models"])
    cells = list(next(iter(report["models"].values()))["cells"])
    lines = ["| cell | " + " | ".join(f"{m} std / code / tok" for m in models) + " |",
             "|---|" + "---|" * len(models)]
    for cell in cells:
        row = [f"{c['standard']:.2f} / {c['code']:.2f} / {c['tokens_out']:.0f}"
               for c in (report["models"][m]["cells"][cell] for m in models)]
        lines.append(f"| {cell} | " + " | ".join(row) + " |")
    lines.append("| all (std) | " + " | ".join(f"{report['models'][m]['standard_accuracy']:.2f}"
                                               for m in models) + " |")
    lines.append("")
    lines.append("| reviewer | reviews | flags when wrong | flags when right | own answer right |")
    lines.append("|---|---|---|---|---|")
    for m in models:
        r = report["models"][m]
        lines.append(f"| {m} | {r['review_of']} | {r['flag_rate_when_wrong']:.2f} | "
                     f"{r['flag_rate_when_right']:.2f} | {r['review_accuracy']:.2f} |")
    lines.append("")
    lines.append("error correlation (phi, standard_reasoner): " + ", ".join(
        f"{k} {v}" for k, v in report["error_correlation"].items()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="train the pool (cached by config hash) and write its files")
    b.add_argument("out_dir", nargs="?", default=str(DEFAULT_OUT))
    b.add_argument("--quick", action="store_true", help="two 1-layer models, a few steps: seconds, for tests")
    b.add_argument("--vllm-python", default=None, help="the vLLM interpreter written to pool_serving.yaml "
                   "(default: the repository's .venv-vllm/bin/python)")
    m = sub.add_parser("measure", help="measure the served pool through the real backend")
    m.add_argument("out_dir", help="a built pool (its tasks_eval.jsonl)")
    m.add_argument("--endpoints", required=True, help="the endpoint map parasim serve-pool wrote")
    m.add_argument("--per-cell", type=int, default=50, help="eval tasks per domain and level")
    m.add_argument("--json-out", default=None, help="write the report here too")
    args = parser.parse_args(argv)
    if args.command == "build":
        manifest = build(args.out_dir, QUICK if args.quick else POOL, args.vllm_python)
        print(json.dumps({k: manifest[k] for k in ("config_hash", "cached", "train_wall_s_total",
                                                         "train_cpu_s_total", "build_wall_s")}))
    else:
        report = measure(args.out_dir, args.endpoints, args.per_cell)
        if args.json_out:
            atomic_write_json(Path(args.json_out), report)
        print(report_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
