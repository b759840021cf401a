"""Start one vLLM OpenAI-compatible server per pool model, wait until each is healthy, stop them cleanly.

``parasim serve-pool --config pool_serving.yaml`` runs this and prints the endpoint map that the real
backend reads (``parasim.real.endpoints``). The config (YAML or JSON)::

    python: .venv-vllm/bin/python      # an interpreter with vLLM installed (default: this one)
    host: 127.0.0.1
    base_port: 8100                    # model i listens on base_port + i unless it sets ``port``
    gpus: [0, 1, 2, 3]                 # GPUs to hand out in order; a model takes ``num_gpus`` of them
    log_dir: runs/serve_pool           # one log file per server
    startup_timeout_s: 900
    env: {VLLM_CPU_KVCACHE_SPACE: "1"} # for every server
    endpoint: {max_concurrency: 32, timeout_s: 300, retries: 2}   # call policy written to the map
    termination: {model: qwen3-30b-a3b, max_tokens: 512}
    models:
      - id: qwen3-30b-a3b              # the pool model id the manager names
        path: /ckpt/Qwen3-30B-A3B-Instruct-2507
        num_gpus: 2                    # or ``gpus: [4, 5]``; adds --tensor-parallel-size 2
        args: [--max-model-len, "32768"]
        reloadable: false              # true: VLLM_SERVER_DEV_MODE=1, so reload_weights works (trainers)

Each server runs in its own session (process group), so shutdown reaches vLLM's engine-core children:
SIGTERM to the group, then SIGKILL after ``grace_s``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parasim.real.endpoints import EndpointError, parse_endpoint, parse_endpoint_map, read_config_file
from parasim.real.vllm_client import is_ready, reloadable_server_args

_MODEL_KEYS = {"id", "path", "served_name", "port", "gpus", "num_gpus", "args", "env", "reloadable", "endpoint"}
_TOP_KEYS = {"python", "host", "base_port", "gpus", "log_dir", "startup_timeout_s", "grace_s", "env", "endpoint",
             "termination", "models"}


@dataclass(frozen=True)
class ModelServer:
    """How to launch one model's server."""

    model_id: str
    path: str
    served_name: str
    port: int
    gpus: tuple[int, ...] | None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    reloadable: bool = False
    endpoint: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class ServePoolConfig:
    """A validated serving config (see the module docstring)."""

    models: tuple[ModelServer, ...]
    python: str = sys.executable
    host: str = "127.0.0.1"
    log_dir: str = "runs/serve_pool"
    startup_timeout_s: float = 900.0
    grace_s: float = 30.0
    env: tuple[tuple[str, str], ...] = ()
    termination: dict[str, Any] = field(default_factory=dict)


