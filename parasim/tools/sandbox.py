"""The ``python`` tool: run model-written code in a bubblewrap sandbox, results as call statuses.

Model code is untrusted, so it runs under ``bwrap`` with no network (its own empty network namespace),
its own pid / ipc / uts / mount namespaces, a read-only view of the system (``/usr``, the interpreter's
prefix and virtual environment, nothing of the project), a private size-capped tmpfs as its working
directory, a seccomp filter refusing new namespaces (see ``seccomp_program``), and rlimits on CPU
time, address space, processes, file size and open files. The only writable places are the work
directory and ``/dev/shm``, both size-capped tmpfs; bwrap's own root and ``/dev`` are read-only.
A wall-clock timeout kills the whole sandbox: bwrap runs a pid-1 reaper inside the pid namespace, so
killing the outer bwrap (``--die-with-parent``) tears the namespace down with every process the code
forked.

Why two privilege paths. ``RLIMIT_NPROC`` is what contains a fork bomb, and the kernel never enforces
it for processes whose real uid is host root. Run as a normal user, bwrap creates a user namespace
and maps the sandbox uid (65534) onto that user: the limit, set inside the new namespace, counts only
the sandbox's own processes. Run as root (CI, containers), a user namespace would map the sandbox
onto host root, so bwrap instead creates the other namespaces with root's own privileges, keeps only
CAP_SETUID / CAP_SETGID / CAP_CHOWN, and the bootstrap below drops to a fresh unprivileged uid (random
per call, so concurrent calls never share a process budget) before any model code runs. Site packages
are activated only after that drop, so no ``.pth`` hook ever runs with privileges. bwrap sets
``no_new_privs`` and mounts everything ``nosuid``, so nothing can climb back.

What the code can learn about the host. Tracebacks, ``sys.path`` and ``/proc`` are what the model
reads back, so none of them names a host path: the interpreter's prefix is bound at ``/opt/python``
and a virtual environment's ``lib`` at ``/opt/venv`` (with a ``pyvenv.cfg`` and ``bin`` links made
for the sandbox); bwrap reads the options that name host paths from a descriptor (``--args``), so
the namespace's pid 1, bwrap's reaper, shows only the sandbox's environment and the interpreter's
command line; and bwrap starts with an empty environment, since its reaper's ``/proc/1/environ`` is
readable by the code on the user-namespace path. What cannot be hidden without copying the
interpreter: ``/proc/self/mountinfo`` prints, for every bind mount, the source directory's path
inside its host filesystem (its 4th field) and the device numbers; the 5th field, where the code
sees it, is neutral. Files of the environment that record host paths themselves (an editable
install's ``.pth``, ``direct_url.json``, ``RECORD``) are readable as they are.

Why a supervisor. A CPU-limit kill must read as TIMEOUT, yet code that ignores SIGXCPU dies of the
hard limit's SIGKILL, which looks like any other kill. The bootstrap therefore forks once: the child
runs the code, the parent waits for it (``wait4``) and reports a SIGKILL after at least the soft
limit's CPU seconds as SIGXCPU, through its exit code (128 + signal, as bwrap reports signals).

One memory bound for the whole call. ``SandboxConfig.memory_bytes`` bounds the memory of all of a call's
processes together. Where a memory cgroup can be made (``parasim.tools.memcg``: cgroup v2 with the controller
delegated, or cgroup v1 as root) each call runs in its own group with that limit (the kernel OOM-kills inside the
group past it) and each process may use all of it (RLIMIT_AS = memory_bytes); ``extra["memory_peak_bytes"]`` is
the group's peak. Elsewhere RLIMIT_AS is memory_bytes / max_processes, so that the process cap times the
per-process limit is the same bound (``Sandbox.memory_per_process``). An RLIMIT_AS alone bounded one process:
with 64 processes allowed, one call's children took 6 GB.

Where bwrap is missing or cannot create namespaces, :class:`Sandbox` refuses with a clear error
unless the user opts into ``SandboxConfig(mode="unsafe-subprocess")`` by name: same rlimits and
timeouts, no isolation at all.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parasim.protocol.schema import CallResult, Status
from parasim.tools import memcg

MODES = ("bwrap", "unsafe-subprocess")
MARKER_ENV = "PARASIM_SANDBOX_RUN"  # every sandboxed process carries it: tests find leftovers by it
WORKDIR = "/tmp"  # the private tmpfs inside the sandbox
SCRIPT_NAME = "main.py"
SANDBOX_UID = 65534  # the sandbox uid seen inside a user namespace (non-root path)
_EXIT_DRAIN_GRACE_S = 0.5  # after the main process exits, how long stray pipe holders may keep output open
MIN_PROCESS_MEMORY = 64 << 20  # the least RLIMIT_AS an interpreter starts with

VENV_DIR = "/opt/venv"  # where the sandbox shows a virtual environment
PYTHON_DIR = "/opt/python"  # where it shows an interpreter prefix that lies outside /usr

# Runs inside the sandbox as ``python -I -S -B -c BOOTSTRAP UID WORKDIR SCRIPT KILL:XCPU NAME:SOFT:HARD...``:
# drop privileges (root path only), fork the supervisor (see the module docstring), then in the child
# set the rlimits, activate site-packages, and execute the script as ``__main__`` with a traceback that
# starts at the model's code. KILL and XCPU are the host's signal numbers (importing ``signal`` would
# load ``enum``). Kept as source so the sandbox needs no parasim import, and free of imports beyond the
# interpreter's own (json and traceback would add tens of milliseconds to every call).
BOOTSTRAP = r'''
def _parasim_boot():
    import os, resource, sys
    uid, workdir, path, signals, *limits = sys.argv[1:]
    if uid != "-" and os.getuid() == 0:
        uid = int(uid)
        os.chown(workdir, uid, uid)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    limits = [(name, int(soft), int(hard)) for name, soft, hard in (item.split(":") for item in limits)]
    child = os.fork()
    if child:
        os.closerange(0, 3)  # the streams are the child's: they close when it exits, as with no supervisor
        kill, xcpu = map(int, signals.split(":"))
        cpu = min([soft for name, soft, _ in limits if name == "RLIMIT_CPU"] or [float("inf")])
        _, status, usage = os.wait4(child, 0)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        if sig == kill and usage.ru_utime + usage.ru_stime >= cpu:
            sig = xcpu
        os._exit(128 + sig if sig else os.WEXITSTATUS(status))
    for name, soft, hard in limits:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    import site
    site.main()
    os.chdir(workdir)
    sys.argv = [path]
    sys.path.insert(0, os.path.dirname(path))
    main = sys.modules["__main__"].__dict__
    for key in [k for k in main if not k.startswith("__")]:
        del main[key]
    main["__file__"] = path
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec")
        exec(code, main)
    except SystemExit:
        raise
    except BaseException as exc:
        import traceback
        tb = None if isinstance(exc, SyntaxError) else exc.__traceback__.tb_next
        traceback.print_exception(type(exc), exc, tb)
        sys.stderr.flush()
        sys.exit(1)
_parasim_boot()
'''


class SandboxUnavailableError(RuntimeError):
    """bwrap is missing or cannot create namespaces here, and no unsafe mode was chosen by name."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one sandboxed call. Defaults fit a tool call on a shared CPU box.

    ``memory_bytes`` bounds the memory of the whole call, every process it starts together (see the module
    docstring: a memory cgroup where one can be made, else RLIMIT_AS of memory_bytes / max_processes per process);
    RLIMIT_AS is also what makes a 4 GiB allocation fail with ``MemoryError`` instead of swapping the host.
    ``max_processes`` counts threads too, so keep it above the thread pools that imported libraries start.
    """

    mode: str = "bwrap"
    timeout_s: float = 10.0
    cpu_time_s: int = 10
    memory_bytes: int = 2 << 30
    max_processes: int = 16
    max_file_bytes: int = 16 << 20
    tmpfs_bytes: int = 64 << 20
    max_open_files: int = 256
    max_output_bytes: int = 16384
    python: str = sys.executable
    extra_ro_binds: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    uid_range: tuple[int, int] = (2_000_000_000, 2_100_000_000)
    bwrap: str = "bwrap"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"SandboxConfig.mode={self.mode!r}: allowed values are {MODES}")
        positive = {
            "timeout_s": self.timeout_s, "cpu_time_s": self.cpu_time_s, "memory_bytes": self.memory_bytes,
            "max_processes": self.max_processes, "max_file_bytes": self.max_file_bytes,
            "tmpfs_bytes": self.tmpfs_bytes, "max_open_files": self.max_open_files,
            "max_output_bytes": self.max_output_bytes,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"SandboxConfig.{name}={value!r}: must be > 0")
        if self.memory_bytes < 64 << 20:
            raise ValueError(f"SandboxConfig.memory_bytes={self.memory_bytes}: must be >= 64 MiB for an interpreter")
        if self.max_open_files < 16:
            raise ValueError(f"SandboxConfig.max_open_files={self.max_open_files}: must be >= 16")
        lo, hi = self.uid_range
        if not 1000 <= lo < hi <= 2**32 - 2:
            raise ValueError(f"SandboxConfig.uid_range={self.uid_range}: need 1000 <= lo < hi <= 2**32-2")
        for path in self.extra_ro_binds:
            if not os.path.isabs(path):
                raise ValueError(f"SandboxConfig.extra_ro_binds: {path!r} must be an absolute path")


@dataclass
class _Capture:
    """Bounded capture of one stream: keeps the head and the tail, counts what it drops.

    The tail matters as much as the head: a traceback's last line is the error.
    """

    limit: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            keep = self.limit - self.limit // 2
            if len(self.tail) > keep:
                del self.tail[: len(self.tail) - keep]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        """The captured bytes as text (invalid UTF-8 replaced), with a marker where bytes were dropped."""
        if not self.dropped:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", errors="replace")
        marker = f"\n[... {self.dropped} bytes truncated ...]\n"
        return self.head.decode("utf-8", errors="replace") + marker + self.tail.decode("utf-8", errors="replace")


_PROBE = ("import json, os, sys, sysconfig\n"
          "print(json.dumps({'prefix': sys.prefix, 'base_prefix': sys.base_prefix,"
          " 'executables': [sys.executable, getattr(sys, '_base_executable', sys.executable)],"
          " 'version': '%d.%d.%d' % sys.version_info[:3], 'xy': '%d.%d' % sys.version_info[:2],"
          " 'shared': bool(sysconfig.get_config_var('Py_ENABLE_SHARED')),"
          " 'libdir': sysconfig.get_config_var('LIBDIR') or ''}))")


@functools.cache
def _probe_interpreter(python: str) -> dict[str, Any]:
    """Prefixes, executables and build facts of ``python``, asked of the interpreter itself."""
    out = subprocess.run([python, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30, check=True)
    return json.loads(out.stdout)


@dataclass(frozen=True)
class _Interpreter:
    """The interpreter as the sandbox shows it: host directories bound read-only at neutral paths.

    A prefix under ``/usr`` stays where it is (``/usr`` is bound as it is); any other prefix is bound at
    ``PYTHON_DIR``. A virtual environment becomes ``VENV_DIR``: its ``lib`` bound there, its ``bin`` links
    to the relocated interpreter, and a ``pyvenv.cfg`` whose ``home`` is the relocated prefix's.
    """

    executable: str
    binds: tuple[tuple[str, str], ...] = ()  # (host directory, sandbox directory)
    links: tuple[tuple[str, str], ...] = ()  # (target, sandbox path)
    venv_cfg: bytes | None = None  # the pyvenv.cfg at VENV_DIR
    env: tuple[tuple[str, str], ...] = ()  # what the relocated interpreter needs to load (libpython)

    @property
    def roots(self) -> tuple[str, ...]:
        """Sandbox directories the interpreter occupies outside ``/usr``."""
        placed = [dest for _, dest in (*self.binds, *self.links)]
        return tuple(root for root in (PYTHON_DIR, VENV_DIR) if any(_covered(dest, [root]) for dest in placed))


def _venv_flag(prefix: str) -> str:
    """``include-system-site-packages`` of the environment at ``prefix`` (false when unset, as in venv)."""
    with open(os.path.join(prefix, "pyvenv.cfg")) as f:
        pairs = (line.partition("=") for line in f)
        cfg = {key.strip().lower(): value.strip().lower() for key, sep, value in pairs if sep}
    return "true" if cfg.get("include-system-site-packages") == "true" else "false"


@functools.cache
def _interpreter(python: str) -> _Interpreter:
    """Where the sandbox shows ``python`` (see :class:`_Interpreter`); ValueError if it cannot be moved."""
    info = _probe_interpreter(python)
    base = os.path.realpath(info["base_prefix"])
    keep = _covered(base, ["/usr"])
    shown_base = base if keep else PYTHON_DIR
    real = next((r for r in map(os.path.realpath, info["executables"]) if _covered(r, [base])), None)
    if real is None:
        raise ValueError(f"SandboxConfig.python={python!r}: its interpreter ({info['executables']}) lies outside its "
                         f"base prefix {base}; the sandbox mounts an interpreter only together with its prefix")
    exe = os.path.join(shown_base, os.path.relpath(real, base))
    binds = [] if keep else [(base, PYTHON_DIR)]
    libdir = os.path.realpath(info["libdir"]) if info["libdir"] else ""
    env = ([("LD_LIBRARY_PATH", os.path.join(PYTHON_DIR, os.path.relpath(libdir, base)))]
           if not keep and info["shared"] and _covered(libdir, [base]) else [])
    prefix = info["prefix"]
    if os.path.realpath(prefix) == base:
        return _Interpreter(exe, tuple(binds), env=tuple(env))
    links = [(exe, f"{VENV_DIR}/bin/{name}") for name in ("python", "python3", f"python{info['xy']}")]
    for name in ("lib", "lib64"):
        path = os.path.join(prefix, name)
        if os.path.islink(path) and not os.path.isabs(os.readlink(path)):
            links.append((os.readlink(path), f"{VENV_DIR}/{name}"))
        elif os.path.isdir(path):
            binds.append((os.path.realpath(path), f"{VENV_DIR}/{name}"))
    cfg = (f"home = {os.path.dirname(exe)}\ninclude-system-site-packages = {_venv_flag(prefix)}\n"
           f"version = {info['version']}\n")
    return _Interpreter(f"{VENV_DIR}/bin/python", tuple(binds), tuple(links), cfg.encode(), tuple(env))


def _interpreter_roots(python: str) -> tuple[str, ...]:
    """Sandbox directories the interpreter ``python`` occupies (none of them a host path)."""
    return _interpreter(python).roots


def _system_binds() -> list[str]:
    """bwrap arguments for a read-only system: /usr, the /bin and /lib links (or dirs), loader config."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        args += ["--ro-bind-try", etc, etc]
    return args


