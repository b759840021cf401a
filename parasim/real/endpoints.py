"""The endpoint map: which OpenAI-compatible server answers for each pool model id.

One file (YAML, JSON or TOML) maps a pool model id (the name the manager writes in ``"model"``) to a server
and its call policy. ``parasim serve-pool`` prints exactly this shape, so its output can be saved and
read back here; users with their own servers (vLLM, SGLang, a hosted API) write it by hand::

    endpoints:
      qwen3-30b-a3b:
        base_url: http://127.0.0.1:8101/v1   # "/v1" is appended when missing
        model: Qwen/Qwen3-30B-A3B             # the name the server serves (default: the pool id)
        max_concurrency: 16                   # calls in flight to this server, all episodes together
        timeout_s: 120                        # per attempt
        retries: 2                            # extra attempts after a timeout / 5xx / dropped connection
        backoff_s: 0.5                        # first retry delay, doubled each retry
        max_tokens: 1024
        temperature: 0.7
        api_key_env: OPENAI_API_KEY           # optional: read the key from this variable
        input_per_mtok: 0.1                   # optional USD prices; default: the pool's
        output_per_mtok: 0.4
    termination: {model: qwen3-30b-a3b, max_tokens: 256}   # optional; default: the first endpoint

A bare mapping without the ``endpoints`` key is accepted too. The fields are declared once (``Endpoint``,
``TerminationSpec``, with ``parasim.config.fields``); errors name the field, the value and the allowed range.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from parasim.config.fields import ConfigError, build, load_file, opt, validate

T = TypeVar("T")


class EndpointError(ConfigError):
    """An invalid endpoint map; the message names the field path and the allowed values."""


_URL = r"https?://\S+"
_NAME = r"\S(.*\S)?"


@dataclass(frozen=True)
class Endpoint:
    """One pool model's server and the policy its calls follow."""

    model_id: str = opt(pattern=_NAME, what="a non-empty string", help="the pool model id the manager names")
    base_url: str = opt(pattern=_URL, what="an http(s) URL", help='the server\'s URL ("/v1" is appended when missing)')
    model: str = opt(pattern=_NAME, what="a non-empty string", help="the name the server serves")
    max_concurrency: int = opt(8, lo=1, hi=4096, help="calls in flight to this server, all episodes together")
    timeout_s: float = opt(120.0, lo=0.01, hi=86400, help="per attempt")
    retries: int = opt(2, lo=0, hi=20, help="extra attempts after a timeout / 5xx / dropped connection")
    backoff_s: float = opt(0.5, lo=0, hi=600, help="first retry delay, doubled each retry")
    max_tokens: int = opt(1024, lo=1, hi=1 << 20, help="completion tokens per call")
    temperature: float = opt(0.7, lo=0, hi=10, help="sampling temperature")
    api_key_env: str | None = opt(None, pattern=_NAME, what="a non-empty string",
                                  help="read the API key from this environment variable")
    input_per_mtok: float | None = opt(None, lo=0, hi=1e4, help="USD per million input tokens (default: the pool's)")
    output_per_mtok: float | None = opt(None, lo=0, hi=1e4, help="USD per million output tokens (default: the pool's)")

    def __post_init__(self) -> None:
        _checked(validate, self, f"endpoints.{self.model_id}")
        object.__setattr__(self, "base_url", normalize_base_url(self.base_url))

    @property
    def server_root(self) -> str:
        """The server's root URL (``base_url`` without ``/v1``): where vLLM's ``/health`` and dev routes live."""
        return self.base_url.removesuffix("/v1")

    def headers(self) -> dict[str, str]:
        """Request headers; the API key is read from the environment at call time, never stored in files."""
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def to_json(self) -> dict[str, Any]:
        """The entry as written in an endpoint map (without the id, which is the key)."""
        out = asdict(self)
        out.pop("model_id")
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class TerminationSpec:
    """Which endpoint synthesizes the final answer, and how long it may write."""

    model: str = opt(pattern=_NAME, what="a non-empty string", help="the pool model id that writes final answers")
    max_tokens: int = opt(256, lo=1, hi=1 << 20, help="tokens of the final answer")
    temperature: float = opt(0.0, lo=0, hi=10, help="sampling temperature of the final answer")

    def __post_init__(self) -> None:
        _checked(validate, self, "termination")


@dataclass(frozen=True)
class EndpointMap:
    """All endpoints by pool model id, plus the termination model's settings."""

    endpoints: dict[str, Endpoint]
    termination: TerminationSpec
    extra: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, model_id: str) -> Endpoint:
        return self.endpoints[model_id]

    @property
    def model_ids(self) -> tuple[str, ...]:
        return tuple(self.endpoints)

    def to_json(self) -> dict[str, Any]:
        return {"endpoints": {k: e.to_json() for k, e in self.endpoints.items()},
                "termination": asdict(self.termination), **self.extra}


def _checked(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with the shared checker's errors raised as ``EndpointError``."""
    try:
        return fn(*args, **kwargs)
    except EndpointError:
        raise
    except ConfigError as err:
        raise EndpointError(str(err)) from None


def normalize_base_url(url: str) -> str:
    """``http://h:p`` or ``http://h:p/v1/`` -> ``http://h:p/v1`` (the OpenAI client convention)."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def parse_endpoint(model_id: str, raw: Any) -> Endpoint:
    """Validate one entry of the map (unknown keys refused, each value checked against ``Endpoint``'s fields)."""
    path = f"endpoints.{model_id}"
    if not isinstance(raw, Mapping):
        raise EndpointError(f"{path}: expected a mapping with at least 'base_url', got {type(raw).__name__}")
    return _checked(build, Endpoint, {"model": model_id, **raw}, path, fixed={"model_id": model_id})


def parse_endpoint_map(raw: Any, name: str = "endpoints") -> EndpointMap:
    """Validate a parsed endpoint map (see the module docstring for the shape)."""
    if not isinstance(raw, Mapping):
        raise EndpointError(f"{name}: expected a mapping of pool model id -> endpoint, got {type(raw).__name__}")
    extra = {k: v for k, v in raw.items() if k not in ("endpoints", "termination")} if "endpoints" in raw else {}
    entries = raw.get("endpoints", raw)
    if not isinstance(entries, Mapping) or not entries:
        raise EndpointError(f"{name}.endpoints: expected a non-empty mapping of pool model id -> endpoint")
    endpoints = {str(mid): parse_endpoint(str(mid), e) for mid, e in entries.items()}
    term_raw = raw.get("termination", {}) if "endpoints" in raw else {}
    if not isinstance(term_raw, Mapping):
        raise EndpointError(f"{name}.termination: expected a mapping, got {type(term_raw).__name__}")
    termination = _checked(build, TerminationSpec, {"model": next(iter(endpoints)), **term_raw}, "termination")
    if termination.model not in endpoints:
        raise EndpointError(f"termination.model = {termination.model!r}: must be one of {sorted(endpoints)}")
    return EndpointMap(endpoints=endpoints, termination=termination, extra=extra)


def load_endpoint_map(source: str | Path | Mapping[str, Any] | EndpointMap) -> EndpointMap:
    """An endpoint map from a YAML / JSON / TOML file, a parsed mapping, or an ``EndpointMap`` (returned as is)."""
    if isinstance(source, EndpointMap):
        return source
    if isinstance(source, Mapping):
        return parse_endpoint_map(source)
    return parse_endpoint_map(_checked(load_file, source, "endpoints"), name=str(source))
