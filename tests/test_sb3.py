"""ParaOrch-v0 where researchers already are: SB3's ``make_vec_env`` + PPO, sb3-contrib's MaskablePPO through the
env's ``action_masks()``, Gymnasium's per-dimension masks, and the ``"ansi"`` / ``"rgb_array"`` episode board on the
simulated, vector and real-tools envs.

Why: ``make_vec_env("ParaOrch-v0")`` passes ``render_mode="rgb_array"``, which the env refused; MaskablePPO reads
``action_masks()``, which it lacked; and ``MultiDiscrete.sample(mask=...)`` takes a tuple, not the observation's flat
mask. These tests use the libraries' public APIs only.
"""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.utils.passive_env_checker import env_render_passive_checker
from test_env_real import _make as _real  # the real-tools env over the scripted server (tests/conftest.py)

import parasim  # noqa: F401  (registers the envs)
from envs.action_masks import tuple_mask
from envs.paraorch import ParaOrchEnv
from envs.render import (
    BACKGROUND,
    COLUMNS,
    FIXED_LINES,
    IMAGE_CALL_ROWS,
    LINE_PX,
    MARGIN_PX,
    SHOWN_ROUNDS,
    Board,
    board_capacity,
    board_lines,
    ending_text,
    image_lines,
    render_board,
)
from parasim.protocol.schema import Tool

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(120)]
EMPTY = [7, 0, 0]
STOP = np.array([1] + EMPTY * 4, np.int64)


def _act(*slots: list[int], k: int = 4) -> np.ndarray:
    return np.array([0] + [x for s in [*slots, *[EMPTY] * (k - len(slots))] for x in s], np.int64)


# a scripted round: a reasoner answers, a reviewer with nothing to review is INVALID_TOOL, python runs
ROUND = _act([0, 0, 0], [1, 1, 2], [5, 0, 0])


def _allowed(action: np.ndarray, flat_mask: np.ndarray, nvec: np.ndarray) -> bool:
    """Whether every part of ``action`` is allowed by the flat mask (nvec order)."""
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    return bool(np.asarray(flat_mask)[offsets + np.asarray(action, np.int64)].all())


# ------------------------------------------------------------------------------------------- SB3 / sb3-contrib
def test_make_vec_env_and_ppo_train_on_the_env():
    sb3 = pytest.importorskip("stable_baselines3")
    import torch
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    venv = make_vec_env("ParaOrch-v0", n_envs=2, seed=0)  # gym.make(..., render_mode="rgb_array") inside
    model = sb3.PPO("MultiInputPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu",
                    policy_kwargs={"net_arch": [16]})
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    frames = venv.get_images()  # SB3's render path: each sub-env's rgb_array board
    assert len(frames) == 2 and all(f.dtype == np.uint8 and f.ndim == 3 and f.shape[2] == 3 for f in frames)
    venv.close()


def test_maskable_ppo_trains_with_action_masks_and_respects_them():
    contrib = pytest.importorskip("sb3_contrib")
    import torch
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    venv = make_vec_env("ParaOrch-v0", n_envs=2, seed=0)
    assert is_masking_supported(venv)  # found on the unwrapped env through SB3's env_method
    model = contrib.MaskablePPO("MultiInputPolicy", venv, n_steps=128, batch_size=64, n_epochs=1, seed=0,
                                device="cpu", policy_kwargs={"net_arch": [16]})
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    buf = model.rollout_buffer
    nvec = venv.action_space.nvec
    masks = buf.action_masks.reshape(-1, int(nvec.sum()))
    # the masks MaskablePPO collected are the observations' masks, and they do forbid something (no lead yet)
    assert np.array_equal(masks, buf.observations["action_mask"].reshape(masks.shape))
    assert (masks == 0).any()
    actions = buf.actions.reshape(-1, len(nvec))
    assert all(_allowed(a, m, nvec) for a, m in zip(actions, masks))
    obs = venv.reset()
    for _ in range(16):
        masks = get_action_masks(venv)
        actions, _ = model.predict(obs, action_masks=masks)
        assert masks.shape == (2, int(nvec.sum())) and all(_allowed(a, m, nvec) for a, m in zip(actions, masks))
        obs, *_ = venv.step(actions)
    venv.close()