def _mapped_ids(map_file: str) -> list[tuple[int, int]]:
    """[lo, hi) id ranges this process's user namespace maps (all of them outside any container)."""
    try:
        with open(map_file) as f:
            rows = [tuple(map(int, line.split())) for line in f if line.strip()]
    except OSError:
        return [(0, 2**32 - 1)]
    return [(inside, inside + count) for inside, _, count in rows]


def uid_pool(wanted: tuple[int, int]) -> tuple[int, int]:
    """The ids to draw sandbox uids from: ``wanted`` where mapped, else the top of the widest mapped range.

    Inside a container with a user namespace (rootless Docker / Podman maps 65536 ids), a uid of two
    billion cannot be set; the top of the mapped range is as unlikely to belong to a real account.
    """
    ranges = [
        (max(lo, glo), min(hi, ghi))
        for lo, hi in _mapped_ids("/proc/self/uid_map") for glo, ghi in _mapped_ids("/proc/self/gid_map")
        if max(lo, glo) < min(hi, ghi)
    ]
    for lo, hi in ranges:
        if lo <= wanted[0] and wanted[1] <= hi:
            return wanted
    lo, hi = max(ranges, key=lambda r: r[1] - r[0], default=(0, 0))
    top = hi - 2  # below the overflow ids 65534 / 65535 when the range ends at 65536
    if top - max(lo, 1000) < 100:
        raise SandboxUnavailableError(f"too few user ids mapped here ({ranges}) to run sandboxes as their own uid")
    return (max(lo, 1000, top - 10000), top)


