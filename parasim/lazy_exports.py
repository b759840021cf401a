"""PEP 562 lazy exports, for the packages whose public names must not load their modules at import time.

``import parasim`` must stay cheap (the C++ core, numba and torch load only when a name that needs them is used),
and ``parasim.protocol`` must not import its parser while ``parasim.protocol.schema`` is being imported (a cycle).
Both packages map each public name to the module defining it; this is the one resolver they share.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, table: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: a name in ``table`` is imported from its module on first use and
    cached in ``namespace`` (the package's globals), so later lookups skip this function; any other name raises
    AttributeError as a plain module would."""

    def getattr_(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return getattr_
