"""Start one vLLM OpenAI-compatible server per pool model, wait until each is healthy, stop them cleanly.

``parasim serve-pool --config pool_serving.yaml`` runs this and prints the endpoint map that the real
backend reads (``parasim.real.endpoints``). The config (YAML, JSON or TOML; fields declared in ``ServeFile`` and
``ModelEntry``)::

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parasim.config.fields import ConfigError, build, load_file, opt
from parasim.real.endpoints import EndpointError, parse_endpoint, parse_endpoint_map
from parasim.real.vllm_client import is_ready, reloadable_server_args

_NAME = r"\S(.*\S)?"


@dataclass(frozen=True)
class ModelEntry:
    """One item of ``models:`` in the serving file (the fields are what the module docstring shows)."""

    id: str = opt(pattern=_NAME, what="a non-empty string", help="the pool model id the manager names")
    path: str = opt(pattern=_NAME, what="a non-empty string", help="the model's weights (an HF directory)")
    served_name: str | None = opt(None, pattern=_NAME, what="a non-empty string",
                                  help="the name the server serves (default: id)")
    port: int | None = opt(None, lo=1, hi=65535, help="the server's port (default: base_port + index)")
    gpus: tuple[int, ...] | None = opt(None, lo=0, hi=4095, help="GPU indices (default: num_gpus from gpus:)")
    num_gpus: int = opt(1, lo=1, hi=64, help="GPUs taken in order from the file's gpus list")
    args: tuple[str, ...] = opt((), help="extra vLLM command-line arguments (strings)")
    env: dict[str, str] = opt(default_factory=dict, help="environment variables of this server")
    reloadable: bool = opt(False, help="VLLM_SERVER_DEV_MODE=1 so that trainers can reload weights")
    endpoint: dict[str, Any] = opt(default_factory=dict, help="call policy written to the endpoint map")


@dataclass(frozen=True)
class ServeFile:
    """The serving file as written (see the module docstring); ``parse_serve_config`` derives the servers."""

    models: tuple[ModelEntry, ...] = opt(help="the servers, one per pool model")
    python: str | None = opt(None, pattern=_NAME, what="a non-empty string",
                             help="an interpreter with vLLM installed (default: this one)")
    host: str = opt("127.0.0.1", pattern=_NAME, what="a non-empty string", help="where every server listens")
    base_port: int = opt(8100, lo=1, hi=65535, help="model i listens on base_port + i unless it sets port")
    gpus: tuple[int, ...] = opt((), lo=0, hi=4095, help="GPUs handed out in order (num_gpus per model)")
    log_dir: str = opt("runs/serve_pool", help="one log file per server")
    startup_timeout_s: float = opt(900.0, lo=0.0, hi=1e6, lo_open=True, help="seconds until every server is ready")
    grace_s: float = opt(30.0, lo=0.0, hi=3600.0, help="seconds between SIGTERM and SIGKILL at shutdown")
    env: dict[str, str] = opt(default_factory=dict, help="environment variables of every server")
    endpoint: dict[str, Any] = opt(default_factory=dict, help="call policy of every model in the endpoint map")
    termination: dict[str, Any] = opt(default_factory=dict, help="the endpoint map's termination entry")


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


def parse_serve_config(raw: Any, name: str = "serve config") -> ServePoolConfig:
    """Validate a parsed serving config; errors name the field, the value and the allowed values."""
    if not isinstance(raw, Mapping):
        raise EndpointError(f"{name}: expected a mapping, got {type(raw).__name__}")
    try:
        spec = build(ServeFile, raw)
    except EndpointError:
        raise
    except ConfigError as err:
        raise EndpointError(str(err)) from None
    if not spec.models:
        raise EndpointError("models: expected a non-empty list of {id, path, ...}")
    free_gpus = list(spec.gpus)
    models, ports, ids = [], set(), set()
    for i, m in enumerate(spec.models):
        path = f"models[{i}]"
        if m.id in ids:
            raise EndpointError(f"{path}.id: duplicate model id {m.id!r}")
        ids.add(m.id)
        port = m.port if m.port is not None else spec.base_port + i
        if port in ports or not 1 <= port <= 65535:
            raise EndpointError(f"{path}.port = {port}: used by another model or outside [1, 65535]")
        ports.add(port)
        gpus = m.gpus
        if gpus is None and free_gpus:
            if m.num_gpus > len(free_gpus):
                raise EndpointError(f"{path}.num_gpus = {m.num_gpus}: only {len(free_gpus)} left in gpus")
            gpus, free_gpus = tuple(free_gpus[:m.num_gpus]), free_gpus[m.num_gpus:]
        entry = {**spec.endpoint, **m.endpoint, "base_url": f"http://{spec.host}:{port}"}
        parse_endpoint(m.id, entry)  # the policy must be valid before anything starts
        models.append(ModelServer(
            model_id=m.id, path=m.path, served_name=m.served_name or m.id, port=port, gpus=gpus, args=m.args,
            env=tuple(m.env.items()), reloadable=m.reloadable,
            endpoint=tuple((k, v) for k, v in entry.items() if k != "base_url")))
    return ServePoolConfig(
        models=tuple(models), python=spec.python or sys.executable, host=spec.host, log_dir=spec.log_dir,
        startup_timeout_s=spec.startup_timeout_s, grace_s=spec.grace_s, env=tuple(spec.env.items()),
        termination=dict(spec.termination))


def load_serve_config(path: str | Path) -> ServePoolConfig:
    """Read a serving config from YAML, JSON or TOML."""
    try:
        raw = load_file(path, "config")
    except ConfigError as err:
        raise EndpointError(str(err)) from None
    return parse_serve_config(raw, str(path))


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
        stop_process_groups(self.procs.values(), self.config.grace_s)

    def __enter__(self) -> ServerPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process_groups(procs: Iterable[subprocess.Popen], grace_s: float) -> None:
    """Stop processes that each lead a process group of their own (``start_new_session``): SIGTERM every group, wait
    up to ``grace_s`` in all, then SIGKILL each group (children that outlived their parent, if any) and reap."""
    procs = list(procs)
    for proc in procs:
        _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def _signal_group(pgid: int, signo: int) -> None:
    try:
        os.killpg(pgid, signo)
    except (ProcessLookupError, PermissionError):
        pass
