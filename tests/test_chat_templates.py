"""Chat templates: with ``tokenizer=`` ParaOrchText-v0 renders through ``apply_chat_template(messages, tools=...)``
with role "tool" results, for non-Qwen templates built here (a Llama-3-style and a strict Mistral-style one), and
the SFT data render through the same function; without a tokenizer the Hermes ChatML stays as it was."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from tiny_lm import build_tokenizer

import parasim  # noqa: F401  (registers the envs)
from envs.paraorch_text import render_chatml, render_conversation
from parasim.protocol.tool_schema import tool_list
from training.llm.data import ROLE_MANAGER, read_jsonl, render_segments, write_jsonl

# Llama 3 style: header tokens per message, tool results as the "ipython" role, the tool list in the system turn.
LLAMA3 = (
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content }}"
    "{%- if loop.first and message.role == 'system' and tools %}"
    "{{- '\\n\\nYou have access to the following functions; call one by answering with its JSON.\\n\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n\\n' }}{%- endfor %}"
    "{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
# Mistral style, strict: user and assistant turns must alternate and tool results need a call id, else it raises.
MISTRAL = (
    "{%- if tools %}{{- '[AVAILABLE_TOOLS]' + tools | tojson + '[/AVAILABLE_TOOLS]' }}{%- endif %}"
    "{%- set ns = namespace(turn='user') %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{- '[SYSTEM_PROMPT]' + message.content + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if message.tool_call_id is not defined %}{{- raise_exception('tool messages need a tool_call_id') }}"
    "{%- endif %}"
    "{{- '[TOOL_RESULTS]' + {'call_id': message.tool_call_id, 'content': message.content} | tojson }}"
    "{{- '[/TOOL_RESULTS]' }}"
    "{%- else %}"
    "{%- if message.role != ns.turn %}{{- raise_exception('user and assistant turns must alternate') }}{%- endif %}"
    "{%- if message.role == 'user' %}{{- '[INST]' + message.content + '[/INST]' }}{%- set ns.turn = 'assistant' %}"
    "{%- else %}{{- message.content + eos_token }}{%- set ns.turn = 'user' %}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
)
PARALLEL = "\n".join(
    "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
    for name, args in (("python", {"code": "print(6 * 7)"}),
                       ("standard_reasoner", {"model": "GPT-OSS-20B", "subtask": "solve it"}),
                       ("nonexistent_tool", {"x": 1})))
FINAL = '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "A"}}\n</tool_call>'


@pytest.fixture(scope="module")
def qwen_tokenizer() -> Any:
    return build_tokenizer()


@pytest.fixture(scope="module")
def llama_tokenizer(qwen_tokenizer: Any) -> Any:
    """The tiny tokenizer with Llama 3's header tokens, end-of-turn token and the Llama-3-style template."""
    tok = copy.deepcopy(qwen_tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]})
    tok.eos_token = "<|eot_id|>"
    tok.chat_template = LLAMA3
    return tok


def test_observation_is_the_tokenizers_template_with_tool_role_results(llama_tokenizer: Any) -> None:
    env = gym.make("ParaOrchText-v0", max_rounds=3, tokenizer=llama_tokenizer, render_mode="ansi")
    base = env.unwrapped
    obs, info = env.reset(seed=4)
    assert base.tools == tool_list(list(base.model_names))
    assert obs == llama_tokenizer.apply_chat_template(info["messages"], tools=base.tools, tokenize=False,
                                                      add_generation_prompt=True)
    assert obs.startswith("<|start_header_id|>system<|end_header_id|>\n\n")
    assert "<|im_start|>" not in obs and "<tools>" not in base.system_prompt  # no Hermes block in the prompt
    assert json.dumps(base.tools[0], ensure_ascii=False) in obs  # the template placed the tool list
    nxt, _r, terminated, _t, step_info = env.step(PARALLEL)
    assert not terminated
    assert nxt.startswith(obs + PARALLEL + "<|eot_id|>")  # the conversation extends the previous one
    turn = base.messages[2:]
    assert [m["role"] for m in turn] == ["assistant", "tool", "tool", "tool", "user"]
    assert [m["tool_call_id"] for m in turn[1:4]] == ["call_0", "call_1", "block_2"]
    assert [json.loads(m["content"])["status"] for m in turn[1:4]] == ["OK", "OK", "INVALID_TOOL"]
    assert turn[-1]["content"] == "Rounds left: 2."
    assert nxt.count("<|start_header_id|>ipython<|end_header_id|>") == 3
    assert nxt == render_conversation(base.messages, llama_tokenizer, base.tools) == env.render()
    last, _r, terminated, _t, end = env.step(FINAL)
    assert terminated and end["messages"] == base.messages and last.startswith(nxt + FINAL + "<|eot_id|>")


