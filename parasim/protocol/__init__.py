"""The orchestration protocol: tool set, statuses, call records (``schema``), the episode engine
interface (``engine``), the tool list and system prompt (``tool_schema``) and the text parser."""
from parasim.protocol.engine import EpisodeEngine, EpisodeOutcome, TaskView
from parasim.protocol.parser import BlockError, ParsedRound, parse_tool_calls
from parasim.protocol.schema import (
    AGENT_TOOLS,
    BASIC_TOOLS,
    MAX_PARALLEL,
    MAX_ROUNDS,
    NUM_DOMAINS,
    NUM_STATUSES,
    NUM_TOOLS,
    PROTOCOL_FAILURES,
    CallResult,
    Domain,
    Status,
    Tool,
    ToolCall,
)
from parasim.protocol.tool_schema import render_system_prompt, tool_list

__all__ = [
    "AGENT_TOOLS", "BASIC_TOOLS", "MAX_PARALLEL", "MAX_ROUNDS", "NUM_DOMAINS", "NUM_STATUSES",
    "NUM_TOOLS", "PROTOCOL_FAILURES", "BlockError", "CallResult", "Domain", "EpisodeEngine", "EpisodeOutcome",
    "ParsedRound", "Status", "TaskView", "Tool", "ToolCall", "parse_tool_calls", "render_system_prompt", "tool_list",
]
