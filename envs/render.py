"""The episode board of ParaOrch-v0: what ``render()`` shows, as text (``"ansi"``) or as an image (``"rgb_array"``).

One definition for the simulated env, its vector env and the real-tools env: each passes a ``Board`` (its current
observation, the recent rounds' calls as ``RoundRecord``s, and what only it knows: the question text, the candidates'
answers, how the episode ended), and ``render_board`` lays out the same lines for both modes. The image draws those
lines in a monospace font (DejaVu Sans Mono, shipped with matplotlib) with Pillow, a dependency of matplotlib; its
size is fixed per env, as video recorders need frames of one shape, and sized to what a board holds: the summary
lines and a window of the most recent ``IMAGE_CALL_ROWS`` call rows (fewer when ``max_rounds`` times the slots is
less), the oldest shown rows dropped first, so a frame is not a column of blank call rows (at the default 12 rounds
of 4 slots the image held 48 call rows, most of them blank in any episode).

Only the last ``SHOWN_ROUNDS`` rounds are kept and shown (the envs keep that bounded history only when a render mode
is set), so the board's size does not grow with ``max_rounds``. Simulated answers are ids (0 is the gold answer),
real ones are the models' answers.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from envs.render_modes import RENDER_MODES
from parasim.protocol.schema import Domain, Status
from parasim.sim.state import action_slot
from parasim.tasks.suites import NUM_ANSWERS
from parasim.tools.spec import ToolSpec, default_tool_spec

SHOWN_ROUNDS = 12  # rounds of calls kept and shown (the default max_rounds)
TARGET_NAMES = ("question", "carry", "verify")
COLUMNS = 112  # characters per image line (longer text lines are cut there)
LABEL_CHARS = 40  # longest answer text shown (candidates, final answer)
FIXED_LINES = 13  # board lines besides the call rows: 4 header lines, 5 of candidates, evidence, ending, 2 call headers
IMAGE_CALL_ROWS = 12  # call rows the image shows, the most recent (three full rounds at K = 4)
FONT_PX, LINE_PX, MARGIN_PX = 11, 14, 8
COLOURS = {"head": (20, 40, 120), "text": (20, 20, 20), "ok": (0, 110, 40), "fail": (180, 20, 20),
           "dim": (120, 120, 120)}
BACKGROUND = (250, 250, 246)

Line = tuple[str, str]  # text, colour key
# what the simulated envs keep per round (cheap on the step): round number, action row, ``Simulator.last_round``
SimRound = tuple[int, np.ndarray, list[dict[str, Any]]]


@dataclass(frozen=True)
class CallRecord:
    """One call of a round as the board shows it: the slot's action parts, the status and what came back."""

    slot: int
    tool: int  # index in the tool spec (the Tool value for the default spec), or the out-of-range value the action held
    model: str  # model name ("" for the basic tools, which the manager runs itself)
    target: int
    status: int  # Status value (malformed calls get theirs too)
    result: str = ""  # "answer #3" / "flag #3" in the simulator, the answer text with real tools
    tokens_out: float = 0.0
    latency_s: float = 0.0


@dataclass(frozen=True)
class RoundRecord:
    """The calls of one round (empty: a round without any call, a format violation)."""

    number: int  # 1-based round of the episode
    calls: tuple[CallRecord, ...]


@dataclass(frozen=True)
class Board:
    """What an env passes to ``render_board``: its observation (see ``envs.paraorch``) and records."""

    tools: str  # "sim" or "real"
    observation: Mapping[str, np.ndarray]
    rounds: Sequence[RoundRecord]
    question: str | None = None  # the question text (real tools); the simulator has none
    candidate_labels: Sequence[str] = field(default_factory=tuple)  # answers of the ranked candidates (real tools)
    ending: str | None = None  # how the episode ended (``ending_text``); None while it runs
    tool_spec: ToolSpec = field(default_factory=default_tool_spec)  # names the calls' tools


def check_render_mode(render_mode: Any) -> str | None:
    """The ``render_mode`` option: None or one of ``RENDER_MODES``."""
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode: expected None or one of {list(RENDER_MODES)}, got {render_mode!r}")
    return render_mode


