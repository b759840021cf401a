"""Fixtures shared by test modules: the scripted OpenAI-compatible server on loopback (``tests/fake_server.py``, one
per module) and a backend over it, reset to its scripted defaults per test, for the real-tools modules; one torch
thread for the training modules that compare floats across runs."""
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


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread for the test (restored after): the training tests compare a population's floats with a
    member's alone, and a multi-threaded reduction order could differ between the two. Imported here, not at the
    top, so that modules without torch do not load it."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# the modules that launch torchrun jobs (two processes each): one worker runs them one after another, since two FSDP
# jobs at once overcommit a 2-core machine
TORCHRUN_MODULES = frozenset({"test_llm_checkpoint", "test_llm_training"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist's ``--dist loadgroup`` (the README's test command), each module stays on one worker, so its
    module-scoped fixtures (a scripted server, the vLLM server) start once, and the torchrun modules share one."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            name = item.module.__name__ if item.module is not None else item.nodeid
            item.add_marker(pytest.mark.xdist_group("torchrun" if name in TORCHRUN_MODULES else name))
