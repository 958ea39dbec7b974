"""The benchmarks' CPU accounting (``cases/harness.job_cpu_s``) and ``--competing-load``, on
real processes: a child that burns CPU is counted while alive and once reaped, a grandchild too."""

import os
import subprocess
import sys
import time

from benchmarks.cases import harness
from benchmarks.competing_load import competing_load

# Burns ~0.4 s of CPU, starts a grandchild that burns as much, then sleeps until killed.
BURN = '''
import subprocess, sys, time
def burn():
    while time.process_time() < 0.4:
        pass
if sys.argv[1] == 'parent':
    subprocess.Popen([sys.executable, '-c', sys.argv[2], 'child', sys.argv[2]])
burn()
print('burnt', flush=True)
time.sleep(60)
'''


def _cpu_of(pid: int) -> float:
    return harness._proc_cpu_s(pid)  # noqa: SLF001 - the same reading, to wait on


def test_job_cpu_counts_live_descendants_then_reaped_children() -> None:
    before = harness.job_cpu_s()
    child = subprocess.Popen([sys.executable, '-c', BURN, 'parent', BURN],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == 'burnt'
        grandchildren = harness._descendants(child.pid)  # noqa: SLF001
        assert len(grandchildren) == 1
        deadline = time.monotonic() + 60
        while _cpu_of(grandchildren[0]) < 0.35 and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = harness.job_cpu_s() - before
        assert alive >= 0.6, alive  # Both, from /proc, while they run (a loaded CI saw 0.69).
    finally:
        for pid in harness._descendants(child.pid):  # noqa: SLF001
            os.kill(pid, 9)
        child.kill()
        child.wait()
    reaped = harness.job_cpu_s() - before
    assert reaped >= 0.35, reaped  # The child through RUSAGE_CHILDREN once waited for.
    assert harness.cpu_per_gb(2.0, 4e8) == 5.0


def test_competing_load_runs_busy_processes_only_inside_the_block() -> None:
    with competing_load(2) as pids:
        assert len(pids) == 2
        deadline = time.monotonic() + 30
        while min(_cpu_of(pid) for pid in pids) < 0.1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert min(_cpu_of(pid) for pid in pids) >= 0.1  # They do burn CPU.
    for pid in pids:
        assert not os.path.exists(f'/proc/{pid}')  # Killed and reaped.
