"""The orchestration protocol: tool set, statuses, call records (``schema``) and the text parser."""
from parasim.protocol.engine import EpisodeEngine, EpisodeOutcome, TaskView
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

__all__ = [
    "AGENT_TOOLS", "BASIC_TOOLS", "MAX_PARALLEL", "MAX_ROUNDS", "NUM_DOMAINS", "NUM_STATUSES",
    "NUM_TOOLS", "PROTOCOL_FAILURES", "CallResult", "Domain", "EpisodeEngine", "EpisodeOutcome", "Status",
    "TaskView", "Tool", "ToolCall",
]
