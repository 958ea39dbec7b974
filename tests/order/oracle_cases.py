"""Configurations for the order-equality tests against the reference, and how to run them.

Cases are drawn from a seeded generator, so the matrix is the same on every run. All reference
work for a test module goes to one reference process (two when a module has more dataset cases
than the reference's file descriptors allow in one process).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from streaming.order import apply_weights, get_epoch_order
from streaming.order.sampling import stream_proportions
from tests.oracle.deaths import failure_log
from tests.oracle.runner import reference_run

DRIVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'oracle',
                      'ref_order.py')
# Reference datasets per process (each keeps a few hundred descriptors open until exit).
_DATASETS_PER_PROCESS = 40


def run_reference_order(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results of ``ops`` from the reference (see ``tests/oracle/ref_order.py``)."""
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
        proc = reference_run([DRIVER], input=json.dumps(batch), timeout=900)
        if proc.returncode:
            raise RuntimeError(f'reference order driver failed:\n{failure_log(proc.stderr)}')
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


def work_cases(seed: int, count: int, algos: tuple[str, ...],
               methods: tuple[str, ...] = ('random',),
               shard_samples: int = 40) -> list[dict[str, Any]]:
    """Dataset configurations: streams, weights, sampling, batching, topology, resume.

    Shards hold 1 to ``shard_samples - 1`` samples; each case's batching method is drawn from
    ``methods`` (a draw made only when there is more than ``random``, so that the random-batching
    cases stay as they were).
    """
    rng = np.random.default_rng(seed)
    cases = []
    for number in range(count):
        streams = [{'sizes': rng.integers(1, shard_samples, rng.integers(1, 6)).tolist()}
                   for _ in range(int(rng.integers(1, 4)))]
        nodes = int(rng.choice([1, 2, 4]))
        kwargs = {'shuffle_block_size': int(rng.integers(5, 100)),
                  'shuffle_seed': int(rng.integers(0, 1000)),
                  'shuffle': bool(rng.random() < 0.85), 'shuffle_algo': str(rng.choice(algos)),
                  'num_canonical_nodes': nodes * int(rng.choice([1, 2, 3])),
                  'sampling_method': str(rng.choice(['balanced', 'fixed'])),
                  'sampling_granularity': int(rng.choice([1, 1, 3, 7])),
                  'partition_algo': str(rng.choice(['orig', 'relaxed']))}
        if methods != ('random',):
            kwargs['batching_method'] = str(rng.choice(methods))
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
    stream_sizes = np.array([sum(stream['sizes']) for stream in streams])
    proportion = [stream.get('proportion') for stream in streams]
    choose = apply_weights(stream_sizes, proportion=proportion,
                           repeat=[stream.get('repeat') for stream in streams],
                           choose=[stream.get('choose') for stream in streams],
                           epoch_size=kwargs.get('epoch_size'), seed=kwargs['shuffle_seed'])
    shares = stream_proportions(stream_sizes, choose, proportion=proportion,
                                epoch_size=kwargs.get('epoch_size'))
    order = get_epoch_order(
        shard_sizes=sizes, shard_streams=owner, stream_choose=choose, epoch=case['epoch'],
        seed=kwargs['shuffle_seed'], shuffle=kwargs['shuffle'],
        shuffle_algo=kwargs['shuffle_algo'], shuffle_block_size=kwargs['shuffle_block_size'],
        num_canonical_nodes=kwargs['num_canonical_nodes'],
        partition_algo=kwargs['partition_algo'], num_physical_nodes=world['nodes'],
        ranks_per_node=world['ranks'], workers_per_rank=world['workers'],
        batch_size=case['batch_size'], sampling_method=kwargs['sampling_method'],
        sampling_granularity=kwargs['sampling_granularity'],
        sample_in_epoch=case['sample_in_epoch'],
        batching_method=kwargs.get('batching_method', 'random'), stream_proportions=shares)
    return choose.tolist(), order


# Reference failures where we give an order instead (see docs/shuffling.md, "Where we differ").
_REFERENCE_ONLY_FAILURES = ('The number of samples assigned to a canonical node is 0',)


def work_outcome(case: dict[str, Any], result: dict[str, Any]) -> str:
    """How our order for a ``work`` case compares with the reference's ``result``.

    ``same`` (identical order and per-stream counts), ``both refuse`` (the reference raised and
    we raise ValueError), ``reference fails`` (a known reference failure where we give an
    order), or a description of the mismatch.
    """
    try:
        choose, ours = our_work(case)
    except ValueError as error:
        if 'error' in result:
            return 'both refuse'
        return f'only we refuse: {error}'
    if 'error' in result:
        if 'Resuming further' in result['error']:  # a resume point past the epoch
            return 'same' if not (ours >= 0).any() else f'we read past: {result["error"]}'
        if any(text in result['error'] for text in _REFERENCE_ONLY_FAILURES):
            return 'reference fails'
        return f'only the reference refuses: {result["error"]}'
    expected = np.array(result['work'])
    if choose != result['choose']:
        return f'per-stream counts differ: ours {choose}, reference {result["choose"]}'
    if expected.size == 0:  # JSON drops an empty array's trailing dimensions
        return 'same' if not (ours >= 0).any() else 'the reference has no samples, we have some'
    if ours.shape != expected.shape or not np.array_equal(ours, expected):
        return f'orders differ (shapes {ours.shape}, {expected.shape})'
    return 'same'


def matrix_cell(case: dict[str, Any]) -> tuple[str, str]:
    """(shuffle algo, or ``unshuffled``; batching method) of a ``work`` case."""
    kwargs = case['kwargs']
    algo = kwargs['shuffle_algo'] if kwargs['shuffle'] else 'unshuffled'
    return algo, kwargs.get('batching_method', 'random')