def test_default_rendering_is_the_hermes_chatml(qwen_tokenizer: Any) -> None:
    env = gym.make("ParaOrchText-v0", max_rounds=3, render_mode="ansi")
    obs, info = env.reset(seed=4)
    env.step(PARALLEL)
    base = env.unwrapped
    assert base.tools is None and "<tools>" in base.system_prompt
    assert [m["role"] for m in base.messages] == ["system", "user", "assistant", "user"]
    assert env.render() == render_chatml(base.messages) == render_conversation(base.messages)
    # the Qwen-style template of the tiny tokenizer writes the same text for the same conversation
    assert render_chatml(info["messages"]) == qwen_tokenizer.apply_chat_template(
        info["messages"], tokenize=False, add_generation_prompt=True) == obs


def test_a_strict_template_renders_long_episodes_within_the_limits(qwen_tokenizer: Any) -> None:
    """Mistral-style: alternation holds (notes as a user message, the cut marker inside the question), results carry
    call ids, and the rendered observation never exceeds max_obs_chars while turns are dropped."""
    limits = {"max_turn_chars": 4_096, "max_result_chars": 256, "max_feedback_chars": 8 * 256 + 4_096,
              "max_obs_chars": 4_096 + 8 * 256 + 4_096 + 32_768}
    env = gym.make("ParaOrchText-v0", max_rounds=14, tokenizer=qwen_tokenizer, chat_template=MISTRAL, **limits)
    obs, _ = env.reset(seed=2)
    assert obs.startswith("[AVAILABLE_TOOLS]") and "<|im_start|>" not in obs
    long_turn = "x" * 5_000 + PARALLEL + "<tool_call>{unreadable</tool_call>" * 20  # long text, long feedback
    dropped_seen = elided_seen = False
    for _ in range(14):
        obs, _r, terminated, truncated, _info = env.step(long_turn)
        assert len(obs) <= limits["max_obs_chars"] and env.observation_space.contains(obs)
        question = env.unwrapped.messages[1]["content"]
        dropped_seen |= "earlier turns not shown" in question
        elided_seen |= any(m["role"] == "user" and "elided" in m["content"] for m in env.unwrapped.messages[2:])
        if terminated or truncated:
            break
    assert terminated and dropped_seen and elided_seen
    assert "[TOOL_RESULTS]" in obs and "x" * 4_096 + "[... " in obs


def test_sft_rows_of_template_episodes_render_through_the_same_function(llama_tokenizer: Any, tmp_path: Path) -> None:
    env = gym.make("ParaOrchText-v0", max_rounds=3, tokenizer=llama_tokenizer)
    env.reset(seed=7)
    env.step(PARALLEL)
    _obs, _r, terminated, _t, info = env.step(FINAL)
    assert terminated
    path = tmp_path / "sft.jsonl"
    write_jsonl(path, [{"messages": info["messages"], "tools": env.unwrapped.tools}])
    traj = read_jsonl(path, llama_tokenizer)[0]
    full = render_conversation(info["messages"], llama_tokenizer, env.unwrapped.tools, add_generation_prompt=False)
    assert llama_tokenizer.decode(traj.input_ids) == full
    manager = [llama_tokenizer.decode(traj.input_ids[s:e]) for s, e, role in traj.spans if role == ROLE_MANAGER]
    assert manager == [PARALLEL + "<|eot_id|>", FINAL + "<|eot_id|>"]
    env_text = "".join(llama_tokenizer.decode(traj.input_ids[s:e]) for s, e, role in traj.spans
                       if role != ROLE_MANAGER)
    assert env_text.count("<|start_header_id|>ipython<|end_header_id|>") == 3  # the tool results, never trained
    # a template given as a string overrides the tokenizer's own, in the SFT data as in the env
    segments = render_segments(llama_tokenizer, info["messages"], env.unwrapped.tools, chat_template=MISTRAL)
    assert "".join(t for t, _ in segments).startswith("[AVAILABLE_TOOLS]")
    assert [t for t, role in segments if role == ROLE_MANAGER] == [PARALLEL + "<|eot_id|>", FINAL + "<|eot_id|>"]