# seccomp: the one door namespaces leave open. Any uid may create a user namespace and, inside it,
# mount a tmpfs that no rlimit bounds (its pages are the host's memory), so model code could fill RAM
# until the wall-clock kill. The filter refuses new namespaces (unshare, clone with CLONE_NEW* flags;
# clone3 hides its flags in memory, so it reports ENOSYS and glibc falls back to clone) and kills
# other syscall ABIs (i386, x32) that would bypass the numbering. Architectures without numbers here
# run without the filter.
_SECCOMP_ARCHES = {  # machine: (AUDIT_ARCH, unshare, clone, clone3, x32 bit)
    "x86_64": (0xC000003E, 272, 56, 435, 0x40000000),
    "aarch64": (0xC00000B7, 97, 220, 435, 0),
}
_CLONE_NEW_FLAGS = 0x7E020080  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME


@functools.cache
def seccomp_program() -> bytes | None:
    """The classic-BPF filter above as bwrap's ``--seccomp`` expects it (struct sock_filter array)."""
    arch = _SECCOMP_ARCHES.get(os.uname().machine)
    if arch is None:
        return None
    audit_arch, nr_unshare, nr_clone, nr_clone3, x32_bit = arch
    ld_w_abs, jeq_k, jge_k, jset_k, ret_k = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, eperm, enosys = 0x7FFF0000, 0x80000000, 0x00050000 | 1, 0x00050000 | 38
    prog = [
        (ld_w_abs, 0, 0, 4),                # A = arch
        (jeq_k, 1, 0, audit_arch),
        (ret_k, 0, 0, kill),                # another ABI: refuse outright
        (ld_w_abs, 0, 0, 0),                # A = syscall number
        (jge_k, 0, 1, x32_bit or 0xFFFFFFFF),
        (ret_k, 0, 0, eperm),               # x32 numbers
        (jeq_k, 0, 1, nr_unshare),
        (ret_k, 0, 0, eperm),
        (jeq_k, 0, 1, nr_clone3),
        (ret_k, 0, 0, enosys),
        (jeq_k, 0, 3, nr_clone),
        (ld_w_abs, 0, 0, 16),               # A = low word of args[0], clone's flags
        (jset_k, 0, 1, _CLONE_NEW_FLAGS),
        (ret_k, 0, 0, eperm),
        (ret_k, 0, 0, allow),
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _covered(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _namespace_args(as_root: bool) -> list[str]:
    """Namespaces and privileges: see the module docstring for why root and non-root differ."""
    common = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", "--new-session"]
    if as_root:
        return common + ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                         "--cap-add", "CAP_CHOWN"]
    return common + ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]