# ------------------------------------------------------------------------------------------------ masks
def test_action_masks_are_the_observation_masks_as_bool():
    env = gym.make("ParaOrch-v0")
    obs, _ = env.reset(seed=0)
    nvec = env.action_space.nvec
    assert env.unwrapped.action_masks().shape == (int(nvec.sum()),)
    assert env.unwrapped.action_masks().dtype == np.bool_
    assert np.array_equal(env.unwrapped.action_masks(), obs["action_mask"].astype(bool))
    assert not env.unwrapped.action_masks()[2 + Tool.CRITICAL_REVIEWER]  # nothing to review yet
    obs, *_ = env.step(_act([0, 0, 0], [0, 1, 0], [0, 2, 0]))
    assert np.array_equal(env.unwrapped.action_masks(), obs["action_mask"].astype(bool))
    venv = gym.make_vec("ParaOrch-v0", num_envs=3)
    vobs, _ = venv.reset(seed=0)
    assert venv.unwrapped.action_masks().shape == (3, int(nvec.sum()))
    assert np.array_equal(venv.unwrapped.action_masks(), vobs["action_mask"].astype(bool))


def test_tuple_mask_makes_multidiscrete_sample_draw_only_allowed_actions():
    env = gym.make("ParaOrch-v0")
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    nvec = env.action_space.nvec
    masks = tuple_mask(obs["action_mask"], env.action_space.nvec)
    assert [m.shape for m in masks] == [(n,) for n in nvec] and all(m.dtype == np.int8 for m in masks)
    reviewer_drawn = 0
    for _ in range(300):
        action = env.action_space.sample(mask=tuple_mask(obs["action_mask"], env.action_space.nvec))
        assert _allowed(action, obs["action_mask"], nvec)
        reviewer_drawn += int(action[1] == Tool.CRITICAL_REVIEWER)
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            obs, _ = env.reset()
    assert reviewer_drawn > 0  # the mask opens once there is a lead: the draws follow it, not a fixed mask
    assert tuple_mask(obs["action_mask"].astype(bool), nvec)[0].dtype == np.int8


@pytest.mark.parametrize(("flat", "nvec", "match"), [
    (np.ones(5, np.int8), [2, 2], r"flat_mask: expected a bool or integer array of shape \(4,\)"),
    (np.ones(4, np.float32), [2, 2], "flat_mask: .* got dtype float32"),
    (np.array([1, 2, 1, 0]), [2, 2], r"flat_mask: expected values in \{0, 1\}, got \[0, 1, 2\]"),
    (np.ones(4, np.int8), [[2, 2]], "nvec: expected a 1-D array of positive integers"),
    (np.ones(4, np.int8), [4, 0], "nvec: expected a 1-D array of positive integers"),
])
def test_tuple_mask_names_bad_inputs(flat, nvec, match):
    with pytest.raises(ValueError, match=match):
        tuple_mask(flat, nvec)


# ----------------------------------------------------------------------------------------------- render (sim)
def test_render_modes_are_declared_and_checked():
    for env in (gym.make("ParaOrch-v0"), gym.make_vec("ParaOrch-v0", num_envs=2)):
        assert env.metadata["render_modes"] == ["ansi", "rgb_array"] and env.metadata["render_fps"] > 0
    with pytest.raises(ValueError, match=r"render_mode: expected None or one of \['ansi', 'rgb_array'\], got 'human'"):
        ParaOrchEnv(render_mode="human")
    with pytest.raises(ValueError, match="render_mode: expected None or one of"):
        gym.make_vec("ParaOrch-v0", num_envs=2, render_mode="rgb_array_list")
    with pytest.raises(RuntimeError, match="reset"):
        gym.make("ParaOrch-v0", render_mode="ansi").unwrapped.render()


