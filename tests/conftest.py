"""Fixtures shared by the real-tools test modules: the scripted OpenAI-compatible server on loopback
(``tests/fake_server.py``, one per module) and a backend over it, reset to its scripted defaults per test."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_real_backend import _control, _emap, _free_port, _start_fake, _stop

from parasim.real.backend import RealToolBackend


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = _free_port()
    proc = _start_fake(port)
    yield f"http://127.0.0.1:{port}"
    _stop(proc)


@pytest.fixture
def backend(server: str) -> Iterator[RealToolBackend]:
    _control(server)
    with RealToolBackend(_emap(server)) as b:
        yield b