@functools.cache
def _bwrap_supports(bwrap: str, flag: str) -> bool:
    """Whether this bwrap build knows ``flag``: options arrived over versions, and distributions lag."""
    res = subprocess.run([bwrap, "--help"], check=False, capture_output=True, text=True, timeout=30)
    return flag in res.stdout + res.stderr


@functools.cache
def probe_bwrap(bwrap: str = "bwrap") -> str | None:
    """None if ``bwrap`` can create the sandbox's namespaces here, else the reason it cannot."""
    exe = shutil.which(bwrap)
    if exe is None:
        return f"bubblewrap ({bwrap!r}) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = [exe, *_namespace_args(os.geteuid() == 0), *_system_binds(), "--proc", "/proc", "--dev", "/dev",
             "/bin/sh", "-c", "exit 0"]
    try:
        res = subprocess.run(probe, check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if res.returncode != 0:
        return (f"bubblewrap cannot create namespaces here (exit {res.returncode}): {res.stderr.strip()}; "
                "unprivileged user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone, "
                "AppArmor's apparmor_restrict_unprivileged_userns) or the container lacks CAP_SYS_ADMIN")
    return None


class Sandbox:
    """Runs Python source in the sandbox; every outcome is a :class:`CallResult`, never an exception.

    ``await sandbox.arun(code)`` is the primitive (the calls of a round run concurrently with
    ``arun_many``); ``run`` wraps it for synchronous callers without a running event loop.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._as_root = os.geteuid() == 0
        self._bwrap: str | None = None
        if self.config.mode == "bwrap":
            reason = probe_bwrap(self.config.bwrap)
            if reason is not None:
                raise SandboxUnavailableError(
                    f"{reason}. Refusing to run model code unsandboxed; to accept that risk, opt in by name "
                    "with SandboxConfig(mode=\"unsafe-subprocess\")."
                )
            self._bwrap = shutil.which(self.config.bwrap)
        try:
            _probe_interpreter(self.config.python)
            self._interp = _interpreter(self.config.python) if self._bwrap is not None else None
        except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as exc:
            raise ValueError(f"SandboxConfig.python={self.config.python!r}: cannot run it ({exc})") from None
        self._uids = uid_pool(self.config.uid_range) if self._as_root else self.config.uid_range
        self.cgroup, self.cgroup_reason = memcg.find_parent()
        if self.memory_per_process < MIN_PROCESS_MEMORY:
            raise ValueError(
                f"SandboxConfig.memory_bytes={self.config.memory_bytes} / max_processes={self.config.max_processes}: "
                f"no memory cgroup here ({self.cgroup_reason}), so the call's bound is split over its processes, "
                f"and {self.memory_per_process} bytes each is below {MIN_PROCESS_MEMORY} (an interpreter); raise "
                "memory_bytes or lower max_processes")
        if self._interp is not None:
            for path in self.config.extra_ro_binds:
                clash = [r for r in self._interp.roots if _covered(path, [r]) or _covered(r, [path])]
                if clash:
                    raise ValueError(f"SandboxConfig.extra_ro_binds: {path!r} overlaps {clash[0]}, where the "
                                     "sandbox mounts the interpreter; bind it elsewhere")
            self._self_test()

    @property
    def memory_per_process(self) -> int:
        """Each process's RLIMIT_AS: the whole bound inside a memory cgroup (the group bounds their sum), else the
        bound split over the process cap (their product is the bound)."""
        c = self.config
        return c.memory_bytes if self.cgroup is not None else c.memory_bytes // c.max_processes

    def _self_test(self) -> None:
        """Run one trivial script now, so a host that cannot run the sandbox fails here, clearly, once."""
        with self._launch(b"print('ok')\n", "selftest") as (argv, fds, env):
            res = subprocess.run(argv, executable=self._bwrap, pass_fds=fds, env=env, capture_output=True,
                                 timeout=60, check=False, stdin=subprocess.DEVNULL)
        if res.returncode != 0 or res.stdout != b"ok\n":
            raise SandboxUnavailableError(
                f"the sandbox cannot run {self.config.python} here (exit {res.returncode}): "
                f"{res.stderr.decode(errors='replace').strip()[-2000:]}"
            )

    def _env(self, run_id: str, bin_dir: str) -> dict[str, str]:
        env = {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": WORKDIR, "TMPDIR": WORKDIR, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
            MARKER_ENV: run_id,
        }
        env.update(dict(self.config.env))
        return env

    def _spec(self, workdir: str, uid: int | None) -> list[str]:
        """The bootstrap's arguments: uid ("-" for none), work dir, script, the signal numbers KILL:XCPU, then
        NAME:SOFT:HARD rlimits."""
        c = self.config
        rlimits = [
            ("RLIMIT_CPU", c.cpu_time_s, c.cpu_time_s + 1),  # SIGXCPU at the soft limit, SIGKILL a second later
            ("RLIMIT_AS", self.memory_per_process, self.memory_per_process),
            ("RLIMIT_NPROC", c.max_processes, c.max_processes),
            ("RLIMIT_FSIZE", c.max_file_bytes, c.max_file_bytes),
            ("RLIMIT_NOFILE", c.max_open_files, c.max_open_files),
            ("RLIMIT_CORE", 0, 0),
        ]
        if c.mode == "unsafe-subprocess":  # shared uid: a process cap would count the user's other processes
            rlimits = [r for r in rlimits if r[0] != "RLIMIT_NPROC"]
        return ["-" if uid is None else str(uid), workdir, f"{workdir}/{SCRIPT_NAME}",
                f"{signal.SIGKILL.value}:{signal.SIGXCPU.value}",
                *(f"{name}:{soft}:{hard}" for name, soft, hard in rlimits)]

    @contextlib.contextmanager
    def _launch(self, code: bytes, run_id: str) -> Iterator[tuple[list[str], tuple[int, ...], dict[str, str]]]:
        """bwrap's command line, the descriptors it reads, and its (empty) environment.

        bwrap's reaper, the namespace's pid 1, keeps bwrap's command line and environment, and the code can
        read the first (and, on the user-namespace path, the second). So the options that name host paths
        travel through a descriptor (``--args``); what stays visible is the sandbox's environment, which the
        code sees anyway, and the command; and bwrap inherits nothing of the host's environment.
        """
        assert self._interp is not None
        with _sandbox_fds(code, self._interp.venv_cfg) as fds:
            options, setenv, command = self._bwrap_argv(fds, run_id)
            args_fd = _memfd("parasim-args", b"".join(os.fsencode(arg) + b"\0" for arg in options))
            try:
                yield ["bwrap", "--args", str(args_fd), *setenv, *command], (*fds.all, args_fd), {}
            finally:
                os.close(args_fd)

    def _bwrap_argv(self, fds: _Fds, run_id: str) -> tuple[list[str], list[str], list[str]]:
        """bwrap's options (for ``--args``), its ``--setenv`` options (after the ``--clearenv`` among the
        first), and the command it runs in the sandbox."""
        assert self._bwrap is not None and self._interp is not None
        c, interp = self.config, self._interp
        argv = [*_namespace_args(self._as_root), *_system_binds()]
        perms = ["--perms", "0755"] if _bwrap_supports(self._bwrap, "--perms") else []
        size = ["--size", str(c.tmpfs_bytes)] if _bwrap_supports(self._bwrap, "--size") else []  # not in old bwrap
        made: set[str] = set()

        def parents(path: str) -> list[str]:
            """--dir for each missing parent: bwrap 0.8 would create them 0700, unreadable for the sandbox's
            unprivileged uid."""
            out = []
            for parent in reversed(Path(path).parents[:-1]):
                if str(parent) not in made:
                    out += [*perms, "--dir", str(parent)]
                    made.add(str(parent))
            return out

        for src, dest in interp.binds:
            argv += [*parents(dest), "--ro-bind", src, dest]
        for target, link in interp.links:
            argv += [*parents(link), "--symlink", target, link]
        if fds.venv_cfg is not None:
            argv += [*parents(f"{VENV_DIR}/pyvenv.cfg"), "--file", str(fds.venv_cfg), f"{VENV_DIR}/pyvenv.cfg"]
        argv += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", WORKDIR,
                 # POSIX semaphores (multiprocessing) need a writable /dev/shm: sized like the work dir
                 *size, *(["--perms", "1777"] if perms else []), "--tmpfs", "/dev/shm"]
        # After the tmpfs mounts, so that an extra bind under the work dir's path is bound on top of the
        # tmpfs instead of hidden by it.
        binds = ["/usr"]
        for root in c.extra_ro_binds:
            if _covered(root, binds):
                continue
            argv += [*parents(root), "--ro-bind", root, root]
            binds.append(root)
        argv += ["--file", str(fds.code), f"{WORKDIR}/{SCRIPT_NAME}",
                 # bwrap's root and /dev are unbounded tmpfs: read-only, so files cannot eat the host's memory
                 "--remount-ro", "/dev", "--remount-ro", "/",
                 "--chdir", WORKDIR, "--clearenv"]
        if fds.seccomp is not None:
            argv += ["--seccomp", str(fds.seccomp)]
        setenv = []
        for key, value in (*self._env(run_id, os.path.dirname(interp.executable)).items(), *interp.env):
            setenv += ["--setenv", key, value]
        uid = random.SystemRandom().randrange(*self._uids) if self._as_root else None
        return argv, setenv, [interp.executable, "-I", "-S", "-B", "-c", BOOTSTRAP, *self._spec(WORKDIR, uid)]

    async def arun(self, code: str, stdin: str | bytes = b"") -> CallResult:
        """Run ``code`` as a script fed ``stdin``; OK (exit 0), EXEC_ERR (nonzero exit, stderr in ``detail``)
        or TIMEOUT."""
        if not isinstance(code, str):
            raise TypeError(f"code must be str, got {type(code).__name__}")
        try:  # surrogateescape keeps bytes decoded that way; a lone surrogate outside it has no bytes at all
            feed = stdin.encode("utf-8", errors="surrogateescape") if isinstance(stdin, str) else bytes(stdin)
            data = code.encode("utf-8", errors="surrogateescape")
        except UnicodeEncodeError as err:
            which = "stdin" if isinstance(stdin, str) and _unencodable(stdin) else "code"
            return CallResult(Status.EXEC_ERR, detail=f"{which} is not encodable as UTF-8: {err.reason} at index "
                              f"{err.start} ({err.object[err.start:err.end]!r})", extra={"reason": "encoding"})
        run_id = uuid.uuid4().hex
        if self.config.mode == "bwrap":
            with self._launch(data, run_id) as (argv, fds, env):
                return await self._execute(argv, feed, pass_fds=fds, env=env, executable=self._bwrap)
        with tempfile.TemporaryDirectory(prefix="parasim-unsafe-") as work:
            Path(work, SCRIPT_NAME).write_bytes(data)
            argv = [self.config.python, "-I", "-S", "-B", "-c", BOOTSTRAP, *self._spec(work, None)]
            env = {**self._env(run_id, os.path.dirname(self.config.python)), "HOME": work, "TMPDIR": work}
            return await self._execute(argv, feed, pass_fds=(), env=env, cwd=work)

    async def _execute(self, argv: list[str], feed: bytes, pass_fds: tuple[int, ...], env: dict[str, str],
                       cwd: str | None = None, executable: str | None = None) -> CallResult:
        start = time.monotonic()
        try:
            group = memcg.CallGroup(self.cgroup, self.config.memory_bytes) if self.cgroup is not None else None
        except OSError as exc:  # the parent group went away or is full: no bound, so no run
            return CallResult(Status.EXEC_ERR, detail=f"sandbox could not start: memory cgroup: {exc}",
                              latency_s=time.monotonic() - start, extra={"reason": "spawn failed"})
        try:
            result = await self._supervise(argv, feed, pass_fds, env, cwd, executable, group, start)
        finally:
            if group is not None:
                peak = group.peak()
                await asyncio.to_thread(group.remove)
        if group is not None and peak is not None:
            result.extra["memory_peak_bytes"] = peak
        return result

    async def _supervise(self, argv: list[str], feed: bytes, pass_fds: tuple[int, ...], env: dict[str, str],
                         cwd: str | None, executable: str | None, group: memcg.CallGroup | None,
                         start: float) -> CallResult:
        c = self.config
        out, err = _Capture(c.max_output_bytes), _Capture(c.max_output_bytes)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, executable=executable, stdin=subprocess.PIPE if feed else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=pass_fds, env=env, cwd=cwd,
                start_new_session=True, preexec_fn=None if group is None else group.join,
            )
        except (OSError, subprocess.SubprocessError) as exc:  # out of processes or memory: the call fails
            return CallResult(Status.EXEC_ERR, detail=f"sandbox could not start: {exc}",
                              latency_s=time.monotonic() - start, extra={"reason": "spawn failed"})

        async def drain(stream: asyncio.StreamReader, cap: _Capture) -> None:
            while chunk := await stream.read(65536):
                cap.feed(chunk)

        async def write_stdin() -> None:
            if proc.stdin is None:
                return
            try:
                proc.stdin.write(feed)
                await proc.stdin.drain()
                proc.stdin.close()
            except (BrokenPipeError, ConnectionResetError):  # the script stopped reading: its business
                pass

        assert proc.stdout is not None and proc.stderr is not None
        drains = asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err), write_stdin())
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), timeout=c.timeout_s)
            except TimeoutError:
                timed_out = True
            else:
                try:  # output still held open by a stray process (unsafe mode) must not hang the caller
                    await asyncio.wait_for(asyncio.shield(drains), timeout=_EXIT_DRAIN_GRACE_S)
                except TimeoutError:
                    pass
        finally:
            _kill_group(proc.pid)
            await proc.wait()
            try:
                await asyncio.wait_for(drains, timeout=_EXIT_DRAIN_GRACE_S)
            except TimeoutError:
                pass
        latency = time.monotonic() - start
        return _to_result(proc.returncode, timed_out, out, err, latency, c)

    def run(self, code: str, stdin: str | bytes = b"") -> CallResult:
        """Synchronous :meth:`arun` for callers without a running event loop."""
        return asyncio.run(self.arun(code, stdin))

    async def arun_many(self, codes: Sequence[str], max_concurrency: int | None = None) -> list[CallResult]:
        """The calls of one round, concurrently (at most ``max_concurrency`` at once); results in input order."""
        gate = asyncio.Semaphore(max_concurrency or len(codes) or 1)

        async def one(code: str) -> CallResult:
            async with gate:
                return await self.arun(code)

        return list(await asyncio.gather(*(one(code) for code in codes)))


@dataclass(frozen=True)
class _Fds:
    """In-memory files bwrap reads at startup: the script (``--file``), the seccomp filter, a venv's pyvenv.cfg."""

    code: int
    seccomp: int | None
    venv_cfg: int | None

    @property
    def all(self) -> tuple[int, ...]:
        return tuple(fd for fd in (self.code, self.seccomp, self.venv_cfg) if fd is not None)


