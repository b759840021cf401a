"""One sandboxed call is held to one memory bound, ``SandboxConfig.memory_bytes``, however many processes it forks.

The probe forks 64 children that each try to allocate and touch 1.5 GB. Before the whole-call bound, RLIMIT_AS was
the only limit and it was per process (2 GiB, with 64 processes allowed): 4 such children took 6 GB of the host.
Now the call runs in a memory cgroup of ``memory_bytes`` where one can be made (as root here), else each process
gets memory_bytes / max_processes. The test samples the proportional set size (PSS, anonymous and shared memory)
of every process of the call from ``/proc`` while it runs, and kills the call (and fails) as soon as the sum stays
past the bound (with a tenth of slack for the sampling) for two samples, 10 ms apart, so that running it against a
sandbox without the bound cannot exhaust the host; where there is a cgroup, the kernel's exact peak must be within
the bound.
"""
from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest
from test_sandbox import assert_nothing_left, make, needs_bwrap, tagged_pids

from parasim.protocol.schema import Status

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = [pytest.mark.sandbox, needs_bwrap, pytest.mark.timeout(120), pytest.mark.slow]
CHILDREN, CHILD_BYTES = 64, 1536 * 2**20
# /proc is read one process after another, so a sum of samples can count memory twice (a child read, then killed,
# and its pages taken by the next one before that is read): a tenth over the true peak, which the cgroup reports
# exactly. The watchdog stops the call past it on two samples in a row: a double count lasts one sample (one run
# here summed 2.20 GiB once against a 2 GiB cgroup), a call past its bound holds the memory for its children's 3 s.
SAMPLING_SLACK = 1.1
OVER_SAMPLES = 2
PROBE = f"""
import os, time
kids = []
for _ in range({CHILDREN}):
    try:
        pid = os.fork()
    except OSError:  # the process cap: the rest of the children never start
        break
    if pid == 0:
        try:
            block = bytearray({CHILD_BYTES})
            block[::4096] = b"x" * len(range(0, {CHILD_BYTES}, 4096))  # touch every page: resident, not reserved
            time.sleep(3)
        except MemoryError:
            pass
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print(len(kids))
"""


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex


def _pss(pid: int) -> int:
    """The memory ``pid`` takes from the host, in bytes: its proportional set size of anonymous and shared-memory
    pages (shared pages split among their sharers, so the forked children's common pages are counted once; the
    interpreter's file pages are the host's page cache, there before the call and after it); 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line and not line[0].isdigit())
    except OSError:
        return 0
    kinds = ("Pss_Anon", "Pss_Shmem") if "Pss_Anon" in fields else ("Pss",)  # kernels before 5.9: all of Pss
    return sum(int(fields[k].split()[0]) * 1024 for k in kinds if k in fields)


def _run_watched(tag: str, bound: int, **config: object) -> tuple[int, object, bool]:
    """Run the probe; returns the peak PSS sum sampled, the result, and whether the watchdog had to kill it (the sum
    past ``bound`` on ``OVER_SAMPLES`` samples in a row)."""
    sb = make(tag, timeout_s=15.0, **config)

    async def go() -> tuple[int, object, bool]:
        task = asyncio.ensure_future(sb.arun(PROBE))
        peak, killed, over = 0, False, 0
        while not task.done():
            pids = tagged_pids(tag, include_bwrap=False)
            total = sum(_pss(pid) for pid in pids)
            peak = max(peak, total)
            over = over + 1 if total > bound else 0
            if over >= OVER_SAMPLES and not killed:  # past the bound: stop it before it takes the host's memory
                killed = True
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            await asyncio.sleep(0.01)
        return peak, task.result(), killed

    return asyncio.run(go())


@pytest.mark.parametrize("processes", [None, CHILDREN + 1])
def test_fork_and_allocate_probe_is_held_to_the_whole_call_bound(tag: str, processes: int | None) -> None:
    config = {} if processes is None else {"max_processes": processes}
    probe_sb = make(tag, **config) if processes is None or _has_cgroup(tag) else None
    if probe_sb is None:
        pytest.skip("64 processes under a 2 GiB bound need a memory cgroup (no per-process share fits them)")
    bound = probe_sb.config.memory_bytes
    peak, res, killed = _run_watched(tag, int(bound * SAMPLING_SLACK), **config)
    assert not killed, f"the call's processes held {peak / 2**30:.2f} GiB, past its bound of {bound / 2**30:.2f} GiB"
    # an OOM kill inside the call is its own failure; children thrashing at the bound may run out its time
    assert res.status in (Status.OK, Status.EXEC_ERR, Status.TIMEOUT), res
    if getattr(probe_sb, "cgroup", None) is not None:
        assert res.extra["memory_peak_bytes"] <= bound  # the kernel's own, exact figure
        assert peak > bound // 2, f"the probe held at most {peak / 2**30:.2f} GiB: it never pressed the bound"
    else:  # each process is refused past its share: the sum never comes near the bound
        assert peak <= bound
    assert_nothing_left(tag)


def test_without_a_cgroup_the_process_cap_times_the_share_is_the_bound(tag: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback (no memory cgroup: an unprivileged user without delegation): each process gets
    memory_bytes / max_processes of address space, and the probe stays within memory_bytes."""
    from parasim.tools import memcg

    monkeypatch.setattr(memcg, "find_parent", lambda: (None, "disabled by the test"))
    sb = make(tag)
    assert sb.cgroup is None and sb.memory_per_process * sb.config.max_processes <= sb.config.memory_bytes
    peak, res, killed = _run_watched(tag, sb.config.memory_bytes)
    assert not killed and peak <= sb.config.memory_bytes and "memory_peak_bytes" not in res.extra
    assert res.status is Status.OK and 0 < int(res.output) < CHILDREN  # the cap stopped the forks; allocations failed
    with pytest.raises(ValueError, match=r"memory_bytes=.* / max_processes=64: no memory cgroup here"):
        make(tag, max_processes=64)  # 32 MiB each: below what an interpreter needs, refused rather than broken
    assert_nothing_left(tag)


def _has_cgroup(tag: str) -> bool:
    return getattr(make(tag), "cgroup", None) is not None


def test_a_lone_surrogate_in_stdin_or_code_is_a_status_not_an_exception(tag: str) -> None:
    sb = make(tag)
    res = sb.run("print(input())", stdin="\ud800")
    assert res.status is Status.EXEC_ERR and "stdin is not encodable as UTF-8" in res.detail
    res = sb.run("print('\ud800')")
    assert res.status is Status.EXEC_ERR and "code is not encodable as UTF-8" in res.detail
    assert sb.run("print(input())", stdin="caf\udce9").status is Status.OK  # surrogateescape bytes still pass