def _str_map(raw: Any, path: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise EndpointError(f"{path}: expected a mapping of variable -> value, got {type(raw).__name__}")
    return tuple((str(k), str(v)) for k, v in raw.items())


def _int(raw: Mapping[str, Any], key: str, path: str, lo: int, hi: int, default: int | None) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        where = f"{path}.{key}" if path else key
        raise EndpointError(f"{where}: expected an integer in [{lo}, {hi}], got {value!r}")
    return value


def parse_serve_config(raw: Any, name: str = "serve config") -> ServePoolConfig:
    """Validate a parsed serving config; errors name the field and the allowed values."""
    if not isinstance(raw, Mapping):
        raise EndpointError(f"{name}: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise EndpointError(f"{unknown[0]}: unknown key; allowed: {sorted(_TOP_KEYS)}")
    models_raw = raw.get("models")
    if not isinstance(models_raw, list) or not models_raw:
        raise EndpointError("models: expected a non-empty list of {id, path, ...}")
    base_port = _int(raw, "base_port", "", 1, 65535, 8100)
    free_gpus = list(raw.get("gpus") or [])
    policy = raw.get("endpoint", {}) or {}
    models, ports, ids = [], set(), set()
    for i, m in enumerate(models_raw):
        path = f"models[{i}]"
        if not isinstance(m, Mapping):
            raise EndpointError(f"{path}: expected a mapping, got {type(m).__name__}")
        bad = sorted(set(m) - _MODEL_KEYS)
        if bad:
            raise EndpointError(f"{path}.{bad[0]}: unknown key; allowed: {sorted(_MODEL_KEYS)}")
        for key in ("id", "path"):
            if not isinstance(m.get(key), str) or not m[key].strip():
                raise EndpointError(f"{path}.{key}: expected a non-empty string, got {m.get(key)!r}")
        if m["id"] in ids:
            raise EndpointError(f"{path}.id: duplicate model id {m['id']!r}")
        ids.add(m["id"])
        port = _int(m, "port", path, 1, 65535, base_port + i)
        if port in ports:
            raise EndpointError(f"{path}.port: port {port} is used by another model")
        ports.add(port)
        gpus = m.get("gpus")
        if gpus is None and free_gpus:
            count = _int(m, "num_gpus", path, 1, 64, 1)
            if count > len(free_gpus):
                raise EndpointError(f"{path}.num_gpus: {count} requested, {len(free_gpus)} left in gpus")
            gpus, free_gpus = free_gpus[:count], free_gpus[count:]
        if gpus is not None and (not isinstance(gpus, list) or not all(isinstance(g, int) for g in gpus)):
            raise EndpointError(f"{path}.gpus: expected a list of GPU indices, got {gpus!r}")
        args = m.get("args", [])
        if not isinstance(args, list):
            raise EndpointError(f"{path}.args: expected a list of command-line arguments, got {args!r}")
        entry = {**policy, **(m.get("endpoint") or {}), "base_url": f"http://{raw.get('host', '127.0.0.1')}:{port}"}
        parse_endpoint(m["id"], entry)  # the policy must be valid before anything starts
        models.append(ModelServer(
            model_id=m["id"], path=m["path"], served_name=str(m.get("served_name") or m["id"]), port=port,
            gpus=None if gpus is None else tuple(gpus), args=tuple(str(a) for a in args),
            env=_str_map(m.get("env"), f"{path}.env"), reloadable=bool(m.get("reloadable", False)),
            endpoint=tuple((k, v) for k, v in entry.items() if k != "base_url")))
    startup = raw.get("startup_timeout_s", 900.0)
    if isinstance(startup, bool) or not isinstance(startup, (int, float)) or startup <= 0:
        raise EndpointError(f"startup_timeout_s: expected a positive number of seconds, got {startup!r}")
    term = raw.get("termination") or {}
    if not isinstance(term, Mapping):
        raise EndpointError(f"termination: expected a mapping, got {type(term).__name__}")
    return ServePoolConfig(
        models=tuple(models), python=str(raw.get("python") or sys.executable), host=str(raw.get("host", "127.0.0.1")),
        log_dir=str(raw.get("log_dir", "runs/serve_pool")), startup_timeout_s=float(startup),
        grace_s=float(raw.get("grace_s", 30.0)), env=_str_map(raw.get("env"), "env"), termination=dict(term))


def load_serve_config(path: str | Path) -> ServePoolConfig:
    """Read a serving config from YAML or JSON."""
    path = Path(path)
    return parse_serve_config(read_config_file(path, "config"), str(path))


def server_command(config: ServePoolConfig, server: ModelServer) -> list[str]:
    """The vLLM command line of one server."""
    argv = [config.python, "-m", "vllm.entrypoints.openai.api_server", "--model", server.path,
            "--served-model-name", server.served_name, "--host", config.host, "--port", str(server.port)]
    if server.gpus and len(server.gpus) > 1 and "--tensor-parallel-size" not in server.args:
        argv += ["--tensor-parallel-size", str(len(server.gpus))]
    if server.reloadable:
        argv += reloadable_server_args()[0]
    return argv + list(server.args)


def server_env(config: ServePoolConfig, server: ModelServer) -> dict[str, str]:
    """The server's environment: ours, the config's, the model's, its GPUs, and for reloadable models the dev
    routes and the worker extension's directory (``parasim.real.vllm_client``)."""
    env = {**os.environ, **dict(config.env), **dict(server.env)}
    if server.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in server.gpus)
    if server.reloadable:
        extra = reloadable_server_args()[1]
        env["VLLM_SERVER_DEV_MODE"] = extra["VLLM_SERVER_DEV_MODE"]
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra["PYTHONPATH"], env.get("PYTHONPATH", "")) if p)
    return env