def new_history() -> deque[Any]:
    """An empty history of the rounds a board shows (``RoundRecord``s or ``SimRound``s): the last ``SHOWN_ROUNDS``."""
    return deque(maxlen=SHOWN_ROUNDS)


def sim_round(number: int, action: np.ndarray, results: Sequence[Mapping[str, Any]],
              model_names: Sequence[str], spec: ToolSpec) -> RoundRecord:
    """The record of a simulated round from its action row and ``Simulator.last_round`` (one dict per call), with
    the pool's tool spec ``spec``."""
    calls = []
    for res in results:
        k, kind = int(res["slot"]), res["kind"]
        tool, model, target = action_slot(action, k)
        calls.append(CallRecord(k, tool, model_label(tool, model, model_names, spec), target, int(res["status"]),
                                f"{kind} #{res['answer']}" if kind else "", res["tokens_out"], res["latency_s"]))
    return RoundRecord(number, tuple(calls))


def model_label(tool: int, model: int, model_names: Sequence[str], spec: ToolSpec) -> str:
    """The model column of a call: the model's name for an agent tool, "" for a basic tool of ``spec``."""
    found = spec.tool_def(tool)
    if found is not None and not found.is_agent:
        return ""
    return model_names[model] if 0 <= model < len(model_names) else f"model #{model}"


def ending_text(ended_with_final: bool, rounds: int, answer: str, correct: bool, reward: float) -> str:
    """The board's episode line once an episode is over (``Board.ending``)."""
    how = "final_answer" if ended_with_final else "out of rounds"
    verdict = "correct" if correct else "wrong"
    return f"over: {how} after {rounds} rounds; answer {_clip(answer, LABEL_CHARS)} ({verdict}); reward {reward:+.4f}"


def render_board(board: Board, mode: str) -> str | np.ndarray:
    """The board in ``mode``: a str for ``"ansi"``, uint8[H, W, 3] for ``"rgb_array"``."""
    lines = board_lines(board)
    if mode == "ansi":
        return "\n".join(text for text, _ in lines) + "\n"
    if mode == "rgb_array":
        return board_image(lines, board_capacity(board))
    raise ValueError(f"mode: expected one of {list(RENDER_MODES)}, got {mode!r}")


def board_capacity(board: Board) -> int:
    """Lines of the env's image: the summary and the call rows of its fullest board, at most ``IMAGE_CALL_ROWS`` of
    them; the same for every frame."""
    obs = board.observation
    max_rounds = int(round(float(obs["round"].sum())))
    return FIXED_LINES + min(min(max_rounds, SHOWN_ROUNDS) * len(obs["last_status"]), IMAGE_CALL_ROWS)


def board_lines(board: Board) -> list[Line]:
    """The board's lines, top to bottom: the summary first (fixed lines, in place from frame to frame), then the
    calls of the shown rounds."""
    obs = board.observation
    used, left = (int(round(float(x))) for x in obs["round"])
    tokens, cost, usd, latency = (float(x) for x in obs["budget"])
    lines: list[Line] = [
        (f"ParaOrch-v0 (tools={board.tools!r})  round {used} of {used + left}, {left} left", "head"),
        (f"task: {task_text(obs['task'])}", "text"),
        (f"question: {_clip(board.question, COLUMNS - 10)}" if board.question is not None
         else "question: simulated (answer #0 is the gold answer)", "text"),
        (f"budget used: {tokens:,.0f} tokens, {cost:,.2f} cost units, ${usd:,.4f}, {latency:,.2f} s latency", "text"),
        ("candidates (by the termination model's score):", "head"),
    ]
    for rank, row in enumerate(obs["candidates"]):
        if row[0] <= 0:
            lines.append((f"  {rank + 1}. -", "dim"))
            continue
        label = _clip(board.candidate_labels[rank], LABEL_CHARS) if rank < len(board.candidate_labels) else ""
        lines.append((f"  {rank + 1}. score {row[1]:7.2f}  support {row[2]:3.0f}  flags {row[3]:3.0f}  "
                      f"confirms {row[4]:3.0f}  {label}".rstrip(), "text"))
    ok, distinct, fallback = (float(x) for x in obs["evidence"])
    vote = "falls back to the manager's own answer" if fallback else "votes over the candidates"
    lines.append((f"evidence: {ok:.0f} OK answers, {distinct:.0f} distinct; the termination model {vote}", "text"))
    lines.append(("episode " + (board.ending or "running"), "head"))
    first = board.rounds[0].number if board.rounds else used + 1
    shown = f"rounds {first}-{used} of {used}" if board.rounds else "none yet"
    lines += [(f"calls ({shown}):", "head"),
              ("  rnd slot tool               model                        target   status          result       "
               "out tok   lat s", "dim")]
    for rnd in board.rounds:
        if not rnd.calls:
            lines.append((f"  {rnd.number:<3d} (no call: a format violation)", "fail"))
        lines += [call_line(rnd.number, call, board.tool_spec) for call in rnd.calls]
    return lines


