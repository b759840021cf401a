"""parasim serve-pool: one vLLM OpenAI server per pool model, until SIGINT / SIGTERM.

Prints the endpoint map (JSON) on stdout once every server is healthy, and writes it to --endpoints-out,
so that tools="real" runs and trainers read the same file. Progress goes to stderr. Exit code 0 after a
clean shutdown on a signal, 1 when a server fails to start or dies while serving (the others are stopped).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("serve-pool", help="start one vLLM server per pool model and print the endpoints",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="serving config, YAML or JSON (see parasim.real.serve_pool)")
    parser.add_argument("--endpoints-out", default=None, help="also write the endpoint map to this JSON file")
    parser.add_argument("--dry-run", action="store_true", help="print each server's command and exit")
    parser.set_defaults(func=run)


def _say(message: str) -> None:
    print(f"[serve-pool] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from parasim.real.endpoints import EndpointError
    from parasim.real.serve_pool import ServerPool, load_serve_config, server_command, server_env

    try:
        config = load_serve_config(args.config)
    except EndpointError as err:
        _say(f"error: {err}")
        return 2
    if args.dry_run:
        for server in config.models:
            env = server_env(config, server)
            shown = {k: env[k] for k in ("CUDA_VISIBLE_DEVICES", "VLLM_SERVER_DEV_MODE") if k in env}
            print(" ".join([*(f"{k}={v}" for k, v in shown.items()), *server_command(config, server)]))
        return 0

    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    pool = ServerPool(config)
    try:
        pool.start()
        _say(f"started {len(config.models)} server(s); logs in {config.log_dir}")
        ready = pool.wait_ready(cancel=stop.is_set)
        for model_id, seconds in ready.items():
            _say(f"{model_id} ready after {seconds:.1f} s")
        endpoints = pool.endpoint_map()
        if args.endpoints_out:
            out = Path(args.endpoints_out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(endpoints, indent=1) + "\n")
        print(json.dumps(endpoints), flush=True)
        while not stop.wait(1.0):
            dead = pool.dead()
            if dead:
                for model_id, code in dead.items():
                    _say(f"{model_id} exited with code {code}:\n{pool.log_tail(model_id)}")
                return 1
        _say("signal received, stopping servers")
        return 0
    except InterruptedError:
        _say("signal received during startup, stopping servers")
        return 0
    except RuntimeError as err:
        _say(f"error: {err}")
        return 1
    finally:
        pool.stop()
        for signo, handler in previous.items():
            signal.signal(signo, handler)
        _say("all servers stopped")