class ServerPool:
    """The running servers of a config; a context manager that always stops what it started."""

    def __init__(self, config: ServePoolConfig) -> None:
        self.config = config
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def start(self) -> None:
        """Launch every server (all at once: loading overlaps)."""
        log_dir = Path(self.config.log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        for server in self.config.models:
            log = self.logs[server.model_id] = log_dir / f"{server.model_id.replace('/', '_')}.log"
            with open(log, "ab") as handle:
                try:
                    self.procs[server.model_id] = subprocess.Popen(
                        server_command(self.config, server), env=server_env(self.config, server),
                        stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
                except OSError as err:
                    raise RuntimeError(f"python: cannot start {self.config.python!r} for {server.model_id}: "
                                       f"{err}") from None

    def wait_ready(self, interval_s: float = 0.5, cancel: Callable[[], bool] | None = None) -> dict[str, float]:
        """Block until every server is healthy and lists its model; seconds to ready per model id.

        Raises ``RuntimeError`` with the tail of the log when a server exits or misses the startup timeout,
        ``InterruptedError`` as soon as ``cancel()`` is true (a signal during a long model load).
        """
        start, ready = time.monotonic(), {}
        while len(ready) < len(self.config.models):
            if cancel is not None and cancel():
                raise InterruptedError("startup cancelled")
            for server in self.config.models:
                if server.model_id in ready:
                    continue
                code = self.procs[server.model_id].poll()
                if code is not None:
                    raise RuntimeError(f"server {server.model_id} exited with code {code} during startup:\n"
                                       f"{self.log_tail(server.model_id)}")
                if is_ready(f"http://{self.config.host}:{server.port}", server.served_name):
                    ready[server.model_id] = time.monotonic() - start
            if time.monotonic() - start > self.config.startup_timeout_s:
                late = [m.model_id for m in self.config.models if m.model_id not in ready]
                raise RuntimeError(f"servers {late} not ready after {self.config.startup_timeout_s:g} s:\n"
                                   f"{self.log_tail(late[0])}")
            if len(ready) < len(self.config.models):
                time.sleep(interval_s)
        return ready

    def dead(self) -> dict[str, int]:
        """Servers that have exited, with their exit codes."""
        return {mid: p.returncode for mid, p in self.procs.items() if p.poll() is not None}

    def log_tail(self, model_id: str, lines: int = 30) -> str:
        path = self.logs.get(model_id)
        if path is None or not path.is_file():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def endpoint_map(self) -> dict[str, Any]:
        """The map the backend reads: ``{"endpoints": {id: {base_url, model, ...}}, "termination": ...}``."""
        raw = {"endpoints": {s.model_id: {**dict(s.endpoint), "base_url": f"http://{self.config.host}:{s.port}/v1",
                                          "model": s.served_name} for s in self.config.models}}
        if self.config.termination:
            raw["termination"] = self.config.termination
        return parse_endpoint_map(raw).to_json()  # validated, defaults filled in

    def stop(self) -> None:
        """SIGTERM every server's process group, wait ``grace_s``, SIGKILL what is left, reap."""
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.config.grace_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGKILL)  # children that outlived their parent, if any
            proc.wait()

    def __enter__(self) -> ServerPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, signo: int) -> None:
    try:
        os.killpg(pgid, signo)
    except (ProcessLookupError, PermissionError):
        pass
