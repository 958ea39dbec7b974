"""Start a test job: one real process per rank, as torchrun would, and collect what each saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

from benchmarks.ranks import finish_ranks

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
    procs = []
    port = str(20000 + uuid.uuid4().int % 20000)  # Shared by the job's ranks, as with torchrun.
    for rank in range(world_size):
        env = {**os.environ, 'RANK': str(rank), 'WORLD_SIZE': str(world_size),
               'LOCAL_RANK': str(rank % ranks_per_node),
               'LOCAL_WORLD_SIZE': str(ranks_per_node), 'MASTER_ADDR': '127.0.0.1',
               'MASTER_PORT': port,
               'PYTHONPATH': REPO}
        procs.append(subprocess.Popen([sys.executable, '-m', 'tests.dataset.rank_main',
                                       config_path], env=env, cwd=REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    return finish_ranks(procs, job, timeout)


def run_runs(tmp: str, *, nodes: int, ranks_per_node: int, runs: list[dict[str, Any]],
             timeout: float = 240, **config: Any) -> list[list[dict[str, Any]]]:
    """Several runs (each a ``run_job`` config: ``dataset``, ``num_workers``, ...) done in turn by
    the same rank processes of one world; returns, per run, each rank's result in rank order."""
    results = run_job(tmp, nodes=nodes, ranks_per_node=ranks_per_node, dataset={}, runs=runs,
                      timeout=timeout, **config)
    return [[rank['runs'][i] for rank in results] for i in range(len(runs))]


def global_batches(results: list[dict[str, Any]], epoch: int = 0) -> list[frozenset[int]]:
    """Global batch i = the union of every rank's batch i."""
    counts = {len(r['epochs'][epoch]) for r in results}
    assert len(counts) == 1, f'ranks saw different numbers of batches: {counts}'
    return [frozenset(i for r in results for i in r['epochs'][epoch][b])
            for b in range(counts.pop())]
