"""ParaOrchText-v0 for verl, under the names the docs give: ``custom_reward_function.path`` = this file (or
``pkg://parasim.integrations.verl``), ``name`` = ``compute_score``; the agent loop
``parasim.integrations.verl.ParaOrchAgentLoop``; ``export_verl_parquet`` for the dataset. What each does is in
``parasim.integrations.verl_bridge``, which holds the code.

Why two modules: verl loads a reward file given by path with ``importlib.util.spec_from_file_location`` and
``exec_module`` under a made-up name that never enters ``sys.modules``, so a dataclass defined in the file (under
``from __future__ import annotations``, whose field types are strings that ``dataclasses`` resolves through
``sys.modules[cls.__module__]``) fails with ``'NoneType' object has no attribute '__dict__'``, and every object the
file defines would be a second copy (a second env pool, a second agent-loop registration under the made-up
module name). This file defines nothing: however verl loads it, it imports the one ``verl_bridge`` module and
hands back its objects.
"""
from typing import Any

from parasim.integrations import verl_bridge as _bridge
from parasim.integrations.verl_bridge import (
    AGENT_NAME,
    DATA_SOURCE_PREFIX,
    VERL_INSTALLED,
    RowSpec,
    compute_score,
    export_verl_parquet,
    verl_rows,
)

# and ParaOrchAgentLoop, which ``__getattr__`` hands over (an ImportError without verl)
__all__ = ["AGENT_NAME", "DATA_SOURCE_PREFIX", "VERL_INSTALLED", "RowSpec", "compute_score", "export_verl_parquet",
           "verl_rows"]


def __getattr__(name: str) -> Any:
    """The bridge's other names (``ParaOrchAgentLoop``, verl's classes it uses), as the bridge answers them: without
    verl, ``ParaOrchAgentLoop`` is an ImportError saying so."""
    return getattr(_bridge, name)
