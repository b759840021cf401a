"""Pool overrides: ``path=value`` settings applied to a pool file's parsed JSON before the pool parser checks it.

Why: a sensitivity study varies a pool's assumed parameters through the sweep grid (``parasim sweep --grid
pool.interaction.sd=0,0.5,1.5``) without a pool file per value. A training config carries its overrides as one
string, ``env.pool_set`` (``path=value;path=value``), which the grid and ``--set`` keys ``pool.<path>`` add to, so
the overrides are part of the env options: points with the same overrides share one population (one vector env)
and their results key, and points with different ones do not. The overrides are applied to the pool's JSON, and
``parasim.pools.pool.parse_pool`` then validates the result exactly as it validates a file, so a bad value gets the
parser's own error naming the field and its range, and everything the parser derives at load is derived from
the overridden values: in particular skills are solved from the accuracy targets after the override, so
overriding ``interaction.sd``, ``tokens_out`` or ``protocol`` keeps every model's direct-call accuracy at its
published target (at the target's own generation cap), and overriding a ``skill`` changes only the benchmarks
without a target.

Paths are dot-separated keys of the pool file's layout (``parasim.pools.pool``):

- ``models.<model>.<key>...``: one agent model's key; ``<model>`` is its name, its index in ``models``, or a glob
  over the names (``Qwen3*``; ``*`` is every agent model). A glob that matches no model is an error.
- ``<group>.<key>...`` where ``<group>`` is a model group (``interaction``, ``errors``, ``anchoring``, ``review``,
  ``tokens_out``, ``latency``, ...): shorthand for ``models.*.<group>.<key>...``, every agent model (the manager,
  which no agent call runs on, only through ``manager.<group>...``).
- any other path is walked as written: ``manager.anchoring.rho``, ``protocol.max_output_tokens``,
  ``tools.critical_reviewer.bonus.math``.

A path must name a leaf (a number or a string) that exists, a per-domain object (``review.sensitivity``,
``tools.python.bonus``: the value goes to every domain), or an optional key the schema defines in an existing
place (``errors.affinity``, ``latency.concurrency_slope``, a missing ``interaction`` group of a model, a protocol
key); anything else is refused, naming the path and what exists where it stops. The group holding an overridden
value gets source ``assumed``: the value is no longer the published figure. Values are JSON scalars (``0.5``,
``16384``, ``true``), anything else is a string (``self_hosted``). Overrides of several models apply the
broad ones first (the group shorthand and ``models.*``, then other globs, then one model by name or index), so
``interaction.sd=0.5;models.GPT-OSS-20B.interaction.sd=2`` means every model at 0.5 but GPT-OSS-20B at 2, in
whatever order they were given.
"""
from __future__ import annotations

import copy
import fnmatch
import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parasim.pools.param_groups import DOMAINS, did_you_mean
from parasim.pools.pool import MODEL_GROUPS, PROTOCOL_KEYS, PoolError, PoolSpec, parse_pool, pool_file, read_pool_file

SEPARATOR = ";"  # between the overrides of one set; a grid axis separates its values by ','
PREFIX = "pool."  # a grid or --set key that is a pool override


def parse_set(text: str, where: str = "env.pool_set") -> dict[str, str]:
    """``path=value;path=value`` as a mapping of path -> value text; a malformed item or a path given twice is an
    error naming it."""
    out: dict[str, str] = {}
    for item in (s.strip() for s in text.split(SEPARATOR)):
        if not item:
            continue
        path, sep, value = item.partition("=")
        path, value = check_path(path, where), value.strip()
        if not sep or not value:
            raise PoolError(f"{where}: item {item!r}: expected PATH=VALUE (e.g. interaction.sd=0.5)")
        if "," in value:
            raise PoolError(f"{where}: item {item!r}: a value may not contain ',' (it separates grid values)")
        if path in out:
            raise PoolError(f"{where}: pool path {path!r} is set twice ({out[path]} and {value})")
        out[path] = value
    return out


