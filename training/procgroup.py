"""Worker processes that never outlive the process that started them.

A sweep runs its points in ``spawn`` processes (no forked torch state). ``concurrent.futures``'s process pool
leaves them behind when the sweep is SIGKILLed: its idle workers, multiprocessing's resource tracker (kept
alive by the workers' copies of its pipe) and the named semaphores of the pool's queues in /dev/shm (the
tracker unlinks them only once every holder of its pipe is gone). Here instead:

- each worker asks Linux to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``; elsewhere a thread watches
  the parent) and exits at once if the parent died before it asked, so the tracker sees its pipe close and
  exits too;
- the worker imports the function it runs (torch, numba: seconds) only after that, so a parent killed during
  the import still takes the worker with it;
- each worker leads a process group of its own: a terminal's Ctrl-C reaches only the sweep, which kills its
  workers (and anything they started) at once instead of letting them finish their points or print tracebacks;
- the parent talks to each worker over a pipe of its own: no queue, no lock, hence no named semaphore at all.
"""
from __future__ import annotations

import ctypes
import importlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Generator, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnContext
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>


def die_with_parent(parent_pid: int, signo: int = signal.SIGKILL) -> None:
    """Make the calling process die when ``parent_pid``, its parent, does (on Linux by ``signo``: SIGTERM lets a
    process stop what it started, as serve-pool stops its servers); exit now if that has happened."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signo, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    else:
        threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the request: nobody would deliver the signal
        os._exit(1)


def _exit_when_orphaned(parent_pid: int) -> None:
    """Where there is no parent-death signal: exit once the process has been re-parented."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)


def _serve(conn: Connection, parent_pid: int, target: str) -> None:
    """A worker's life: tie itself to the parent, then run ``target`` on each task received until EOF."""
    die_with_parent(parent_pid)
    os.setpgid(0, 0)
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent closed the pipe: no more tasks
            return
        conn.send(fn(task))


class _Worker:
    """One spawn process and the parent's end of its pipe; ``task`` is what it is running (None when idle)."""

    def __init__(self, ctx: SpawnContext, target: str) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, os.getpid(), target), name=f"worker:{target}")
        self.proc.start()
        child.close()  # the worker's end lives in the worker only, so its death reads as EOF here
        self.task: Any = None

    def give(self, task: Any) -> None:
        """Send ``task``; a worker that already died shows up as EOF in ``imap_unordered``'s wait."""
        self.task = task
        try:
            self.conn.send(task)
        except OSError:
            pass

    def kill(self) -> None:
        """SIGKILL the worker's process group (the worker and all it started), or the worker alone before it
        made its group."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            self.proc.kill()

    def close(self) -> None:
        """Close the pipe (an idle worker then returns) and reap the process."""
        self.conn.close()
        self.proc.join()


def imap_unordered(target: str, tasks: Sequence[T], workers: int, lost: Callable[[T, int | None], R]
                   ) -> Generator[R, None, None]:
    """``target(task)`` for every task on at most ``workers`` spawn processes, results as they finish.

    ``target`` is ``"module:function"``, imported in each worker once it is tied to this process. A worker
    that dies mid-task yields ``lost(task, exit_code)`` and is replaced. When the caller stops early (an
    exception, ``close()``, Ctrl-C), the workers are killed, not waited for; otherwise idle ones exit on EOF.
    """
    ctx = mp.get_context("spawn")
    pending = list(reversed(tasks))
    idle: list[_Worker] = []
    busy: dict[Connection, _Worker] = {}
    try:
        while pending or busy:
            while pending and len(busy) < max(1, workers):
                worker = idle.pop() if idle else _Worker(ctx, target)
                worker.give(pending.pop())
                busy[worker.conn] = worker
            for conn in wait(list(busy)):
                worker = busy.pop(conn)
                try:
                    result = worker.conn.recv()
                except (EOFError, OSError):
                    worker.close()
                    yield lost(worker.task, worker.proc.exitcode)
                    continue
                worker.task = None
                idle.append(worker)
                yield result
    except BaseException:
        for worker in [*idle, *busy.values()]:
            worker.kill()
        raise
    finally:
        for worker in [*idle, *busy.values()]:
            worker.close()
