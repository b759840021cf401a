"""A memory cgroup per sandboxed call: one bound on the memory of every process the call starts.

Why: ``RLIMIT_AS`` bounds one process, and a call may start many (a sandbox allowed 64 processes of 2 GiB each,
so 4 children of 1.5 GB took 6 GB of the host). A cgroup charges every page that any process of the call
touches (its heap, the tmpfs files it writes) to one counter with one limit; past the limit the kernel reclaims,
then OOM-kills inside that group only, never elsewhere on the host.

Where: cgroup v2 where this process's cgroup already delegates the ``memory`` controller to its children (its
``cgroup.subtree_control`` lists it), and cgroup v1's memory hierarchy, where a child group can be made (as root,
usually). :func:`find_parent` tries to make, limit and remove a probe group and says why not where it cannot;
the sandbox then bounds the call by its process cap times a per-process limit (``parasim.tools.sandbox``).
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass

_CGROUP_ROOT = "/sys/fs/cgroup"
_REMOVE_WAIT_S = 3.0  # how long a finished call's group may take to empty (namespace teardown is asynchronous)


@dataclass(frozen=True)
class CgroupParent:
    """The directory under which each call's group is made, and its cgroup version (1 or 2)."""

    path: str
    version: int

    def limit_files(self, limit: int) -> list[tuple[str, str]]:
        """(file, value) to write, in order, for a hard limit of ``limit`` bytes with no swap beyond it."""
        if self.version == 2:
            return [("memory.max", str(limit)), ("memory.swap.max", "0")]
        return [("memory.limit_in_bytes", str(limit)), ("memory.memsw.limit_in_bytes", str(limit))]

    @property
    def peak_file(self) -> str:
        return "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"


def _own_cgroups() -> dict[str, str]:
    """controller list -> path of this process's cgroup (``"" `` is the v2 hierarchy), from /proc/self/cgroup."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            out[controllers] = path
    return out


def _candidates() -> list[CgroupParent]:
    try:
        own = _own_cgroups()
    except OSError:
        return []
    found = []
    if "" in own and os.path.exists(f"{_CGROUP_ROOT}/cgroup.controllers"):
        path = os.path.join(_CGROUP_ROOT, own[""].lstrip("/"))
        with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.subtree_control")) as f:
            if "memory" in f.read().split():
                found.append(CgroupParent(path, 2))
    for controllers, path in own.items():
        if "memory" in controllers.split(",") and os.path.isdir(f"{_CGROUP_ROOT}/memory"):
            found.append(CgroupParent(os.path.join(_CGROUP_ROOT, "memory", path.lstrip("/")), 1))
    return found


def find_parent() -> tuple[CgroupParent | None, str]:
    """Where calls' groups can be made here, or None and the reason; checked by making, limiting and removing a
    probe group."""
    reasons = []
    for parent in _candidates():
        try:
            group = CallGroup(parent, 64 << 20)
        except OSError as err:
            reasons.append(f"{parent.path}: {err.strerror or err}")
            continue
        group.remove()
        return parent, ""
    return None, "; ".join(reasons) or "no memory cgroup controller this process may use"


class CallGroup:
    """One call's cgroup, limited to ``limit`` bytes: ``join`` (in the child, before exec) moves a process in;
    ``peak`` reads the most it held; ``kill`` and ``remove`` end it."""

    def __init__(self, parent: CgroupParent, limit: int) -> None:
        self.parent = parent
        self.path = os.path.join(parent.path, f"parasim-sandbox-{uuid.uuid4().hex}")
        os.mkdir(self.path)
        try:
            for name, value in parent.limit_files(limit):
                file = os.path.join(self.path, name)
                if name.startswith("memory.memsw") or name == "memory.swap.max":
                    if not os.path.exists(file):  # no swap accounting (or no swap): nothing to bound
                        continue
                with open(file, "w") as f:
                    f.write(value)
            self._procs = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            os.rmdir(self.path)
            raise

    def join(self) -> None:
        """Move the calling process into the group (a ``preexec_fn``: runs in the child between fork and exec;
        "0" is the writer itself)."""
        os.write(self._procs, b"0")

    def peak(self) -> int | None:
        """The most memory the group held, in bytes (None where the kernel does not say)."""
        try:
            with open(os.path.join(self.path, self.parent.peak_file)) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(line) for line in f if line.strip()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL every process left in the group."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left and remove the group once it is empty (waits up to a few seconds)."""
        os.close(self._procs)
        deadline = time.monotonic() + _REMOVE_WAIT_S
        while True:
            self.kill()
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # still busy: left for the kernel to empty; its name is unique, nothing reuses it
                time.sleep(0.02)