def check_path(path: str, where: str = "pool override") -> str:
    """A path's syntax (dot-separated non-empty keys, no ``=`` ``;`` ``,``), stripped; existence is checked against a
    pool by ``apply_set``."""
    path = path.strip()
    if not path or any(not part for part in path.split(".")) or any(c in path for c in "=;,"):
        raise PoolError(f"{where}: pool path {path!r}: expected dot-separated keys such as interaction.sd or "
                        "models.GPT-OSS-20B.latency.concurrency_slope (no '=', ';' or ',')")
    return path


def format_set(items: Mapping[str, str]) -> str:
    """The canonical ``env.pool_set`` string: broad overrides first (the order they apply in), then by path, so the
    same overrides give the same string (and the same population and results key) in any order."""
    return SEPARATOR.join(f"{p}={items[p]}" for p in sorted(items, key=lambda p: (_rank(p), p)))


def with_override(pool_set: str, path: str, value: Any) -> str:
    """``pool_set`` with ``path`` set to ``value`` (replacing an earlier value of the same path), canonical."""
    items = parse_set(pool_set)
    items[check_path(path)] = str(value).strip()
    return format_set(parse_set(format_set(items)))  # the merged set passes the same checks as one given whole


def _rank(path: str) -> int:
    """Application order: 0 every agent model (group shorthand, ``models.*``) and paths outside ``models``,
    1 other globs over model names, 2 one model by name or index."""
    head, _, rest = path.partition(".")
    if head != "models":
        return 0
    name = rest.split(".", 1)[0]
    return 0 if name == "*" else 1 if any(c in name for c in "*?[") else 2


def _value(text: str) -> Any:
    """A value's text as a JSON scalar when it is one (finite numbers, booleans, quoted strings), else the text."""
    def refuse(const: str) -> Any:
        raise PoolError(f"pool override value {text!r}: not a finite number")
    try:
        value = json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError:
        return text
    if isinstance(value, (dict, list)) or value is None or (isinstance(value, float) and not math.isfinite(value)):
        raise PoolError(f"pool override value {text!r}: expected a number, a boolean or a string")
    return value


def apply_set(raw: Mapping[str, Any], items: Mapping[str, str]) -> dict[str, Any]:
    """A deep copy of the pool JSON ``raw`` with the overrides applied (broad ones first, see ``format_set``);
    ``PoolError`` naming the path when it does not exist in this pool."""
    out = copy.deepcopy(dict(raw))
    for path in sorted(items, key=lambda p: (_rank(p), p)):
        value = _value(items[path])
        for start, keys, where, schema in _targets(out, path):
            _assign(start, keys, value, where, schema, path)
    return out


def _targets(raw: dict[str, Any], path: str) -> list[tuple[dict, list[str], str, str]]:
    """Where ``path`` points: (object to start from, keys below it, its name in errors, its schema kind)."""
    parts = path.split(".")
    models = raw.get("models") if isinstance(raw.get("models"), list) else []
    if parts[0] in MODEL_GROUPS:
        parts = ["models", "*", *parts]
    if parts[0] == "models":
        if len(parts) < 3:
            raise PoolError(f"pool.{path}: expected models.<model>.<group>.<key> (a model name, index or glob)")
        rest = ".".join(parts[1:])
        names = [str(m.get("name", "")) if isinstance(m, dict) else "" for m in models]
        exact = [i for i, n in enumerate(names) if rest.startswith(n + ".") and n]
        if exact:  # a name may contain dots: the longest name the path starts with
            i = max(exact, key=lambda j: len(names[j]))
            hits, keys = [i], rest[len(names[i]) + 1:].split(".")
        elif parts[1].isdigit():
            hits, keys = [int(parts[1])] if int(parts[1]) < len(models) else [], parts[2:]
        else:
            hits, keys = [i for i, n in enumerate(names) if fnmatch.fnmatchcase(n, parts[1])], parts[2:]
        if not hits:
            raise PoolError(f"pool.{path}: no agent model {parts[1]!r} in this pool; models: {names} "
                            f"(or an index 0..{len(names) - 1}, or a glob such as '*'){did_you_mean(parts[1], names)}")
        return [(models[i], keys, f"models[{i}] ({names[i]})", "model") for i in hits]
    if parts[0] == "manager" and isinstance(raw.get("manager"), dict):
        return [(raw["manager"], parts[1:], "manager", "model")]
    return [(raw, parts, "(pool)", "top")]


