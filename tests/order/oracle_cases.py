"""Configurations for the order-equality tests against the reference, and how to run them.

Cases are drawn from a seeded generator, so the matrix is the same on every run. All reference
work for a test module goes to one reference process (two when a module has more dataset cases
than the reference's file descriptors allow in one process).
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import numpy as np

from streaming.order import apply_weights, get_epoch_order
from tests.oracle.runner import reference_lock, reference_python

DRIVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'oracle',
                      'ref_order.py')
# Reference datasets per process (each keeps a few hundred descriptors open until exit).
_DATASETS_PER_PROCESS = 40


def run_reference_order(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results of ``ops`` from the reference (see ``tests/oracle/ref_order.py``)."""
    python = reference_python()
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
    batches: list[list[dict[str, Any]]] = [[]]
    datasets = 0
    for op in ops:
        if op['kind'] == 'work':
            if datasets == _DATASETS_PER_PROCESS:
                batches.append([])
                datasets = 0
            datasets += 1
        batches[-1].append(op)
    results: list[dict[str, Any]] = []
    for batch in batches:
        with reference_lock():
            proc = subprocess.run([python, DRIVER], input=json.dumps(batch), text=True,
                                  capture_output=True, timeout=900, env=env)
        if proc.returncode:
            raise RuntimeError(f'reference order driver failed:\n{proc.stderr[-4000:]}')
        results += json.loads(proc.stdout)
    return results


def _weights(rng: np.random.Generator, streams: list[dict], mode: int, kwargs: dict) -> None:
    if mode == 0:
        for stream in streams:
            stream['proportion'] = float(rng.choice([0.1, 0.2, 0.7, 0.29, 1.0]))
        if rng.random() < 0.5:
            kwargs['epoch_size'] = int(rng.integers(10, 200))
    elif mode == 1:
        for stream in streams:
            stream['repeat'] = float(rng.choice([0.5, 0.29, 1.0, 2.0, 1.7]))
    elif mode == 2:
        for stream in streams:
            stream['choose'] = int(rng.integers(1, 100))
    elif rng.random() < 0.3:
        kwargs['epoch_size'] = int(rng.integers(10, 200))


def work_cases(seed: int, count: int, algos: tuple[str, ...]) -> list[dict[str, Any]]:
    """Random-batching dataset configurations: streams, weights, sampling, topology, resume."""
    rng = np.random.default_rng(seed)
    cases = []
    for number in range(count):
        streams = [{'sizes': rng.integers(1, 40, rng.integers(1, 6)).tolist()}
                   for _ in range(int(rng.integers(1, 4)))]
        nodes = int(rng.choice([1, 2, 4]))
        kwargs = {'shuffle_block_size': int(rng.integers(5, 100)),
                  'shuffle_seed': int(rng.integers(0, 1000)),
                  'shuffle': bool(rng.random() < 0.85), 'shuffle_algo': str(rng.choice(algos)),
                  'num_canonical_nodes': nodes * int(rng.choice([1, 2, 3])),
                  'sampling_method': str(rng.choice(['balanced', 'fixed'])),
                  'sampling_granularity': int(rng.choice([1, 1, 3, 7])),
                  'partition_algo': str(rng.choice(['orig', 'relaxed']))}
        _weights(rng, streams, number % 4, kwargs)
        total = sum(sum(stream['sizes']) for stream in streams)
        cases.append({
            'kind': 'work', 'streams': streams, 'batch_size': int(rng.integers(1, 5)),
            'kwargs': kwargs, 'epoch': int(rng.integers(0, 3)),
            'world': {'nodes': nodes, 'ranks': int(rng.integers(1, 4)),
                      'workers': int(rng.integers(1, 4))},
            'sample_in_epoch': int(rng.integers(0, total)) if rng.random() < 0.4 else 0})
    return cases


def our_work(case: dict[str, Any]) -> tuple[list[int], np.ndarray]:
    """Our per-stream counts and epoch order for a ``work`` case."""
    streams, kwargs, world = case['streams'], case['kwargs'], case['world']
    sizes = np.concatenate([stream['sizes'] for stream in streams])
    owner = np.concatenate([[k] * len(stream['sizes']) for k, stream in enumerate(streams)])
    choose = apply_weights(np.array([sum(stream['sizes']) for stream in streams]),
                           proportion=[stream.get('proportion') for stream in streams],
                           repeat=[stream.get('repeat') for stream in streams],
                           choose=[stream.get('choose') for stream in streams],
                           epoch_size=kwargs.get('epoch_size'), seed=kwargs['shuffle_seed'])
    order = get_epoch_order(
        shard_sizes=sizes, shard_streams=owner, stream_choose=choose, epoch=case['epoch'],
        seed=kwargs['shuffle_seed'], shuffle=kwargs['shuffle'],
        shuffle_algo=kwargs['shuffle_algo'], shuffle_block_size=kwargs['shuffle_block_size'],
        num_canonical_nodes=kwargs['num_canonical_nodes'],
        partition_algo=kwargs['partition_algo'], num_physical_nodes=world['nodes'],
        ranks_per_node=world['ranks'], workers_per_rank=world['workers'],
        batch_size=case['batch_size'], sampling_method=kwargs['sampling_method'],
        sampling_granularity=kwargs['sampling_granularity'],
        sample_in_epoch=case['sample_in_epoch'])
    return choose.tolist(), order
