"""Start a test job: one real process per rank, as torchrun would, and collect what each saw.

The rank processes are children forked from a zygote of this library (``tests/oracle/zygote.py``:
torch and ``streaming`` imported once per test worker), each with its own launcher variables,
gloo process group and DataLoader workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from typing import Any

from tests.oracle.zygote import zygote

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_job(tmp: str, *, nodes: int, ranks_per_node: int, dataset: dict[str, Any],
            timeout: float = 240, **config: Any) -> list[dict[str, Any]]:
    """Run ``nodes * ranks_per_node`` ranks; returns each rank's result, in rank order."""
    job = os.path.join(tmp, f'job-{uuid.uuid4().hex[:8]}')
    os.makedirs(job)
    world_size = nodes * ranks_per_node
    config = {'dataset': dataset, 'out': job, 'rendezvous': os.path.join(job, 'rendezvous'),
              **config}
    config_path = os.path.join(job, 'config.json')
    with open(config_path, 'w') as f:
        json.dump(config, f)
    env = {**os.environ, 'PYTHONPATH': REPO}
    server = zygote(sys.executable, ['torch.distributed', 'streaming'], env)
    port = str(20000 + uuid.uuid4().int % 20000)  # Shared by the job's ranks, as with torchrun.
    logs = [os.path.join(job, f'rank{rank}.log') for rank in range(world_size)]
    pids = []
    for rank in range(world_size):
        pids.append(server.spawn(
            ['-m', 'tests.dataset.rank_main', config_path], cwd=REPO, stdout=logs[rank],
            env={**env, 'RANK': str(rank), 'WORLD_SIZE': str(world_size),
                 'LOCAL_RANK': str(rank % ranks_per_node),
                 'LOCAL_WORLD_SIZE': str(ranks_per_node), 'MASTER_ADDR': '127.0.0.1',
                 'MASTER_PORT': port}))
    codes: list[int | None] = [None] * world_size
    try:
        for rank, pid in enumerate(pids):
            try:
                codes[rank] = server.wait(pid, timeout=timeout)
            except subprocess.TimeoutExpired:
                codes[rank] = -signal.SIGKILL  # killed and reaped by wait()
                raise
    finally:
        for rank, pid in enumerate(pids):
            if codes[rank] is None:  # another rank failed or timed out: end this one
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                codes[rank] = server.wait(pid, timeout=60)
    for rank, code in enumerate(codes):
        if code != 0:
            with open(logs[rank], errors='replace') as f:
                raise AssertionError(f'rank {rank} exited with {code}:\n{f.read()[-3000:]}')
    results = []
    for rank in range(world_size):
        with open(os.path.join(job, f'rank{rank}.json')) as f:
            results.append(json.load(f))
    return results


def global_batches(results: list[dict[str, Any]], epoch: int = 0) -> list[frozenset[int]]:
    """Global batch i = the union of every rank's batch i."""
    counts = {len(r['epochs'][epoch]) for r in results}
    assert len(counts) == 1, f'ranks saw different numbers of batches: {counts}'
    return [frozenset(i for r in results for i in r['epochs'][epoch][b])
            for b in range(counts.pop())]