def test_chat_template_options_are_checked(qwen_tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="chat_template: needs tokenizer="):
        gym.make("ParaOrchText-v0", chat_template=LLAMA3)
    with pytest.raises(TypeError, match="tokenizer: expected None, a path, or a tokenizer with apply_chat_template, "
                                        "got int"):
        gym.make("ParaOrchText-v0", tokenizer=3)
    bare = copy.deepcopy(qwen_tokenizer)
    bare.chat_template = None
    with pytest.raises(ValueError, match="tokenizer: .* has no chat_template; pass chat_template="):
        gym.make("ParaOrchText-v0", tokenizer=bare)
    no_tools = "{%- for m in messages %}{%- if m.role == 'tool' %}{{ raise_exception('no tool role') }}{%- endif %}" \
               "{{- m.content }}{%- endfor %}"
    env = gym.make("ParaOrchText-v0", tokenizer=qwen_tokenizer, chat_template=no_tools)
    with pytest.raises(ValueError, match=r"chat_template: .*apply_chat_template failed on messages with roles "
                                         r"\['assistant', 'system', 'tool', 'user'\]: no tool role"):
        env.reset(seed=0)  # found at reset, where a probe turn is rendered, not in the middle of an episode
    with pytest.raises(ValueError, match="chat_template / tools: the default"):
        render_conversation([{"role": "user", "content": "q"}], tools=tool_list(["m"]))


# Pairs every tool result with a call of the assistant message before it (by id), as OpenAI-style templates do.
PAIRED = (
    "{%- set ns = namespace(ids=[]) %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '[ASSISTANT]' + (message.content or '') }}{%- set ns.ids = [] %}"
    "{%- for call in message.tool_calls | default([]) %}"
    "{{- '[CALL ' + call.id + '] ' + call.function.name + ' ' + call.function.arguments }}"
    "{%- set ns.ids = ns.ids + [call.id] %}"
    "{%- endfor %}"
    "{%- elif message.role == 'tool' %}"
    "{%- if message.tool_call_id not in ns.ids %}"
    "{{- raise_exception('tool result ' + message.tool_call_id + ' answers no call') }}{%- endif %}"
    "{{- '[RESULT ' + message.tool_call_id + '] ' + message.content }}"
    "{%- else %}{{- '[' + message.role + '] ' + message.content }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '[ASSISTANT]' }}{%- endif %}"
)


def test_tool_call_messages_pair_each_result_with_the_call_it_answers(qwen_tokenizer: Any) -> None:
    paired = copy.deepcopy(qwen_tokenizer)
    paired.chat_template = PAIRED
    plain = gym.make("ParaOrchText-v0", max_rounds=3, tokenizer=paired)
    with pytest.raises(ValueError, match="answers no call"):  # the manager's text alone pairs nothing
        plain.reset(seed=4)
    env = gym.make("ParaOrchText-v0", max_rounds=3, tokenizer=paired, tool_call_messages=True)
    env.reset(seed=4)
    obs, _r, terminated, _t, info = env.step("Let me check.\n" + PARALLEL)
    assistant, *results = info["messages"][2:6]
    assert assistant["content"] == "Let me check." and "<tool_call>" not in assistant["content"]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert ids == ["call_0", "call_1", "block_2"] == [m["tool_call_id"] for m in results]
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["python", "standard_reasoner",
                                                                        "nonexistent_tool"]
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {"model": "GPT-OSS-20B",
                                                                              "subtask": "solve it"}
    assert "[CALL call_1] standard_reasoner" in obs and "[RESULT call_1]" in obs
    last, _r, terminated, _t, end = env.step(FINAL)
    assert terminated and end["messages"][-1]["tool_calls"][0]["function"]["name"] == "final_answer"
    # Qwen3's template renders tool_calls: with them, each call is written once, not once more beside the text
    qwen = gym.make("ParaOrchText-v0", max_rounds=3, tokenizer=qwen_tokenizer, tool_call_messages=True)
    first, _ = qwen.reset(seed=4)
    nxt, *_ = qwen.step(PARALLEL)
    assert nxt.count("<tool_call>") - first.count("<tool_call>") == 3
    with pytest.raises(ValueError, match="needs tokenizer"):
        gym.make("ParaOrchText-v0", tool_call_messages=True)
