"""The python tool's sandbox: statuses, output capture, and escape attempts that must be contained.

Each escape test runs model-style code that tries to break out (spin forever, fork without bound,
allocate 4 GiB, reach a listener on the host's loopback, write outside its tmpfs, read the project),
checks the attempt failed from the host's side, and checks that no process of the sandbox survives.
Sandboxed processes are found by a per-test tag in their environment (``/proc/<pid>/environ``).
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parasim.protocol.schema import Status
from parasim.tools import sandbox as sandbox_mod
from parasim.tools.sandbox import (
    WORKDIR,
    Sandbox,
    SandboxConfig,
    SandboxUnavailableError,
    _Capture,
    _interpreter_roots,
    probe_bwrap,
    seccomp_program,
    uid_pool,
)

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

_REASON = probe_bwrap()
needs_bwrap = pytest.mark.skipif(_REASON is not None, reason=f"sandbox unavailable: {_REASON}")
REPO = Path(__file__).resolve().parents[1]
TAG_ENV = "PARASIM_TEST_TAG"


def tagged_pids(tag: str, *, include_bwrap: bool = True) -> list[int]:
    """Live processes of a sandbox: its code carries ``tag`` in the environment, bwrap itself (outer
    process and the namespace's pid 1) in its command line. Zombies have neither left."""
    needle = f"{TAG_ENV}={tag}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                hit = needle in f.read().split(b"\0")
            if include_bwrap and not hit:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    hit = tag.encode() in f.read().split(b"\0")
        except OSError:
            continue
        if hit:
            pids.append(int(entry))
    return pids


def assert_nothing_left(tag: str, grace_s: float = 3.0) -> None:
    """Namespace teardown after SIGKILL is asynchronous: allow the kernel a moment, then insist."""
    deadline = time.monotonic() + grace_s
    while (left := tagged_pids(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], f"sandbox processes left behind: {left}"


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex


def make(tag: str, **kw: object) -> Sandbox:
    return Sandbox(SandboxConfig(env=((TAG_ENV, tag),), **kw))  # type: ignore[arg-type]


@pytest.mark.sandbox
@needs_bwrap
def test_ok_and_streams_verbatim(tag: str) -> None:
    res = make(tag).run("import sys\nprint('héllo ✓')\nprint('warn', file=sys.stderr)\n")
    assert res.status == Status.OK
    assert res.output == "héllo ✓\n"
    assert res.extra["stderr"] == "warn\n"
    assert res.extra["exit_code"] == 0
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_errors_become_exec_err_with_traceback_from_model_code(tag: str) -> None:
    sb = make(tag)
    res = sb.run("x = 1\nprint('before')\n1 / 0\n")
    assert res.status == Status.EXEC_ERR
    assert res.output == "before\n"
    assert res.detail.startswith("Traceback (most recent call last):\n  File \"/tmp/main.py\", line 3")
    assert res.detail.rstrip().endswith("ZeroDivisionError: division by zero")
    syntax = sb.run("def f(:\n")
    assert syntax.status == Status.EXEC_ERR and "SyntaxError" in syntax.detail
    code = sb.run("import sys; sys.exit(3)")
    assert code.status == Status.EXEC_ERR and code.extra["exit_code"] == 3
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_stdin_is_fed_to_the_script(tag: str) -> None:
    res = make(tag).run("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", stdin="1 2 3\n4")
    assert (res.status, res.output) == (Status.OK, "10\n")


@pytest.mark.sandbox
@needs_bwrap
def test_site_packages_are_usable(tag: str) -> None:
    res = make(tag).run("import numpy as np\nprint(int(np.arange(10).sum()))")
    assert (res.status, res.output) == (Status.OK, "45\n")


@pytest.mark.sandbox
@needs_bwrap
def test_escape_infinite_loop_is_killed(tag: str) -> None:
    res = make(tag, timeout_s=3.0).run("print('start', flush=True)\nwhile True:\n    pass\n")
    assert res.status == Status.TIMEOUT
    assert res.output == "start\n"  # output before the kill is kept
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_cpu_time_limit_is_a_timeout(tag: str) -> None:
    res = make(tag, timeout_s=30, cpu_time_s=1).run("while True:\n    pass\n")
    assert res.status == Status.TIMEOUT and "CPU" in res.detail
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_cpu_limit_is_a_timeout_when_the_code_ignores_sigxcpu(tag: str) -> None:
    """Ignoring SIGXCPU leaves the hard limit's SIGKILL: still the CPU limit, not a crash."""
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass\n"
    res = make(tag, timeout_s=30, cpu_time_s=1).run(code)
    assert res.status == Status.TIMEOUT, res.detail
    assert "CPU" in res.detail and res.extra["reason"] == "CPU time limit"
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_wall_clock_timeout_names_its_limit(tag: str) -> None:
    res = make(tag, timeout_s=1.0).run("import time\ntime.sleep(60)\n")
    assert res.status == Status.TIMEOUT
    assert "wall-clock" in res.detail and res.extra["reason"] == "wall-clock limit"
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.parametrize("code,signame", [
    ("import os\nos.abort()\n", "SIGABRT"),
    ("import ctypes\nctypes.string_at(0)\n", "SIGSEGV"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "SIGKILL"),  # a kill within the CPU budget
])
def test_crashes_stay_exec_err(tag: str, code: str, signame: str) -> None:
    res = make(tag, cpu_time_s=5).run(code)
    assert res.status == Status.EXEC_ERR
    assert res.extra["reason"] == f"killed by signal {signame}"
    assert_nothing_left(tag)


HOST_VIEW = r"""
import json, os, sys, traceback
def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"unreadable {type(e).__name__}"
try:
    json.loads("{")
except ValueError:
    tb = traceback.format_exc()
import numpy
print(json.dumps({"pid1": read("/proc/1/cmdline"), "env1": read("/proc/1/environ"), "self": read("/proc/self/cmdline"),
                  "sys": [sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path],
                  "environ": dict(os.environ), "tb": tb, "modules": [json.__file__, numpy.__file__],
                  "mount_points": [line.split()[4] for line in open("/proc/self/mountinfo")]}))
"""


@pytest.mark.sandbox
@needs_bwrap
def test_code_sees_no_host_paths(tag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox names no host path where the code looks: pid 1's command line and environment, its own,
    sys.path, tracebacks, module files, mount points. (mountinfo's 4th field, the source directory inside
    its filesystem, is the one place that cannot be hidden without copying the interpreter.)"""
    monkeypatch.setenv("PARASIM_HOST_SECRET", "sk-host-secret")
    res = make(tag).run(HOST_VIEW)
    assert res.status == Status.OK, res.detail
    seen = json.loads(res.output)
    host = {str(REPO), sys.prefix, os.path.realpath(sys.prefix), sys.base_prefix, os.path.realpath(sys.base_prefix)}
    host = {p for p in host if not p.startswith("/usr/")}  # a system interpreter is at its own path, like /usr
    leaks = {p: key for key, value in seen.items() for p in host if p in json.dumps(value)}
    assert leaks == {}, f"host paths visible in the sandbox: {leaks}"
    assert "--ro-bind" not in seen["pid1"]  # bwrap's options stay out of pid 1's command line
    assert "sk-host-secret" not in res.output
    assert seen["modules"][1].startswith(seen["sys"][1])  # site-packages still come from the environment
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_escape_fork_bomb_is_bounded_and_reaped(tag: str) -> None:
    limit = 12
    sb = make(tag, timeout_s=2.0, max_processes=limit)
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"

    async def run_and_watch() -> tuple[int, object]:
        task = asyncio.ensure_future(sb.arun(bomb))
        peak = 0
        while not task.done():
            peak = max(peak, len(tagged_pids(tag, include_bwrap=False)))
            await asyncio.sleep(0.02)
        return peak, task.result()

    peak, res = asyncio.run(run_and_watch())
    assert res.status == Status.TIMEOUT  # type: ignore[attr-defined]
    assert 2 <= peak <= limit, f"peak of {peak} sandbox processes, limit {limit}"
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_fork_counts_stop_at_the_process_limit(tag: str) -> None:
    code = (
        "import os, time\nn = 0\ntry:\n    for _ in range(200):\n        if os.fork() == 0:\n"
        "            time.sleep(30)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)\n"
    )
    res = make(tag, max_processes=10).run(code)
    assert res.status == Status.OK
    assert int(res.output) < 10
    assert_nothing_left(tag)  # the sleeping children die with the namespace when the script exits


@pytest.mark.sandbox
@needs_bwrap
def test_escape_4gib_allocation_fails(tag: str) -> None:
    res = make(tag, memory_bytes=1 << 30).run("buf = bytearray(4 * 1024**3)\nprint(len(buf))\n")
    assert res.status == Status.EXEC_ERR
    assert "MemoryError" in res.detail and res.output == ""
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_escape_loopback_socket_reaches_nothing(tag: str) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except (TimeoutError, OSError):
                continue

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    try:
        code = (
            "import socket\n"
            f"for host in ('127.0.0.1', 'localhost'):\n"
            "    try:\n"
            f"        socket.create_connection((host, {port}), timeout=1).sendall(b'escaped')\n"
            "        print('connected', host)\n"
            "    except OSError as e:\n"
            "        print('blocked', host, type(e).__name__)\n"
        )
        res = make(tag).run(code)
    finally:
        stop.set()
        thread.join()
        server.close()
    assert res.status == Status.OK
    assert "connected" not in res.output and res.output.count("blocked") == 2
    assert accepted == []
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_escape_writes_outside_tmp_fail(tag: str, tmp_path: Path) -> None:
    targets = [str(tmp_path / "escaped.txt"), str(REPO / "escaped.txt"), "/usr/escaped.txt", "/escaped.txt",
               "/etc/escaped.txt", "/proc/escaped.txt", "/dev/escaped.txt", f"{sys.prefix}/escaped.txt"]
    code = (
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as e:\n"
        "        print('denied', path, type(e).__name__)\n"
        "open('/tmp/inside.txt', 'w').write('ok')\nprint(open('/tmp/inside.txt').read())\n"
    )
    res = make(tag).run(code)
    assert res.status == Status.OK
    assert "wrote" not in res.output and res.output.count("denied") == len(targets)
    assert res.output.endswith("ok\n")  # the private tmpfs is writable
    for path in (*targets[:2], targets[-1]):
        assert not Path(path).exists()
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_escape_reading_project_files_fails(tag: str) -> None:
    secrets = [str(Path(__file__).resolve()), str(REPO / "pyproject.toml"), str(REPO / ".git" / "HEAD")]
    code = (
        f"for path in {secrets!r}:\n"
        "    try:\n"
        "        print('read', path, open(path).read()[:40])\n"
        "    except OSError as e:\n"
        "        print('denied', path, type(e).__name__)\n"
    )
    res = make(tag).run(code)
    assert res.status == Status.OK
    assert res.output.count("denied") == len(secrets) and "read " not in res.output
    assert "[project]" not in res.output and "escape" not in res.output.lower()
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_writable_dirs_are_size_capped(tag: str) -> None:
    """/tmp and /dev/shm are the only writable places, and both are capped tmpfs: files cannot eat RAM."""
    code = (
        "import os\nfor d in ('/tmp', '/dev/shm'):\n    n = 0\n    try:\n        while n < 64:\n"
        "            with open(f'{d}/f{n}', 'wb') as f:\n                f.write(b'0' * (1 << 20))\n"
        "            n += 1\n    except OSError as e:\n        print(d, n, e.errno)\n"
    )
    res = make(tag, tmpfs_bytes=8 << 20).run(code)
    assert res.status == Status.OK
    lines = {line.split()[0]: line.split()[1:] for line in res.output.splitlines()}
    for d in ("/tmp", "/dev/shm"):
        written, errno = map(int, lines[d])
        assert written <= 8 and errno == 28  # ENOSPC at the 8 MiB cap


@pytest.mark.sandbox
@needs_bwrap
def test_multiprocessing_works_inside(tag: str) -> None:
    code = "import multiprocessing as mp\nwith mp.Pool(2) as p:\n    print(p.map(abs, [-1, -2]))\n"
    res = make(tag).run(code)
    assert (res.status, res.output) == (Status.OK, "[1, 2]\n")
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.skipif(seccomp_program() is None, reason=f"no seccomp filter for {os.uname().machine}")
def test_escape_new_namespaces_are_refused(tag: str) -> None:
    """A user namespace would let the code mount a tmpfs no rlimit bounds; threads and forks still work."""
    code = (
        "import ctypes, os, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "for flag in (0x10000000, 0x00020000, 0x40000000):\n"
        "    print(libc.unshare(flag), ctypes.get_errno())\n"
        "t = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n"
        "pid = os.fork()\nif pid == 0:\n    os._exit(7)\nprint('child', os.waitpid(pid, 0)[1] >> 8)\n"
    )
    res = make(tag).run(code)
    assert res.status == Status.OK
    assert res.output == "-1 1\n" * 3 + "thread\nchild 7\n"  # EPERM for user, mount and net namespaces
    assert_nothing_left(tag)


@pytest.mark.sandbox
@needs_bwrap
def test_host_environment_does_not_leak(tag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parasim-test-secret")
    res = make(tag).run("import os\nprint(sorted(os.environ))\nprint(os.environ.get('OPENAI_API_KEY'))")
    assert res.status == Status.OK
    assert "sk-parasim-test-secret" not in res.output and res.output.endswith("None\n")


@pytest.mark.sandbox
@needs_bwrap
def test_file_size_limit(tag: str) -> None:
    code = "with open('/tmp/big', 'wb') as f:\n    f.write(b'0' * (4 << 20))\n"
    res = make(tag, max_file_bytes=1 << 20).run(code)
    assert res.status == Status.EXEC_ERR and "File too large" in res.detail


@pytest.mark.sandbox
@needs_bwrap
def test_output_truncated_with_marker_keeping_head_and_tail(tag: str) -> None:
    code = "print('HEAD' + 'x' * 100000 + 'TAIL')"
    res = make(tag, max_output_bytes=1000).run(code)
    assert res.status == Status.OK
    assert res.output.startswith("HEAD") and res.output.endswith("TAIL\n")
    assert "bytes truncated ...]" in res.output and len(res.output) < 1100
    assert res.extra["stdout_bytes"] == 100009


@pytest.mark.sandbox
@needs_bwrap
def test_round_runs_concurrently_and_isolated(tag: str) -> None:
    code = (
        "import os, time\nt0 = time.time()\nseen = os.listdir('/tmp')\n"
        "open('/tmp/mine', 'w').write('1')\ntime.sleep(1.5)\nprint(t0, time.time(), sorted(seen))\n"
    )
    results = asyncio.run(make(tag).arun_many([code] * 4))
    assert [r.status for r in results] == [Status.OK] * 4
    spans = [tuple(map(float, r.output.split()[:2])) for r in results]
    assert max(s for s, _ in spans) < min(e for _, e in spans)  # all four were running at once
    # no one saw another's file (the interpreter is shown under /opt or /usr: no root of it lies under /tmp)
    expected = {"main.py"} | {Path(r).relative_to(WORKDIR).parts[0] for r in _interpreter_roots(sys.executable)
                              if Path(r).is_relative_to(WORKDIR)}
    assert all(r.output.rstrip().endswith(str(sorted(expected))) for r in results)
    assert_nothing_left(tag)


@needs_bwrap
@pytest.mark.skipif(not _interpreter_roots(sys.executable), reason="the interpreter is not relocated (under /usr)")
def test_extra_bind_over_the_interpreter_is_refused() -> None:
    with pytest.raises(ValueError, match="extra_ro_binds: '/opt' overlaps /opt/"):
        Sandbox(SandboxConfig(extra_ro_binds=("/opt",)))


def test_missing_bwrap_refuses_and_names_the_opt_in() -> None:
    with pytest.raises(SandboxUnavailableError, match='mode="unsafe-subprocess"'):
        Sandbox(SandboxConfig(bwrap="parasim-no-such-bwrap"))


def test_unsafe_mode_is_opt_in_by_name_and_keeps_limits(tag: str) -> None:
    sb = make(tag, mode="unsafe-subprocess", bwrap="parasim-no-such-bwrap", timeout_s=1.5)
    assert sb.run("print(6 * 7)").output == "42\n"
    assert sb.run("while True:\n    pass\n").status == Status.TIMEOUT
    assert_nothing_left(tag)


def test_spawn_failure_is_an_exec_err(tag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sb = make(tag, mode="unsafe-subprocess")

    async def no_processes_left(*args: object, **kwargs: object) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(sandbox_mod.asyncio, "create_subprocess_exec", no_processes_left)
    res = sb.run("print(1)")
    assert res.status == Status.EXEC_ERR and "could not start" in res.detail


def test_uid_pool_follows_the_user_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    full = [(0, 2**32 - 1)]
    monkeypatch.setattr(sandbox_mod, "_mapped_ids", lambda path: full)
    assert uid_pool((2_000_000_000, 2_100_000_000)) == (2_000_000_000, 2_100_000_000)
    container = [(0, 65536)]  # rootless Docker / Podman
    monkeypatch.setattr(sandbox_mod, "_mapped_ids", lambda path: container)
    lo, hi = uid_pool((2_000_000_000, 2_100_000_000))
    assert 1000 <= lo < hi <= 65534
    monkeypatch.setattr(sandbox_mod, "_mapped_ids", lambda path: [(0, 1)])
    with pytest.raises(SandboxUnavailableError, match="user ids"):
        uid_pool((2_000_000_000, 2_100_000_000))


@pytest.mark.parametrize("field,value", [("mode", "docker"), ("timeout_s", 0), ("memory_bytes", 1024),
                                         ("uid_range", (5, 4)), ("extra_ro_binds", ("relative",)),
                                         ("python", "/nonexistent/python")])
def test_config_errors_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        Sandbox(SandboxConfig(**{"mode": "unsafe-subprocess", field: value}))  # type: ignore[arg-type]


@given(chunks=st.lists(st.binary(max_size=300), max_size=20), limit=st.integers(2, 400))
def test_capture_keeps_head_and_tail(chunks: list[bytes], limit: int) -> None:
    cap = _Capture(limit)
    for chunk in chunks:
        cap.feed(chunk)
    data = b"".join(chunks)
    assert cap.total == len(data)
    if len(data) <= limit:
        assert bytes(cap.head + cap.tail) == data and cap.dropped == 0
    else:
        assert bytes(cap.head) == data[: limit // 2]
        assert bytes(cap.tail) == data[len(data) - (limit - limit // 2):]
        assert f"[... {cap.dropped} bytes truncated ...]" in cap.text()


NON_ROOT_CHECK = r"""
import json, sys
from parasim.protocol.schema import Status
from parasim.tools.sandbox import Sandbox, SandboxConfig, probe_bwrap
reason = probe_bwrap()
if reason is not None:
    print(json.dumps({"skip": reason}))
    sys.exit(0)
sb = Sandbox(SandboxConfig(python=sys.executable, max_processes=10, timeout_s=5))
fork = sb.run("import os, time\nn = 0\ntry:\n    for _ in range(100):\n        if os.fork() == 0:\n"
              "            time.sleep(5)\n            os._exit(0)\n        n += 1\n"
              "except OSError:\n    pass\nprint(n)\n")
writes = sb.run("import os\nfor p in ('/x', '/dev/x', '/usr/x', %r):\n    try:\n        open(p, 'w')\n"
                "        print('wrote', p)\n    except OSError:\n        print('denied', p)\n" % (sys.argv[1],))
uid = sb.run("import os; print(os.getuid())")
print(json.dumps({"fork": [fork.status.name, fork.output], "writes": [writes.status.name, writes.output],
                  "uid": uid.output}))
"""


def run_as_nobody(check: str, *args: str) -> dict[str, object]:
    """Run ``check`` as nobody with the system interpreter and a world-readable copy of the three modules it
    needs; its last stdout line, as JSON. The host environment it starts with holds a secret to look for."""
    work = Path(tempfile.mkdtemp(prefix="parasim-nonroot-", dir="/tmp"))
    try:
        for rel in ("parasim/protocol/schema.py", "parasim/tools/sandbox.py", "parasim/tools/memcg.py"):
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / rel, work / rel)
        for pkg in ("parasim", "parasim/protocol", "parasim/tools"):
            (work / pkg / "__init__.py").touch()
        (work / "check.py").write_text(check)
        for path in [work, *work.rglob("*")]:
            path.chmod(0o755)
        res = subprocess.run(["/usr/bin/python3", "check.py", *args], cwd=work, user=65534,
                             group=65534, extra_groups=[], capture_output=True, text=True, timeout=120,
                             env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PARASIM_HOST_SECRET": "sk-host-secret"},
                             check=False)
    finally:
        shutil.rmtree(work)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="non-root already runs every test above through the user-namespace path")
@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs a system /usr/bin/python3")
def test_unprivileged_user_path_when_ci_runs_as_root() -> None:
    """As root the tests above take the privilege-drop path; this runs the user-namespace path too,
    as nobody, with the system interpreter and a world-readable copy of the three modules it needs."""
    out = run_as_nobody(NON_ROOT_CHECK, str(REPO / "escaped.txt"))
    if "skip" in out:
        pytest.skip(f"user namespaces unavailable to unprivileged users: {out['skip']}")
    assert out["fork"][0] == "OK" and int(out["fork"][1]) < 10
    assert out["writes"][0] == "OK" and out["writes"][1].count("denied") == 4
    assert out["uid"] == "65534\n"
    assert not (REPO / "escaped.txt").exists()


NON_ROOT_PID1 = r"""
import json, sys
from parasim.tools.sandbox import Sandbox, SandboxConfig, probe_bwrap

reason = probe_bwrap()
if reason is not None:
    print(json.dumps({"skip": reason}))
    sys.exit(0)
res = Sandbox(SandboxConfig(python=sys.executable)).run(
    "for p in ('/proc/1/environ', '/proc/1/cmdline'):\n    try:\n        print(p, open(p, 'rb').read())\n"
    "    except OSError as e:\n        print(p, 'unreadable', type(e).__name__)\n")
print(json.dumps({"status": res.status.name, "output": res.output}))
"""


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="non-root already runs every test above through the user-namespace path")
@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs a system /usr/bin/python3")
def test_pid1_shows_no_host_environment_on_the_user_namespace_path() -> None:
    """There bwrap's reaper (pid 1) runs as the code's own uid, so the code can read its environment."""
    out = run_as_nobody(NON_ROOT_PID1)
    if "skip" in out:
        pytest.skip(f"user namespaces unavailable to unprivileged users: {out['skip']}")
    assert "sk-host-secret" not in out["output"] and "--ro-bind" not in out["output"]
    assert out["status"] == "OK" and "/proc/1/cmdline b'bwrap" in out["output"]