@contextlib.contextmanager
def _sandbox_fds(code: bytes, venv_cfg: bytes | None) -> Iterator[_Fds]:
    """One set per call: bwrap reads from a descriptor's offset, so sharing one would race."""
    program = seccomp_program()
    fds = _Fds(_memfd("parasim-code", code), _memfd("parasim-seccomp", program) if program is not None else None,
               _memfd("parasim-venv", venv_cfg) if venv_cfg is not None else None)
    try:
        yield fds
    finally:
        for fd in fds.all:
            os.close(fd)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return True
    return False


def _signal_name(signo: int) -> str:
    try:
        return signal.Signals(signo).name
    except ValueError:
        return str(signo)


def _kill_group(pgid: int) -> None:
    """SIGKILL the process group of the outer process; bwrap's pid-1 death takes the namespace with it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _to_result(returncode: int | None, timed_out: bool, out: _Capture, err: _Capture, latency: float,
               c: SandboxConfig) -> CallResult:
    """Map an exit onto protocol statuses: a time limit (wall or CPU) is TIMEOUT, any other failure EXEC_ERR."""
    stdout, stderr = out.text(), err.text()
    rc = -1 if returncode is None else returncode
    signo = -rc if rc < 0 else (rc - 128 if rc > 128 else 0)  # subprocess reports -N; bwrap reports 128+N
    extra: dict[str, object] = {"exit_code": rc, "stdout": stdout, "stderr": stderr,
                                "stdout_bytes": out.total, "stderr_bytes": err.total}
    if timed_out:
        status, detail = Status.TIMEOUT, f"wall-clock limit of {c.timeout_s:g} s exceeded; sandbox killed"
        extra["reason"] = "wall-clock limit"
    elif signo == signal.SIGXCPU:  # the bootstrap reports a hard-limit SIGKILL as SIGXCPU too
        status, detail = Status.TIMEOUT, f"CPU time limit of {c.cpu_time_s} s exceeded"
        extra["reason"] = "CPU time limit"
    elif rc == 0:
        status, detail = Status.OK, stderr
    else:
        status = Status.EXEC_ERR
        reason = f"killed by signal {_signal_name(signo)}" if 0 < signo < signal.NSIG else f"exit code {rc}"
        detail = stderr if stderr.strip() else reason
        extra["reason"] = reason
    return CallResult(status=status, output=stdout, latency_s=latency, detail=detail, extra=extra)
