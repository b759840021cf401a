"""The endpoint map: which OpenAI-compatible server answers for each pool model id.

One file (YAML or JSON) maps a pool model id (the name the manager writes in ``"model"``) to a server
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

A bare mapping without the ``endpoints`` key is accepted too. Errors name the field and the allowed range.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class EndpointError(ValueError):
    """An invalid endpoint map; the message names the field path and the allowed values."""


@dataclass(frozen=True)
class Endpoint:
    """One pool model's server and the policy its calls follow."""

    model_id: str
    base_url: str
    model: str
    max_concurrency: int = 8
    timeout_s: float = 120.0
    retries: int = 2
    backoff_s: float = 0.5
    max_tokens: int = 1024
    temperature: float = 0.7
    api_key_env: str | None = None
    input_per_mtok: float | None = None
    output_per_mtok: float | None = None

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

    model: str
    max_tokens: int = 256
    temperature: float = 0.0


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


def normalize_base_url(url: str) -> str:
    """``http://h:p`` or ``http://h:p/v1/`` -> ``http://h:p/v1`` (the OpenAI client convention)."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _number(raw: Mapping[str, Any], key: str, path: str, lo: float, hi: float, default: Any, integer: bool) -> Any:
    value = raw.get(key, default)
    if value is None:
        return None
    kind = "an integer" if integer else "a number"
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not lo <= value <= hi or (integer and value != int(value))):
        raise EndpointError(f"{path}.{key}: expected {kind} in [{lo:g}, {hi:g}], got {value!r}")
    return int(value) if integer else float(value)


def _string(raw: Mapping[str, Any], key: str, path: str, default: str | None) -> str | None:
    value = raw.get(key, default)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise EndpointError(f"{path}.{key}: expected a non-empty string, got {value!r}")
    return value


_KEYS = {"base_url", "model", "max_concurrency", "timeout_s", "retries", "backoff_s", "max_tokens", "temperature",
         "api_key_env", "input_per_mtok", "output_per_mtok"}


def parse_endpoint(model_id: str, raw: Any) -> Endpoint:
    """Validate one entry of the map."""
    path = f"endpoints.{model_id}"
    if not isinstance(raw, Mapping):
        raise EndpointError(f"{path}: expected a mapping with at least 'base_url', got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise EndpointError(f"{path}.{unknown[0]}: unknown key; allowed: {sorted(_KEYS)}")
    base_url = _string(raw, "base_url", path, None)
    if base_url is None or not base_url.startswith(("http://", "https://")):
        raise EndpointError(f"{path}.base_url: expected an http(s) URL, got {raw.get('base_url')!r}")
    return Endpoint(
        model_id=model_id,
        base_url=normalize_base_url(base_url),
        model=_string(raw, "model", path, model_id) or model_id,
        max_concurrency=_number(raw, "max_concurrency", path, 1, 4096, 8, True),
        timeout_s=_number(raw, "timeout_s", path, 0.01, 86400, 120.0, False),
        retries=_number(raw, "retries", path, 0, 20, 2, True),
        backoff_s=_number(raw, "backoff_s", path, 0, 600, 0.5, False),
        max_tokens=_number(raw, "max_tokens", path, 1, 1 << 20, 1024, True),
        temperature=_number(raw, "temperature", path, 0, 10, 0.7, False),
        api_key_env=_string(raw, "api_key_env", path, None),
        input_per_mtok=_number(raw, "input_per_mtok", path, 0, 1e4, None, False),
        output_per_mtok=_number(raw, "output_per_mtok", path, 0, 1e4, None, False),
    )


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
    term_model = _string(term_raw, "model", "termination", next(iter(endpoints)))
    if term_model not in endpoints:
        raise EndpointError(f"termination.model: expected one of {sorted(endpoints)}, got {term_model!r}")
    termination = TerminationSpec(
        model=term_model,
        max_tokens=_number(term_raw, "max_tokens", "termination", 1, 1 << 20, 256, True),
        temperature=_number(term_raw, "temperature", "termination", 0, 10, 0.0, False),
    )
    return EndpointMap(endpoints=endpoints, termination=termination, extra=extra)


def load_endpoint_map(source: str | Path | Mapping[str, Any] | EndpointMap) -> EndpointMap:
    """An endpoint map from a YAML / JSON file, a parsed mapping, or an ``EndpointMap`` (returned as is)."""
    if isinstance(source, EndpointMap):
        return source
    if isinstance(source, Mapping):
        return parse_endpoint_map(source)
    path = Path(source)
    return parse_endpoint_map(read_config_file(path, "endpoints"), name=str(path))


def read_config_file(path: Path, what: str) -> Any:
    """The parsed content of a YAML (``.yaml`` / ``.yml``) or JSON file; errors name the file and the problem."""
    if not path.is_file():
        raise EndpointError(f"{what}: no such file {str(path)!r}")
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise EndpointError(f"{path}: not valid YAML ({err})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise EndpointError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from None
