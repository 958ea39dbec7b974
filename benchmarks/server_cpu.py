"""The CPU the benchmark's own server side spends, and what share of a link that leaves a client.

Through the emulated link, the object store (moto behind ``benchmarks.linkemu_kernel``'s WSGI
layer), the kernel's shaping and TCP work, and the job under test share the machine's cores.
``ServerCpu`` takes the server processes' user + system CPU (``/proc/<pid>/stat``, every thread,
dead ones included) and the machine's ``/proc/stat`` counters around one run; ``link_share_cap``
turns CPU-seconds per GB into the largest share of the link any client could reach: the link
is capped either by its rate or by the cores running out.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.cases.harness import tree_cpu_s

TICK = os.sysconf('SC_CLK_TCK')


def machine_cpu_s() -> dict[str, float]:
    """Seconds since boot, summed over every core, by kind (``/proc/stat``'s ``cpu`` line)."""
    with open('/proc/stat') as f:
        fields = [int(x) / TICK for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return {'busy': user + nice + system + irq + softirq, 'softirq': irq + softirq,
            'idle': idle + iowait, 'steal': steal}


class ServerCpu:
    """``with ServerCpu(pids) as cpu: ...``; then ``cpu.result(payload_bytes)``: the servers'
    CPU, the machine's softirq CPU (the shaping and the TCP stack's deferred work, on either
    side) and all of the machine's busy CPU, over the block, in seconds and per GB of payload."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def __enter__(self) -> ServerCpu:
        self._server = sum(tree_cpu_s(pid) for pid in self.pids)
        self._machine = machine_cpu_s()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server_s = sum(tree_cpu_s(pid) for pid in self.pids) - self._server
        machine = machine_cpu_s()
        self.softirq_s = machine['softirq'] - self._machine['softirq']
        self.machine_busy_s = machine['busy'] - self._machine['busy']
        self.steal_s = machine['steal'] - self._machine['steal']

    def result(self, payload_bytes: float) -> dict[str, float]:
        gb = payload_bytes / 1e9
        return {'server_cpu_s': self.server_s, 'server_cpu_s_per_gb': self.server_s / gb,
                'softirq_s_per_gb': self.softirq_s / gb,
                'machine_cpu_s_per_gb': self.machine_busy_s / gb,
                'steal_s_per_gb': self.steal_s / gb}


def link_share_cap(cpu_s_per_gb: float, link_rate: float, cores: float | None = None) -> float:
    """The largest share of a ``link_rate`` (bytes/s) link reachable when every GB through it
    costs ``cpu_s_per_gb`` of CPU in all, on ``cores`` cores (this machine's by default)."""
    cores = cores if cores is not None else float(os.cpu_count() or 1)
    if cpu_s_per_gb <= 0:
        return 1.0
    return min(1.0, cores * 1e9 / cpu_s_per_gb / link_rate)


def ceiling_rows(server_per_gb: float, softirq_per_gb: float, link_rate: float,
                 client_per_gb: tuple[float, ...] = (0.0, 10.0, 20.0, 30.0)
                 ) -> list[dict[str, Any]]:
    """For each client cost: the total CPU per GB and the link share it caps at."""
    return [{'client_cpu_s_per_gb': c, 'total_cpu_s_per_gb': server_per_gb + softirq_per_gb + c,
             'share_cap': link_share_cap(server_per_gb + softirq_per_gb + c, link_rate)}
            for c in client_per_gb]
