"""ParaOrchText-v0: the ParaOrch-v0 episodes for an LLM manager that writes tool-call text.

Observation: the conversation so far as one string, rendered in the ChatML form Qwen3's chat template
writes (``<|im_start|>role ... <|im_end|>``) and ending with the assistant prompt, so it can be fed to a
Qwen3 / Hermes-format model as is: the system prompt (rules, the pool's models with their published
accuracies, prices and speeds, the JSON tool list; ``parasim.protocol.tool_schema``), the question, then
per turn the manager's text and one ``<tool_response>`` per call with its structured result
(id, tool, model, status, output, tokens, cost, latency, and the reason of a failure). ``info["messages"]``
holds the same conversation as chat messages for other templates (exactly the messages the observation
renders). Each observation extends the previous one by the turn's text, ``<|im_end|>``, and the feedback, so a
trainer can tokenize it incrementally, until one of the episode limits below cuts the conversation.
Characters outside the Basic Multilingual Plane and control characters are replaced by U+FFFD in the
observation (the Text space's character set); parsing always sees the full text.

Chat templates (``tokenizer=``, optionally ``chat_template=``): the rendering above is the default, Qwen3's / Hermes'
form written by hand. Models of other families expect their own template, so with a ``tokenizer`` (a Hugging Face
tokenizer, or a local path ``AutoTokenizer`` loads) the conversation is rendered by
``tokenizer.apply_chat_template(messages, tools=env.tools, add_generation_prompt=True)``, the convention of
``transformers`` (``chat_template=`` is passed on: a Jinja string or the name of one of the tokenizer's templates).
Then the tool list is not in the system prompt (which keeps the rules and the models) but in ``env.tools``, the
JSON schemas of ``parasim.protocol.tool_schema.tool_list``, for the template to place; and each call's result is
its own ``{"role": "tool", "tool_call_id": "call_<id>", "name": <tool>, "content": <the JSON above>}`` message
(``block_<n>`` ids for rejected and unreadable blocks, which have no call id), followed by one ``user`` message
with the turn's notes (rounds left, repairs, responses not shown), so that user and assistant turns alternate
as strict templates require. The manager's turn is its text as written (an assistant message with ``content``
only), since that is what the model generated and the parser reads: a template that renders ``tool_calls`` (Qwen3's
does) would write each call a second time beside the text that holds it. ``tool_call_messages=True`` (with a
tokenizer) gives templates that pair each tool message with a call of the assistant message before it (by
``tool_call_id``) what they need: the assistant message in OpenAI's form, ``content`` its text outside the call
blocks and ``tool_calls`` one ``{"id", "type": "function", "function": {"name", "arguments"}}`` per block, with the
ids of the tool messages that answer them (``call_<id>``, ``block_<n>``); the observation is then the template's
rendering of those calls, which need not repeat the manager's text character for character, so use it for
templates that require the pairing, and the default where a trainer needs the generated tokens as they were.
``render_conversation`` is the one rendering function for both forms; the SFT data (``training.llm.data``) render
through it too. The observation extends the previous one for templates that render a conversation's prefix as a
prefix (ChatML-like templates do; templates that rewrite earlier turns, e.g. by dropping reasoning, do not).
``render_mode="ansi"``: ``render()`` returns the observation, the conversation as text (Gymnasium's ansi mode);
``render_mode="rgb_array"``: the episode board of the core ParaOrch-v0 episode as an RGB image.

Limits, so that no manager text and no tool output grows the observation or ``info["messages"]`` without bound
(constructor options; each is range-checked, and the error names the option, the value and the range):
  - ``max_turn_chars`` (16,384; 1 to 65,536): a manager turn is shown cut after this many characters, with a
    ``[... N more characters truncated]`` marker.
  - ``max_result_chars`` (4,096; 64 to 65,536): each free-text field of one call's feedback (output, reason,
    model) and the repair note are cut after this many characters, with the same marker.
  - ``max_feedback_chars`` (262,144; 8 * max_result_chars + 4,096 to 1,000,000): the tool responses kept in
    the conversation. One turn's feedback never exceeds it (its responses are shown results first, then
    rejected calls, then unreadable blocks, while they fit; a line counts the rest). Over the episode, once
    the turns' feedback together exceeds it, the oldest rounds' responses are replaced by an elision marker.
  - ``max_obs_chars`` (2,000,000; max_turn_chars + max_feedback_chars + 32,768 to 2,000,000): the longest
    observation (the observation space's ``max_length``). Past it the oldest whole turns are dropped: the
    system prompt and the question (first user message) are always kept, then a marker message counting
    the dropped turns, then the most recent turns, so the observation never starts inside a message. The
    question itself is cut (with the marker) only if it would not fit beside the latest turn. With a chat
    template the rendered length is measured, the room for the question leaves out what the template adds
    around the system prompt, the tool list and one turn's messages (measured at reset, where a template that
    cannot render these roles fails), and the marker is appended to the question instead of following it.
Per turn at most ``MAX_ERRORS_SHOWN`` unreadable blocks and as many calls beyond ``max_parallel`` get their
own ``<tool_response>``; a line counts the others.

Action: the manager's text for one turn (Hermes / Qwen3 ``<tool_call>`` blocks; ``parasim.protocol.parser``),
a ``str``: anything else raises TypeError (a caller bug, not model output; ``action_space.contains`` is False
for it too). Any ``str`` is model output and is accepted, also one longer than the action space's
``max_length`` (``ACTION_MAX_CHARS``, the length a sampler draws up to) or outside its character set: it is
parsed in full and shown cut after ``max_turn_chars``.
Up to ``max_parallel`` calls run as one round; the calls beyond are not run and get INVALID_TOOL (the first
``MAX_ERRORS_SHOWN`` one response each, the rest one summary line). Unreadable blocks get FORMAT_ERR (or
INVALID_TOOL for unknown tools or models) with the parser's reason; a turn with no runnable call still uses
up a round. Each round with such a status is one format violation, paid through the reward config's protocol
penalty. ``final_answer`` ends the episode; so does the round limit.

Reward: ParaOrch-v0's: the episode's trajectory row (the lane record's, ``parasim.sim.gather``) scored by
``parasim.compute_rewards`` under ``reward`` (a RewardConfig or preset) on the terminal step, with every component in
``info["reward_components"]``.

Reset options (``reset(options={...})``) go to the engine. With simulated tools they are ParaOrch-v0's:
``task_index`` (a suite row in ``[0, num_tasks)``) and ``task_seed`` (the task's own stream), so equal
``task_index`` / ``task_seed`` give the identical task, with the same question and the same option letters,
while each env's tool calls keep its own seed (GRPO groups; see ``ParaOrchEnv``). A real-tools engine
(``RealEpisodeEngine``) takes ``task_index`` (its task list) or ``task`` and ignores ``task_seed``.
NumPy integers are passed on as ints. ``num_tasks`` and ``task_weights()`` give the valid indices and the
probabilities the engine draws tasks with by itself (uniform over a real engine's task list).

Info: on reset ``task`` (the TaskView), ``messages`` and ``task_index`` / ``benchmark``; on every step ``messages``
(the conversation the observation renders); on a running step ``parsed`` and ``results``; on the terminal step
``reward_components``, ``trajectory``, ``answer``, ``correct``, ``final_answer_text``, ``messages``, and
``task_index`` / ``benchmark`` as ParaOrch-v0 names them (the task played and its index in
``parasim.tasks.suites.BENCHMARKS``; for real engines see ``EpisodeEngineBase.task_info``).

``end_episode()`` ends a running episode at once as one that never answered, for a trainer whose token limit cut
the manager off: the termination model answers from the evidence so far, no round or format violation is added,
``ended_with_final`` is 0, and the step tuple it returns has ``truncated`` True.

One episode core (docs/architecture.md): this env is a translator over ParaOrch-v0's episode (``self.core``, a
``ParaOrchEnv`` over the same call source, ``envs.call_source``), for simulated and real tools alike. Parsed text
becomes an action (one slot per call, in the order written: tool, model, and target = verify for a reviewer, carry
when ``context_from`` names an earlier call, else the fresh question; a ``context_from`` naming no earlier call is a
target the rules reject as FORMAT_ERR, a model outside the pool one they reject as INVALID_TOOL) plus each call's own
text, which real tools run; unreadable blocks and calls past ``max_parallel`` make the action's stop flag
``MALFORMED_ROUND`` (one format violation), and an unreadable block beside ``final_answer`` is counted by
``parasim.sim.rules.malformed_stop``. So the statuses, the accounting (tokens, cost, USD, latency), the vote, the format
violations, the round limit and the termination all come from the compiled rules (``parasim.sim.rules``), exactly as
in ParaOrch-v0: the same seed and the same calls give the same episode, statuses and reward as ParaOrch-v0
(``harness``, as ParaOrch-v0 takes it, sets the simulated generation cap: a call whose output would pass it is
TRUNCATED). This env only writes what the round did as text: a rejected call's reason is the plan's own rule
(``call_i[..., C_RULE]``), a simulated call's output its answer's label (``envs.sim_text``: answers appear as labels
under a per-episode random permutation), a real call's output the tool's text. In simulation the final answer is the
termination model's vote, as in ParaOrch-v0; the manager's ``final_answer`` text is returned in
``info["final_answer_text"]`` (and a real engine's termination model reads it). ``tools="real"`` needs ``engine=``
(for example ``parasim.real.engine.RealEpisodeEngine``), which runs the calls and writes the final answer: any object
with every member of ``parasim.protocol.engine.EpisodeEngine`` (``EpisodeEngineBase`` has the optional ones), else a
TypeError naming the member it lacks. ``pool`` is the prior of the rules (vote weights, the manager's token rates)
and describes the models in the prompt; ``pool=None`` leaves the descriptions out and takes the default pool's prior.
``router_signal`` (as ParaOrch-v0 takes it; simulated tools only) adds a line after the question with each model's
router signal for this question (``router_text``, from the core env's ``router`` key).
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.call_source import SimSource
from envs.paraorch import ParaOrchEnv
from envs.sim_text import SimEpisodeText
from parasim.protocol.engine import EpisodeEngine, TaskView
from parasim.protocol.parser import ParsedRound, block_call, parse_tool_calls, text_outside_calls
from parasim.protocol.schema import (
    MAX_PARALLEL,
    MAX_ROUNDS,
    RAN_STATUSES,
    CallResult,
    Status,
    Tool,
    ToolCall,
)
from parasim.protocol.tool_schema import render_system_prompt, tool_list
from parasim.sim import NUM_TARGETS, TARGET_CARRY, TARGET_QUESTION, TARGET_VERIFY
from parasim.sim.router_signal import ROUTER_KEY
from parasim.sim.rules import (
    MALFORMED_ROUND,
    RULE_BAD_TARGET,
    RULE_BUDGET,
    RULE_NOTHING_TO_CARRY,
    RULE_NOTHING_TO_REVIEW,
    RULE_REVIEWER_TARGET,
    RULE_SLOT_NOT_ALLOWED,
    RULE_UNKNOWN_MODEL,
    RULE_UNKNOWN_TOOL,
    malformed_stop,
)
from parasim.sim.state import empty_action, set_action_slot
from parasim.tasks.questions import Question

CHARSET = "\t\n\r" + "".join(map(chr, range(0x20, 0xD800))) + "".join(map(chr, range(0xE000, 0xFFFE)))
_ALLOWED = frozenset(CHARSET)
OBS_MAX_CHARS = 2_000_000  # the largest max_obs_chars (and its default)
ACTION_MAX_CHARS = 65_536  # the action space's max_length, also the largest max_turn_chars and max_result_chars
MAX_ERRORS_SHOWN = 16  # per turn: unreadable blocks, and calls beyond max_parallel, shown one response each
MAX_FEEDBACK_CHARS = 1_000_000  # the largest max_feedback_chars
HEAD_RESERVE = 32_768  # what max_obs_chars keeps beyond the latest turn: system prompt, question and markers
MIN_QUESTION_CHARS = 1_024  # the least room for the question that reset() accepts
_OVERHEAD = 1_024  # ChatML wrapping, the cut marker message and the truncation markers around the latest turn
_NOTE_RESERVE = 256  # room kept in one turn's feedback for the "more tool responses not shown" line
_GENERATION_PROMPT = "<|im_start|>assistant\n"
_TOOL_BLOCK = "\n\n# Tools\n"  # where render_system_prompt's tool list starts (left to the template's tools=)


def clip(text: str, limit: int) -> str:
    """``text`` cut after ``limit`` characters with a marker saying how many were cut (unchanged if it fits)."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"[... {len(text) - limit} more characters truncated]"