def task_text(task: np.ndarray) -> str:
    """The task features in words: domain, answer format, question length."""
    domain = Domain(int(np.argmax(task[:4]))).name.lower() if task[:4].any() else "unknown domain"
    if task[5] > 0:
        fmt = f"multiple choice ({int(round(float(task[6]) * NUM_ANSWERS))} options)"
    else:
        fmt = "free-form"
    return f"{domain}, {fmt}, {float(task[7]) * 1000:,.0f} question tokens"


def call_line(number: int, call: CallRecord, spec: ToolSpec) -> Line:
    """One row of the calls table (tools named by ``spec``)."""
    found = spec.tool_def(call.tool)
    tool = found.name if found is not None else f"tool #{call.tool}"
    target = TARGET_NAMES[call.target] if 0 <= call.target < len(TARGET_NAMES) else f"#{call.target}"
    status = Status(call.status).name
    text = (f"  {number:<3d} {call.slot:<4d} {_cell(tool, 18)} {_cell(call.model or '-', 28)} {_cell(target, 8)} "
            f"{_cell(status, 15)} {_cell(call.result, 12)} {call.tokens_out:7.0f} {call.latency_s:7.2f}")
    return text, "ok" if call.status == Status.OK else "fail"


def _cell(text: str, width: int) -> str:
    """``text`` on one line, padded to ``width`` or cut there (see ``_clip``)."""
    return _clip(text, width).ljust(width)


def _clip(text: str, width: int) -> str:
    """``text`` on one line (model text may hold newlines), cut with a trailing "~" where longer than ``width``."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "~"


@lru_cache(maxsize=1)
def _font() -> Any:
    """Matplotlib's bundled monospace font, loaded once (no system font is needed)."""
    from pathlib import Path

    import matplotlib
    from PIL import ImageFont

    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSansMono.ttf"), FONT_PX)


def image_lines(lines: Sequence[Line], capacity: int) -> list[Line]:
    """The board's lines that an image of ``capacity`` lines shows: the summary (the first ``FIXED_LINES``) always,
    then the most recent call rows that fit, the calls header saying so when older rows are left out."""
    rows = list(lines[FIXED_LINES:])
    keep = capacity - FIXED_LINES
    shown = list(lines[:FIXED_LINES])
    if len(rows) > keep:
        text, colour = shown[FIXED_LINES - 2]
        shown[FIXED_LINES - 2] = (f"{text[:-2]}; the last {keep} of {len(rows)} call rows):", colour)
        rows = rows[len(rows) - keep:] if keep > 0 else []
    return shown + rows


def board_image(lines: Sequence[Line], capacity: int) -> np.ndarray:
    """``lines`` drawn on a frame of ``capacity`` lines by ``COLUMNS`` characters (``image_lines``): uint8[H, W, 3]."""
    from PIL import Image, ImageDraw

    lines = image_lines(lines, capacity)
    font = _font()
    width = 2 * MARGIN_PX + int(np.ceil(font.getlength("M" * COLUMNS)))
    height = 2 * MARGIN_PX + capacity * LINE_PX
    image = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(image)
    for i, (text, colour) in enumerate(lines[:capacity]):
        draw.text((MARGIN_PX, MARGIN_PX + i * LINE_PX), text[:COLUMNS], fill=COLOURS[colour], font=font)
    return np.array(image, np.uint8)
