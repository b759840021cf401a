"""The orchestration protocol: tool set, statuses, call records (``schema``), the episode engine
interface (``engine``), the tool list and system prompt (``tool_schema``) and the text parser.

Names resolve lazily (PEP 562): importing ``parasim.protocol.schema`` runs this file first, and an eager import of
the parser here would pull in the tool spec and the pool-file checks that themselves need ``schema``: a cycle.
"""
from __future__ import annotations

from parasim.lazy_exports import lazy_getattr

_SCHEMA = ("AGENT_TOOLS", "BASIC_TOOLS", "MAX_PARALLEL", "MAX_ROUNDS", "NUM_DOMAINS", "NUM_STATUSES", "NUM_TOOLS",
           "PROTOCOL_FAILURES", "CallResult", "Domain", "Status", "Tool", "ToolCall")
_LAZY: dict[str, str] = {
    **{name: "parasim.protocol.schema" for name in _SCHEMA},
    **{name: "parasim.protocol.engine" for name in ("EpisodeEngine", "EpisodeOutcome", "TaskView")},
    **{name: "parasim.protocol.parser" for name in ("BlockError", "ParsedRound", "parse_tool_calls")},
    **{name: "parasim.protocol.tool_schema" for name in ("render_system_prompt", "tool_list")},
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