@pytest.mark.parametrize("mode", [None, "ansi", "rgb_array"])
def test_check_env_passes_with_render_modes(mode):
    """Gymnasium's checker renders the env in its mode and remakes it in each declared mode; no render warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(gym.make("ParaOrch-v0", render_mode=mode).unwrapped)
    assert [str(w.message) for w in caught if "infinity" not in str(w.message)] == []


def test_ansi_board_shows_calls_statuses_candidates_and_budgets():
    env = gym.make("ParaOrch-v0", render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert "round 0 of 12, 12 left" in text and "calls (none yet)" in text and "episode running" in text
    obs, *_ = env.step(ROUND)
    text = env.render()
    names = env.unwrapped.model_names
    lines = text.splitlines()
    rows = [ln for ln in lines if ln.startswith("  1 ")]
    assert len(rows) == 3
    assert "standard_reasoner" in rows[0] and names[0] in rows[0] and "question" in rows[0] and " OK " in rows[0]
    assert "critical_reviewer" in rows[1] and names[1] in rows[1] and "verify" in rows[1]
    assert "INVALID_TOOL" in rows[1]
    assert "python" in rows[2] and " - " in rows[2]  # a basic tool: no model
    tokens, cost, usd, latency = obs["budget"]
    assert f"budget used: {tokens:,.0f} tokens, {cost:,.2f} cost units, ${usd:,.4f}, {latency:,.2f} s latency" in text
    assert "round 1 of 12, 11 left" in text and "calls (rounds 1-1 of 1)" in text
    support = obs["candidates"][0, 2]
    assert f"1. score {obs['candidates'][0, 1]:7.2f}  support {support:3.0f}" in text
    assert f"evidence: {obs['evidence'][0]:.0f} OK answers" in text
    env.step(_act())  # a round without a call
    obs, reward, term, *_ = env.step(STOP)
    text = env.render()
    assert term and "  2   (no call: a format violation)" in text
    assert "episode over: final_answer after 2 rounds; answer #" in text and f"reward {reward:+.4f}" in text
    env.reset()
    assert "calls (none yet)" in env.render()  # a new episode starts an empty board


def test_board_keeps_the_last_rounds_only_and_the_image_keeps_its_shape():
    env = gym.make("ParaOrch-v0", render_mode="rgb_array", max_rounds=SHOWN_ROUNDS + 8)
    env.reset(seed=0)
    blank = env.render()
    assert blank.dtype == np.uint8 and blank.ndim == 3 and blank.shape[2] == 3
    assert len(np.unique(blank.reshape(-1, 3), axis=0)) > 2  # text drawn, not a blank frame
    for _ in range(SHOWN_ROUNDS + 3):
        env.step(_act([0, 0, 0], [0, 1, 0], [0, 2, 0], [6, 0, 0]))  # four calls: the fullest rounds
    frame = env.render()
    assert frame.shape == blank.shape and not np.array_equal(frame, blank)
    text = gym.make("ParaOrch-v0", render_mode="ansi", max_rounds=SHOWN_ROUNDS + 8)
    text.reset(seed=0)
    for _ in range(SHOWN_ROUNDS + 3):
        text.step(_act([0, 0, 0]))
    board = text.render()
    assert f"calls (rounds 4-{SHOWN_ROUNDS + 3} of {SHOWN_ROUNDS + 3})" in board
    assert "\n  3   " not in board and "\n  4   0    standard_reasoner" in board


def _inked_lines(frame: np.ndarray) -> np.ndarray:
    """Per line slot of a board image, whether any pixel in it differs from the background."""
    body = frame[MARGIN_PX:frame.shape[0] - MARGIN_PX]
    slots = body.reshape(-1, LINE_PX, *body.shape[1:])
    return (slots != np.array(BACKGROUND, np.uint8)).any(axis=(1, 2, 3))


def test_rgb_board_is_sized_to_its_content():
    """The image holds the summary and the most recent IMAGE_CALL_ROWS call rows: a board with that many calls fills
    every line of it (no column of blank call rows, as at 12 rounds x 4 slots = 48 reserved rows before), older rows
    give way to newer ones with the header saying so, and every frame keeps the env's one shape."""
    env = gym.make("ParaOrch-v0", render_mode="rgb_array")
    env.reset(seed=0)
    first = env.render()
    assert first.shape[0] == 2 * MARGIN_PX + (FIXED_LINES + IMAGE_CALL_ROWS) * LINE_PX
    assert _inked_lines(first)[:FIXED_LINES].all() and not _inked_lines(first)[FIXED_LINES:].any()
    four = _act([0, 0, 0], [0, 1, 0], [0, 2, 0], [6, 0, 0])
    for _ in range(IMAGE_CALL_ROWS // 4):
        env.step(four)
    full = env.render()
    assert full.shape == first.shape and _inked_lines(full).all()
    env.step(four)  # one round more than the window: the oldest rows leave it
    later = env.render()
    assert later.shape == first.shape and _inked_lines(later).all() and not np.array_equal(later, full)
    board = env.unwrapped._board()
    lines = board_lines(board)
    shown = image_lines(lines, board_capacity(board))
    assert len(lines) == FIXED_LINES + IMAGE_CALL_ROWS + 4 and len(shown) == FIXED_LINES + IMAGE_CALL_ROWS
    assert shown[FIXED_LINES - 2][0] == f"calls (rounds 1-4 of 4; the last {IMAGE_CALL_ROWS} of 16 call rows):"
    assert shown[FIXED_LINES:] == lines[-IMAGE_CALL_ROWS:]  # the newest rows
    assert "the last" not in render_board(board, "ansi")  # the text board shows every kept round
    small = gym.make("ParaOrch-v0", render_mode="rgb_array", max_rounds=2, max_parallel=2)
    small.reset(seed=0)
    assert small.render().shape[0] == 2 * MARGIN_PX + (FIXED_LINES + 4) * LINE_PX  # 2 rounds x 2 slots of calls


def test_vector_render_is_a_tuple_of_the_single_envs_boards():
    """Lane i of the vector env shows the board of the single env seeded s + i and stepped alike, autoresets
    included (the vector env's seeding contract, extended to the board)."""
    n = 3
    venv = gym.make_vec("ParaOrch-v0", num_envs=n, render_mode="ansi", max_rounds=2)
    singles = [gym.make("ParaOrch-v0", render_mode="ansi", max_rounds=2) for _ in range(n)]
    venv.reset(seed=5)
    for i, e in enumerate(singles):
        e.reset(seed=5 + i)
    rng = np.random.default_rng(0)
    pending = [False] * n
    for _ in range(7):
        actions = np.stack([_act(*([int(rng.integers(7)), int(rng.integers(3)), 0] for _ in range(2)))
                            for _ in range(n)])
        actions[:, 0] = rng.random(n) < 0.3
        venv.step(actions)
        for i, e in enumerate(singles):
            if pending[i]:
                e.reset()
                pending[i] = False
            else:
                pending[i] = e.step(actions[i])[2]
        frames = venv.render()
        assert isinstance(frames, tuple) and len(frames) == n
        assert list(frames) == [e.render() for e in singles]
    rgb = gym.make_vec("ParaOrch-v0", num_envs=2, render_mode="rgb_array")
    rgb.reset(seed=0)
    single = gym.make("ParaOrch-v0", render_mode="rgb_array")
    single.reset(seed=1)
    frames = rgb.render()
    assert len(frames) == 2 and np.array_equal(frames[1], single.render())


def test_board_lines_hold_one_line_each_whatever_the_model_text():
    """Real questions and answers may hold newlines and run long: each stays one board line, cut to the image."""
    obs, _ = gym.make("ParaOrch-v0").reset(seed=0)
    obs["candidates"][0, :3] = 1.0, 2.5, 1.0
    board = Board("real", obs, (), question="Compute\n  6 * 7\n" + "and more " * 40,
                  candidate_labels=("'" + "4" * 80 + "'",), ending=ending_text(True, 1, "'x\ny'", True, 1.0))
    text = render_board(board, "ansi")
    assert len(text.splitlines()) == len(board_lines(board)) == FIXED_LINES
    question = next(ln for ln in text.splitlines() if ln.startswith("question: "))
    assert question.startswith("question: Compute 6 * 7 and more") and len(question) <= COLUMNS
    assert "'x y'" in text and "'" + "4" * 38 + "~" in text and "4" * 39 not in text  # 40 characters shown


# ---------------------------------------------------------------------------------------------- render (real)
def test_real_env_ansi_board_shows_the_question_answers_and_statuses(backend):
    env = _real(backend, render_mode="ansi")
    env.reset(seed=0)
    assert "question: What is six times seven?" in env.render() and "tools='real'" in env.render()
    # good answers 42, other 7, split's ensemble 42; a reviewer with nothing to review is INVALID_TOOL (no call)
    obs, *_ = env.step(_act([0, 0, 0], [0, 1, 0], [4, 2, 0], [1, 0, 2]))
    text = env.render()
    rows = [ln for ln in text.splitlines() if ln.startswith("  1 ")]
    assert len(rows) == 4
    for row, (tool, model, result) in zip(rows, [("standard_reasoner", "good", "'42'"),
                                                 ("standard_reasoner", "other", "'7'"),
                                                 ("ensemble_solver", "split", "'42'")]):
        assert tool in row and f" {model} " in row and " OK " in row and result in row
    assert "critical_reviewer" in rows[3] and "INVALID_TOOL" in rows[3]
    assert "1. score" in text and "'42'" in text.split("candidates")[1].splitlines()[1]
    assert f"budget used: {obs['budget'][0]:,.0f} tokens" in text
    env.step(_act([1, 0, 2]))  # now the reviewer has a lead to review
    review = [ln for ln in env.render().splitlines() if ln.startswith("  2 ")]
    assert len(review) == 1 and "critical_reviewer" in review[0] and " OK " in review[0]
    assert "flag" in review[0] or "confirm" in review[0]
    env.step(STOP)
    assert "episode over: final_answer after 2 rounds; answer '42' (correct)" in env.render()
    assert np.array_equal(env.unwrapped.action_masks(), env.unwrapped._observation()["action_mask"].astype(bool))


def test_real_env_rgb_board_and_render_checks(backend):
    sim_frame = gym.make("ParaOrch-v0", render_mode="rgb_array").unwrapped
    sim_frame.reset(seed=0)
    for mode in ("ansi", "rgb_array"):
        env = _real(backend, render_mode=mode)
        env.reset(seed=0)
        env.step(_act([0, 0, 0]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            frame = env_render_passive_checker(env.unwrapped)  # what check_env runs on an env with a render mode
        assert [str(w.message) for w in caught] == []
        if mode == "rgb_array":
            assert frame.dtype == np.uint8 and frame.shape == sim_frame.render().shape  # same board, same size
            assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 2
    fresh = _real(backend).unwrapped
    assert fresh.action_masks().dtype == np.bool_ and not fresh.action_masks()[2 + Tool.CRITICAL_REVIEWER]