def _creatable(schema: str, depth: int, group: str) -> tuple[str, ...]:
    """Keys the pool schema defines that may be added where they are missing: a model's groups, a model group's
    keys, the protocol's keys."""
    if schema == "model":
        return tuple(MODEL_GROUPS) if depth == 0 else MODEL_GROUPS.get(group, ()) if depth == 1 else ()
    return PROTOCOL_KEYS if schema == "top" and depth == 1 and group == "protocol" else ()


def _assign(start: dict, keys: list[str], value: Any, where: str, schema: str, path: str) -> None:
    """Set ``start[keys[0]]...[keys[-1]] = value``, marking the innermost group with a source as assumed."""
    if not keys:
        raise PoolError(f"pool.{path}: names {where}, an object; name one of its keys")
    node: Any = start
    sourced = start if "source" in start else None
    for depth, key in enumerate(keys):
        if key == "source":
            raise PoolError(f"pool.{path}: a source is not a parameter (an overridden group's source becomes "
                            "'assumed')")
        last = depth == len(keys) - 1
        if key not in node:
            allowed = _creatable(schema, depth, keys[0] if depth else "")
            if key not in allowed:
                there = sorted(k for k in node if k != "source")
                raise PoolError(f"pool.{path}: {where} has no key {key!r}; there: {there}"
                                f"{did_you_mean(key, [*there, *allowed])}")
            node[key] = value if last else {"source": "assumed"}
        elif last and isinstance(node[key], dict) and set(node[key]) - {"source"} == set(DOMAINS):
            node[key].update(dict.fromkeys(DOMAINS, value))  # a per-domain object: every domain
        elif last and isinstance(node[key], (dict, list)):
            inner = sorted(k for k in node[key] if k != "source") if isinstance(node[key], dict) else "a list"
            raise PoolError(f"pool.{path}: names {where}.{key}, an object ({inner}); name one of its keys")
        elif last:
            node[key] = value
        elif not isinstance(node[key], dict):
            raise PoolError(f"pool.{path}: {where}.{key} is a value, not an object with key {keys[depth + 1]!r}")
        if not last:
            node = node[key]
            where = f"{where}.{key}" if where != "(pool)" else key
            if "source" in node:
                sourced = node
    if sourced is not None:
        sourced["source"] = "assumed"


@functools.lru_cache(maxsize=32)
def load_with_set(pool: str, pool_set: str) -> PoolSpec:
    """The pool ``pool`` (a shipped name or a pool file) with the overrides ``pool_set`` applied and validated by
    ``parse_pool``; cached, since every env of a run and every check of its config loads the same one. Errors are
    ``PoolError`` naming the pool, the override set and the parser's field and range."""
    path = pool_file(pool)
    raw, _ = read_pool_file(path)  # the base pool's own errors are the file's, not the overrides'
    try:
        return parse_pool(apply_set(raw, parse_set(pool_set)), name=Path(path).stem)
    except PoolError as err:
        raise PoolError(f"pool {pool!r} with env.pool_set {pool_set!r}: {err}") from None


def env_pool(pool: str, pool_set: str) -> str | PoolSpec:
    """The ``pool`` env option for a config's ``env.pool`` and ``env.pool_set``: the name unchanged when there is no
    override (the env loads it as before), else the overridden pool."""
    return load_with_set(pool, pool_set) if pool_set.strip() else pool