def _message_chars(role: str, content: str) -> int:
    """The length of one message rendered by ``render_chatml``."""
    return len(role) + len(content) + len("<|im_start|>\n<|im_end|>\n")


def _check_limit(name: str, value: Any, low: int, high: int, why: str = "") -> int:
    """``value`` if it is an int in ``[low, high]``; else an error naming the option, the value and the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int in [{low}, {high}]{why}, got {value!r} ({type(value).__name__})")
    if not low <= value <= high:
        raise ValueError(f"{name}: expected an int in [{low}, {high}]{why}, got {value}")
    return value


@dataclass
class _Turn:
    """One manager turn as shown: its text, and the tool responses answering it (None after ``final_answer``).

    ``feedback`` is the responses and notes as one user message (the default rendering, and the length that
    ``max_feedback_chars`` bounds); ``tool_messages`` holds the same as role "tool" messages and a notes message
    for chat templates (empty without one, and once the round's responses are elided).
    """

    text: str
    feedback: str | None
    round: int
    elided: bool = False
    tool_messages: list[dict[str, str]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] | None = None  # ``tool_call_messages``: the turn's calls, OpenAI style
    content: str = ""  # ``tool_call_messages``: its text outside the calls

    @property
    def chars(self) -> int:
        """Its length in the default rendering (the assistant message and the feedback message)."""
        own = _message_chars("assistant", self.text)
        return own if self.feedback is None else own + _message_chars("user", self.feedback)

    def messages(self, tool_role: bool = False) -> list[dict[str, str]]:
        """Its chat messages, as ``info["messages"]`` holds them: the feedback as role "tool" messages when
        ``tool_role`` (chat templates) and the round is not elided, else as one user message; with ``tool_calls``
        (and tool messages to pair them with, or no feedback) the assistant message is in OpenAI's form."""
        structured = tool_role and self.tool_calls is not None and (self.feedback is None or bool(self.tool_messages))
        out: list[dict[str, Any]] = [{"role": "assistant", "content": self.content, "tool_calls": self.tool_calls}
                                     if structured else {"role": "assistant", "content": self.text}]
        if self.feedback is None:
            return out
        if tool_role and self.tool_messages:
            return out + self.tool_messages
        return out + [{"role": "user", "content": self.feedback}]


class ChatText(spaces.Text):
    """A Gymnasium Text space over ``CHARSET`` whose repr does not print its 63,000 characters."""

    def __repr__(self) -> str:
        return f"ChatText({self.min_length}, {self.max_length}, charset=BMP without surrogates and controls)"


def to_charset(text: str) -> str:
    """``text`` with every character outside ``CHARSET`` replaced by U+FFFD."""
    if all(c in _ALLOWED for c in text):
        return text
    return "".join(c if c in _ALLOWED else "\ufffd" for c in text)


def router_text(models: Sequence[str], signal: np.ndarray) -> str:
    """The question message's router line: each model's router signal for this question (standard normal; a
    router expects a model to do better here than on an average question in proportion to it)."""
    shown = ", ".join(f"{m} {float(v):+.2f}" for m, v in zip(models, signal))
    return f"\nRouter signal (higher: the model is predicted to do better on this question than on average): {shown}"


def render_chatml(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """Messages in Qwen3's ChatML form, ending with the assistant generation prompt (unless told not to)."""
    body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return body + _GENERATION_PROMPT if add_generation_prompt else body


def render_conversation(messages: Sequence[dict[str, Any]], tokenizer: Any = None,
                        tools: Sequence[dict[str, Any]] | None = None, chat_template: str | None = None,
                        add_generation_prompt: bool = True) -> str:
    """The conversation as the model reads it: ``render_chatml`` without a tokenizer (the Hermes / Qwen3 default,
    whose system prompt already lists the tools), else the tokenizer's chat template (``chat_template`` if given)
    with ``tools`` as JSON schemas. The text env and the SFT data render through this one function, so what a
    model is fine-tuned on and what it later reads cannot differ in form."""
    if tokenizer is None:
        if chat_template is not None or tools:
            raise ValueError("chat_template / tools: the default (Hermes) rendering has the tool list in the system "
                             "prompt and no template; pass tokenizer= to render through a chat template")
        return render_chatml(messages, add_generation_prompt)
    if not messages:
        return ""
    try:
        return tokenizer.apply_chat_template(list(messages), tools=list(tools) if tools else None,
                                             chat_template=chat_template, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    except Exception as err:  # a template's own raise_exception() or a missing template
        raise ValueError(f"chat_template: {type(tokenizer).__name__}.apply_chat_template failed on messages with "
                         f"roles {sorted({m.get('role') for m in messages})}: {err}") from err


def load_tokenizer(tokenizer: Any, chat_template: str | None) -> Any:
    """``tokenizer`` as an object with ``apply_chat_template`` (a str or path is loaded with ``AutoTokenizer``),
    checked to have a template to render with; None stays None (the default rendering)."""
    if chat_template is not None and not isinstance(chat_template, str):
        raise TypeError(f"chat_template: expected None or a str (a Jinja template or a template name), got "
                        f"{type(chat_template).__name__}")
    if tokenizer is None:
        if chat_template is not None:
            raise ValueError(f"chat_template: needs tokenizer= (the template renders through the tokenizer's "
                             f"apply_chat_template), got chat_template={chat_template[:80]!r} and tokenizer=None")
        return None
    if isinstance(tokenizer, (str, os.PathLike)):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    if not callable(getattr(tokenizer, "apply_chat_template", None)):
        raise TypeError(f"tokenizer: expected None, a path, or a tokenizer with apply_chat_template, got "
                        f"{type(tokenizer).__name__}")
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"tokenizer: {type(tokenizer).__name__} has no chat_template; pass chat_template= (a Jinja "
                         "string) or leave tokenizer=None for the default Hermes rendering")
    return tokenizer


def describe_models(pool: Any) -> dict[str, str]:
    """One line per pool model for the system prompt: published accuracies, price and speed ({} if no pool)."""
    from parasim.pools.pool import load_pool
    from parasim.tasks.suites import BENCHMARKS

    try:
        spec = load_pool(pool)
    except ValueError:  # a real-tools engine may run models no pool file describes
        return {}
    out = {}
    for m, name in enumerate(spec.model_names[:-1]):
        acc = [f"{b.name} {100 * spec.accuracy_target[m, j]:.0f}%" for j, b in enumerate(BENCHMARKS)
               if np.isfinite(spec.accuracy_target[m, j])]
        sr = int(Tool.STANDARD_REASONER)
        price = f"${spec.price_in[sr, m] * 1e6:.2f}/${spec.price_out[sr, m] * 1e6:.2f} per M tokens in/out"
        speed = f"about {1.0 / spec.lat_per_tok[sr, m]:.0f} tokens/s" if spec.lat_per_tok[sr, m] > 0 else ""
        out[name] = "; ".join(x for x in (", ".join(acc), price, speed) if x)
    return out


# the rejection reason the manager reads for each rule of the plan (``parasim.sim.rules.slot_rule``); {tool}: the
# call's tool, {reviewer}: the call's tool if it reviews, else the spec's first reviewer; the unknown-model reason also
# lists the models
_REASONS = {
    RULE_UNKNOWN_TOOL: "tool not allowed in this slot",
    RULE_SLOT_NOT_ALLOWED: "tool not allowed in this slot",
    RULE_NOTHING_TO_REVIEW: "{tool} needs an answer to review; none exists yet",
    RULE_BAD_TARGET: "context_from names no earlier call",
    RULE_NOTHING_TO_CARRY: "context_from needs an earlier answer to carry; none exists yet",
    RULE_REVIEWER_TARGET: "{reviewer} verifies the leading answer; other tools take the question or carry",
    RULE_BUDGET: "the token budget is spent",
}


class ParaOrchTextEnv(gym.Env[str, str]):
    """ParaOrchText-v0 (see the module docstring): a translator over ParaOrch-v0's episode, whose call source (the
    simulator, or real tools) and compiled rules decide every status, figure, vote and reward; this env parses the
    manager's text into those actions and writes what they did as the conversation."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 1}

    def __init__(self, pool: Any = "paramanager", suite: Any = "paramanager", max_rounds: int = MAX_ROUNDS,
                 max_parallel: int = MAX_PARALLEL, serial: bool = False, reward: Any = "paramanager",
                 tools: str = "sim", engine: EpisodeEngine | None = None, token_budget: float | None = None,
                 seed: int | None = None, max_turn_chars: int = 16_384, max_result_chars: int = 4_096,
                 max_feedback_chars: int = 262_144, max_obs_chars: int = OBS_MAX_CHARS,
                 render_mode: str | None = None, tokenizer: Any = None, chat_template: str | None = None,
                 harness: dict[str, Any] | None = None, tool_call_messages: bool = False,
                 router_signal: Any = None) -> None:
        if render_mode not in (None, "ansi", "rgb_array"):
            raise ValueError(f"render_mode: expected None, 'ansi' or 'rgb_array', got {render_mode!r}")
        if not isinstance(tool_call_messages, bool):
            raise TypeError(f"tool_call_messages: expected a bool, got {type(tool_call_messages).__name__}")
        if tool_call_messages and tokenizer is None:
            raise ValueError("tool_call_messages=True needs tokenizer=: only a chat template renders role 'tool' "
                             "messages and assistant tool_calls (the default ChatML rendering shows the manager's "
                             "text)")
        self.tokenizer = load_tokenizer(tokenizer, chat_template)
        self.chat_template = chat_template
        self.tool_call_messages = tool_call_messages
        self.max_turn_chars = _check_limit("max_turn_chars", max_turn_chars, 1, ACTION_MAX_CHARS)
        self.max_result_chars = _check_limit("max_result_chars", max_result_chars, 64, ACTION_MAX_CHARS)
        self.max_feedback_chars = _check_limit(
            "max_feedback_chars", max_feedback_chars, 8 * self.max_result_chars + 4_096, MAX_FEEDBACK_CHARS,
            f" (the low end is 8 * max_result_chars + 4096, so one call's response fits; max_result_chars="
            f"{self.max_result_chars})")
        self.max_obs_chars = _check_limit(
            "max_obs_chars", max_obs_chars, self.max_turn_chars + self.max_feedback_chars + HEAD_RESERVE,
            OBS_MAX_CHARS, f" (the low end is max_turn_chars + max_feedback_chars + {HEAD_RESERVE}, so the latest "
            f"turn fits beside the system prompt and the question; max_turn_chars={self.max_turn_chars}, "
            f"max_feedback_chars={self.max_feedback_chars})")
        if tools == "real" and engine is None:
            raise NotImplementedError(
                "ParaOrchText-v0 with tools='real' needs engine=: an EpisodeEngine over real tools, e.g. "
                "parasim.real.engine.RealEpisodeEngine(backend, tasks) with an OpenAI-compatible endpoint per "
                "pool model, the python sandbox and the search retriever. Use tools='sim' for the simulator.")
        # pool=None: no model descriptions in the prompt; the rules still need a prior for the vote weights and the
        # manager's token rates, the default pool's
        self.core = ParaOrchEnv(pool="paramanager" if pool is None else pool, suite=suite, max_rounds=max_rounds,
                                max_parallel=max_parallel,
                                serial=serial, reward=reward, tools=tools, token_budget=token_budget, seed=seed,
                                engine=engine, harness=harness, router_signal=router_signal,
                                render_mode="rgb_array" if render_mode == "rgb_array" else None)
        source = self.core.source
        self.tool_spec = source.tool_spec
        self.max_rounds, self.max_parallel = int(source.max_rounds), int(source.slots)
        self.reward_config = self.core.reward_config
        self.render_mode = render_mode
        self._sim_text = SimEpisodeText(self.core.sim) if isinstance(source, SimSource) else None
        self._descriptions = describe_models(pool) if pool is not None else {}
        self.model_names: tuple[str, ...] = tuple(source.model_names)
        self.system_prompt = ""
        self.tools: list[dict[str, Any]] | None = None  # the tool schemas a chat template renders (None: default)
        self._build_prompt()
        self.observation_space = ChatText(self.max_obs_chars, min_length=0, charset=CHARSET)
        self.action_space = ChatText(ACTION_MAX_CHARS, min_length=0, charset=CHARSET)
        self.messages: list[dict[str, str]] = []
        self._head: list[dict[str, str]] = []
        self._turns: list[_Turn] = []
        self._dropped = 0
        self._feedback_chars = 0
        self._rendered = ""
        self._task: TaskView | None = None
        self._rounds = 0
        self._next_id = 0
        self._engine_index: dict[int, int] = {}  # a run call's id -> its index among the calls the engine ran
        self._engine_calls = 0
        self._done = True

    @property
    def engine(self) -> EpisodeEngine:
        """The real-tools engine of a ``tools="real"`` env."""
        return self.core.engine

    @property
    def labels(self) -> list[str]:
        """A simulated episode's answer labels (answer id -> label; id 0 is the gold answer); [] with real tools."""
        return self._sim_text.labels if self._sim_text is not None else []

    @property
    def question(self) -> Question | None:
        """A simulated episode's question (its text, the options by answer id, the gold answer); None with real
        tools (their task is ``reset``'s ``info["task"]``)."""
        return self._sim_text.question if self._sim_text is not None else None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        obs, info = self.core.reset(seed=seed, options=options)
        task = info["task"] if self._sim_text is None else self._sim_text.begin(options or {})
        self._task = task
        self._head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        if self.tokenizer is None:
            fixed = sum(_message_chars(m["role"], m["content"]) for m in self._head)
        else:
            head = [*self._head, {"role": "user", "content": ""}]
            fixed = len(self._render(head)) + self._template_overhead(head)
        router = router_text(self.model_names, obs[ROUTER_KEY]) if ROUTER_KEY in obs else ""
        room = self.max_obs_chars - self.max_turn_chars - self.max_feedback_chars - _OVERHEAD - fixed - len(router)
        if room < MIN_QUESTION_CHARS:
            raise ValueError(
                f"max_obs_chars: {self.max_obs_chars} leaves {room} characters for the question beside the system "
                f"prompt ({len(self.system_prompt)} characters) and the latest turn (max_turn_chars="
                f"{self.max_turn_chars}, max_feedback_chars={self.max_feedback_chars}); expected max_obs_chars in "
                f"[{self.max_obs_chars - room + MIN_QUESTION_CHARS}, {OBS_MAX_CHARS}] (or lower max_turn_chars "
                "and max_feedback_chars)")
        self._head.append({"role": "user", "content": to_charset(clip(self._question(task), room) + router)})
        self._turns, self._dropped, self._feedback_chars = [], 0, 0
        self.messages = list(self._head)
        self._rendered = self._render(self.messages)
        self._rounds = self._next_id = self._engine_calls = 0
        self._engine_index = {}
        self._done = False
        return self._observation(), {"task": task, "messages": list(self.messages), **self.core.source.task_info()}

    @property
    def num_tasks(self) -> int | None:
        """The source's number of tasks (valid ``task_index`` values are ``0 .. num_tasks - 1``); None when it has no
        task list (a real engine's ``num_tasks`` of 0)."""
        return int(self.core.num_tasks) or None

    def task_weights(self) -> np.ndarray:
        """Each task index's probability when the source draws tasks itself (float64[num_tasks]): the simulator's
        suite weights, uniform over a real engine's task list (a ValueError for an engine without one)."""
        return np.asarray(self.core.task_weights(), np.float64)

    def _build_prompt(self) -> None:
        """System prompt from the source's model ids; with a chat template the tool list goes to ``self.tools``
        instead, for the template to render."""
        models = {m: self._descriptions.get(m, "") for m in self.model_names}
        self.system_prompt = render_system_prompt(models, max_parallel=self.max_parallel, max_rounds=self.max_rounds,
                                                  tools=self.tool_spec) if models else ""
        if self.tokenizer is not None and models:
            cut = self.system_prompt.find(_TOOL_BLOCK)
            if cut < 0:
                raise RuntimeError("render_system_prompt no longer has a '# Tools' section to leave to the template")
            self.system_prompt = self.system_prompt[:cut]
            self.tools = tool_list(list(models), self.tool_spec)

    def _render(self, messages: Sequence[dict[str, Any]]) -> str:
        """``messages`` as the observation shows them (``render_conversation`` with this env's template)."""
        return render_conversation(messages, self.tokenizer, self.tools, self.chat_template)

    def _template_overhead(self, head: list[dict[str, str]]) -> int:
        """What the chat template writes around one turn's messages beyond their contents: a turn with as many
        tool messages as a turn can show (and, with ``tool_call_messages``, as many calls they answer), all contents
        and arguments empty, rendered after ``head``."""
        call_id, name = f"block_{10**9}", "knowledge_searcher"
        probe = [{"role": "tool", "tool_call_id": call_id, "name": name, "content": ""}
                 for _ in range(self.max_parallel + 2 * MAX_ERRORS_SHOWN)]
        assistant: dict[str, Any] = {"role": "assistant", "content": ""}
        if self.tool_call_messages:
            assistant["tool_calls"] = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
                                       for _ in probe]
        turn = [assistant, *probe, {"role": "user", "content": ""}]
        return len(self._render(head + turn)) - len(self._render(head))

    @staticmethod
    def _question(task: TaskView) -> str:
        if task.options and not any(o in task.question for o in task.options):
            return task.question + "\nOptions: " + ", ".join(task.options)
        return task.question

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"action: expected a str (the manager's text; the action space is a Text space), "
                            f"got {type(action).__name__}")
        if self._done:
            raise RuntimeError("ParaOrchText-v0: the episode is over; call reset() before step()")
        parsed = parse_tool_calls(action, self.model_names or None, self.tool_spec)
        shown = to_charset(clip(action, self.max_turn_chars))
        if parsed.is_final:
            if parsed.errors:
                malformed_stop(self.core.source.lanes, 0)
            calls = ([self._call_entry(f"block_{i}", None, body) for i, body in enumerate(parsed.bodies)]
                     if self.tool_call_messages else None)
            self._add_turn(_Turn(shown, None, self._rounds, tool_calls=calls,
                                 content=text_outside_calls(shown, parsed.bodies)))
            stop = empty_action(self.max_parallel, self.tool_spec.num_tools, stop=True)
            return self._terminate(parsed, self.core.turn(stop, manager_answer=parsed.final_answer),
                                   parsed.final_answer)
        run, extra = parsed.calls[: self.max_parallel], parsed.calls[self.max_parallel:]
        action_row, written = self._translate(run, malformed=bool(parsed.errors) or bool(extra))
        first_id = self._next_id
        self._next_id = first_id + len(run)
        self._rounds += 1
        step = self.core.turn(action_row, calls=written)
        results = self._results(run, step[4], first_id)
        feedback, tool_messages, calls = self._feedback(parsed, run, results, extra, first_id)
        self._add_turn(_Turn(shown, feedback, self._rounds, tool_messages=tool_messages, tool_calls=calls,
                             content=text_outside_calls(shown, parsed.bodies) if calls is not None else ""))
        if step[2]:  # the round limit ended the episode
            return self._terminate(parsed, step, None)
        return self._observation(), 0.0, False, False, {"parsed": parsed, "results": results,
                                                        "messages": list(self.messages)}

    def _translate(self, run: list[ToolCall], malformed: bool) -> tuple[np.ndarray, dict[int, ToolCall]]:
        """The round's action row for ``run`` (one slot per call, in order; the stop flag ``MALFORMED_ROUND`` when the
        turn also broke the protocol outside its calls) and the calls as the engine runs them: the manager's own
        text, with ``context_from`` (an id the manager read) as the index of that call among the engine's calls."""
        action = empty_action(self.max_parallel, self.tool_spec.num_tools)
        if malformed:
            action[0] = MALFORMED_ROUND
        written = {}
        for k, call in enumerate(run):
            set_action_slot(action, k, *self._slot(call))
            target = self._engine_index.get(call.target, -1) if call.target >= 0 else -1
            written[k] = ToolCall(call.tool, call.model, call.subtask, target)
        return action, written

    def _slot(self, call: ToolCall) -> tuple[int, int, int]:
        """(tool, model, target) of a parsed call: a reviewer verifies the lead; a call with ``context_from`` naming
        an earlier call carries the lead and its context, one naming no earlier call gets a target out of range
        (FORMAT_ERR by the rules); a model outside the pool gets a model out of range (INVALID_TOOL)."""
        names = self.model_names
        model = names.index(call.model) if call.model in names else (len(names) if call.tool.is_agent else 0)
        tool = self.tool_spec.tool_def(call.tool)
        if tool is not None and tool.behaviour == "reviewer":
            target = TARGET_VERIFY
        elif call.target < 0:
            target = TARGET_QUESTION
        else:
            target = TARGET_CARRY if call.target < self._next_id else NUM_TARGETS
        return int(call.tool), model, target

    def _results(self, run: list[ToolCall], info: dict[str, Any], first_id: int) -> list[CallResult]:
        """Each run call's result as the round left it in the slot records (status, tokens, cost, USD, latency),
        with the output a real tool wrote or a simulated call's words, and the rules' reason for a call they
        rejected. Counts the engine's calls, so later ``context_from`` ids find theirs."""
        ran = dict(zip(info.get("slots", ()), info.get("results", ())))
        out = []
        for call, rec in zip(run, self.core.source.round_records()):
            status, k = rec["status"], rec["slot"]
            if k in ran:
                self._engine_index[first_id + k] = self._engine_calls
                self._engine_calls += 1
            if status not in RAN_STATUSES:
                out.append(CallResult(status, detail=self._reason(rec["rule"], int(call.tool))))
                continue
            real = ran.get(k)
            if real is not None:
                output, detail, extra = real.output, real.detail, real.extra
            else:
                assert self._sim_text is not None
                output = self._sim_text.output(rec["kind"], rec["answer"])
                detail = self._sim_text.failure(status, int(call.tool))
                extra = {"answer_id": rec["answer"], "kind": rec["kind"]}
            out.append(CallResult(status, output=output, tokens_in=int(rec["tokens_in"] + 0.5),
                                  tokens_out=int(rec["tokens_out"] + 0.5), cost_units=rec["cost_units"],
                                  usd=rec["usd"], latency_s=rec["latency_s"], detail=detail, extra=extra))
        return out

    def _reason(self, rule: int, tool: int) -> str:
        """Why the rules rejected a call of ``tool`` without running it, in the text protocol's words."""
        if rule == RULE_UNKNOWN_MODEL:
            return f"unknown model; models: {', '.join(self.model_names)}"
        spec = self.tool_spec
        name = spec.names[tool] if 0 <= tool < spec.num_tools else f"tool #{tool}"
        reviewers = [spec.names[t] for t in spec.with_behaviour("reviewer")]
        reviewer = name if tool in spec.with_behaviour("reviewer") or not reviewers else reviewers[0]
        return _REASONS.get(rule, "").format(tool=name, reviewer=reviewer)

    def _text(self, text: str) -> str:
        """A free-text feedback field: cut after ``max_result_chars``, in the observation's character set (so that
        JSON escapes at most doubles its length)."""
        return to_charset(clip(text, self.max_result_chars))

    def _feedback(self, parsed: ParsedRound, run: list[ToolCall], results: list[CallResult], extra: list[ToolCall],
                  first_id: int) -> tuple[str, list[dict[str, str]], list[dict[str, Any]] | None]:
        """The turn's ``<tool_response>`` blocks in the order the manager wrote them, then notes; at most
        ``max_feedback_chars`` characters (results of run calls have priority over rejected or unreadable ones).
        With a chat template also the same as role "tool" messages and a notes message (else an empty list), and
        with ``tool_call_messages`` the assistant's ``tool_calls`` that those messages answer, id for id (a turn
        without any block has no call to answer: its error goes to the notes message); else None."""
        ran: list[tuple[int, dict[str, Any]]] = []
        for j, (call, res) in enumerate(zip(run, results)):
            entry: dict[str, Any] = {"id": first_id + j, "tool": call.tool.wire_name}
            if call.tool.is_agent:
                entry["model"] = self._text(call.model)
            entry.update(status=res.status.name, output=self._text(res.output), tokens_in=res.tokens_in,
                         tokens_out=res.tokens_out, cost_units=round(res.cost_units, 4), usd=round(res.usd, 6),
                         latency_s=round(res.latency_s, 3))
            if res.detail:
                entry["reason"] = self._text(res.detail)
            ran.append((parsed.blocks[j], entry))
        rejected = [(parsed.blocks[self.max_parallel + j], {
            "tool": call.tool.wire_name, "status": Status.INVALID_TOOL.name,
            "reason": f"more than max_parallel={self.max_parallel} calls in one turn; this call was not run"})
            for j, call in enumerate(extra[:MAX_ERRORS_SHOWN])]
        unreadable = [(err.block, {"block": err.block, "status": err.status.name, "reason": self._text(err.reason)})
                      for err in parsed.errors[:MAX_ERRORS_SHOWN]]
        notes: list[str] = []
        if len(parsed.errors) > MAX_ERRORS_SHOWN:
            notes.append(f"({len(parsed.errors) - MAX_ERRORS_SHOWN} more unreadable blocks not shown)")
        if len(extra) > MAX_ERRORS_SHOWN:
            notes.append(f"{len(extra) - MAX_ERRORS_SHOWN} further calls ignored ({Status.INVALID_TOOL.name}, not "
                         f"run): at most max_parallel={self.max_parallel} calls per round.")
        if parsed.repairs:
            notes.append(self._text("Note: repaired your tool-call format (" + "; ".join(parsed.repairs) + ")."))
        notes.append(f"Rounds left: {self.max_rounds - self._rounds}.")
        room = self.max_feedback_chars - sum(len(n) + 1 for n in notes) - _NOTE_RESERVE
        shown: list[tuple[int, str, dict[str, str]]] = []
        for block, entry in ran + rejected + unreadable:
            body = json.dumps(entry, ensure_ascii=False)
            response = f"<tool_response>\n{body}\n</tool_response>"
            room -= len(response) + 1
            if room < 0:
                break
            message = {"role": "tool", "tool_call_id": f"call_{entry['id']}" if "id" in entry else f"block_{block}"}
            if "tool" in entry:
                message["name"] = entry["tool"]
            shown.append((block, response, {**message, "content": body}))
        hidden = len(ran) + len(rejected) + len(unreadable) - len(shown)
        if hidden:
            notes.insert(0, f"({hidden} more tool responses not shown: one turn's feedback is limited to "
                            f"max_feedback_chars={self.max_feedback_chars} characters)")
        shown.sort(key=lambda e: e[0])
        text = "\n".join([response for _, response, _ in shown] + notes)
        if self.tokenizer is None:
            return text, [], None
        if not self.tool_call_messages:
            return text, [message for _, _, message in shown] + [{"role": "user", "content": "\n".join(notes)}], None
        calls, answers, loose = [], [], []
        for block, response, message in shown:
            if block < len(parsed.bodies):
                calls.append(self._call_entry(message["tool_call_id"], message.get("name"), parsed.bodies[block]))
                answers.append(message)
            else:
                loose.append(response)
        return text, answers + [{"role": "user", "content": "\n".join(loose + notes)}], calls

    def _call_entry(self, call_id: str, tool: str | None, body: str) -> dict[str, Any]:
        """One block as an assistant ``tool_calls`` entry: the tool the rules read (else the name the block gives,
        else ``"unreadable"``) and its arguments as JSON text, bounded like a tool result."""
        name, arguments = block_call(body)
        return {"id": call_id, "type": "function",
                "function": {"name": tool or name or "unreadable", "arguments": self._text(arguments)}}

    def _add_turn(self, turn: _Turn) -> None:
        """Append a turn, then keep the conversation within its limits: past ``max_feedback_chars`` the oldest
        rounds' tool responses are elided, past ``max_obs_chars`` the oldest whole turns are dropped."""
        self._turns.append(turn)
        if turn.feedback is not None:
            self._feedback_chars += len(turn.feedback)
        for old in self._turns[:-1]:
            if self._feedback_chars <= self.max_feedback_chars:
                break
            if old.feedback is not None and not old.elided:
                self._feedback_chars -= len(old.feedback)
                old.feedback = (f"[tool responses of round {old.round} elided ({len(old.feedback)} characters): the "
                                f"conversation keeps at most max_feedback_chars={self.max_feedback_chars} characters "
                                "of tool responses, the latest ones]")
                old.elided = True
                old.tool_messages = []
        if self.tokenizer is None:
            fixed = sum(_message_chars(m["role"], m["content"]) for m in self._head) + len(_GENERATION_PROMPT)
            turns = sum(t.chars for t in self._turns)
            while len(self._turns) > 1 and fixed + self._cut_marker_chars() + turns > self.max_obs_chars:
                turns -= self._drop_oldest().chars
            self.messages = list(self._head) + self._cut_marker() + [m for t in self._turns for m in t.messages()]
            self._rendered = render_chatml(self.messages)
            return
        while True:  # a template's length is measured: render, and drop the oldest turn while it does not fit
            self.messages = self._template_messages()
            self._rendered = self._render(self.messages)
            if len(self._rendered) <= self.max_obs_chars or len(self._turns) == 1:
                break
            self._drop_oldest()
        if len(self._rendered) > self.max_obs_chars:
            raise RuntimeError(
                f"max_obs_chars: the chat template renders the system prompt, the question and the latest turn in "
                f"{len(self._rendered)} characters, over max_obs_chars={self.max_obs_chars}: it writes more around "
                "the messages' contents than reset() measured with empty contents")

    def _drop_oldest(self) -> _Turn:
        """Remove the oldest kept turn (past ``max_obs_chars``) and count it for the cut marker."""
        old = self._turns.pop(0)
        if old.feedback is not None and not old.elided:
            self._feedback_chars -= len(old.feedback)
        self._dropped += 1
        return old

    def _template_messages(self) -> list[dict[str, str]]:
        """The messages a chat template renders: the head, with the cut marker appended to the question (two user
        messages in a row would break templates that require user and assistant turns to alternate), then the
        turns with their results as role "tool" messages."""
        head = list(self._head)
        marker = self._cut_marker()
        if marker:
            head[-1] = {"role": "user", "content": head[-1]["content"] + "\n\n" + marker[0]["content"]}
        return head + [m for t in self._turns for m in t.messages(tool_role=True)]

    def _cut_marker(self) -> list[dict[str, str]]:
        """The message standing for the dropped turns, between the question and the kept turns (none if none)."""
        if not self._dropped:
            return []
        return [{"role": "user", "content": f"[{self._dropped} earlier turns not shown: the observation is limited "
                 f"to max_obs_chars={self.max_obs_chars} characters and keeps the system prompt, the question and "
                 "the latest turns]"}]

    def _cut_marker_chars(self) -> int:
        """The rendered length of ``_cut_marker()``."""
        return sum(_message_chars(m["role"], m["content"]) for m in self._cut_marker())

    def end_episode(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """End the running episode now, as one that never answered: for a trainer whose token limit cut the manager
        off mid-episode (playing empty turns to the round limit instead would charge a format violation per turn).
        The termination model answers from the evidence so far, as at the round limit; no round and no format
        violation is added, and ``ended_with_final`` is 0. Returns the terminal step's tuple (observation, reward,
        terminated False, truncated True, info with ``reward_components``), as ``step`` does."""
        if self._done:
            raise RuntimeError("ParaOrchText-v0: the episode is over; call reset() before end_episode()")
        obs, reward, _terminated, _truncated, info = self._terminate(ParsedRound(), self.core.cut(), None)
        return obs, reward, False, True, info

    def _terminate(self, parsed: ParsedRound, step: tuple[Any, float, bool, bool, dict[str, Any]],
                   final_text: str | None) -> tuple[str, float, bool, bool, dict]:
        """The terminal step from ParaOrch-v0's: its reward and components, trajectory row and task info, with the
        answer as this env shows it."""
        _obs, reward, _terminated, _truncated, core_info = step
        self._done = True
        if self._sim_text is not None:
            answer = self._sim_text.label(int(self.core.sim.final_answers()[0]))
            correct = bool(core_info["trajectory"]["outcome"] >= 1.0)
        else:
            answer, correct = core_info["answer"], core_info["correct"]
        info = {"parsed": parsed, "reward_components": {k: float(v) for k, v in core_info["reward_components"].items()},
                "trajectory": core_info["trajectory"], "answer": answer, "correct": correct,
                "final_answer_text": final_text, "messages": list(self.messages),
                **self.core.source.task_info()}
        return self._observation(), float(reward), True, False, info

    def _observation(self) -> str:
        return self._rendered

    def render(self) -> str | np.ndarray | None:
        """With ``render_mode="ansi"``, the conversation as text: the current observation; with ``"rgb_array"``, the
        episode board of ParaOrch-v0's core as an image (calls and statuses, candidates, evidence, budgets: the same
        board the structured env draws, since the episode is the same)."""
        if self.render_mode == "rgb_array":
            return self.core.render()
        return self._rendered if self.render_mode == "ansi" else None
