"""Our epoch order equals the reference's (mosaicml-streaming 0.13.0) sample for sample.

One reference process per module answers every case (see ``oracle_cases``): the shuffles
(``get_shuffle``), the partitions (``get_partitions``, with resume offsets and
``initial_physical_nodes``), per-shard sampling (``get_sampling``) and whole epochs of
``StreamingDataset``s with ``random`` batching over 1-3 streams with every kind of weight,
``balanced``/``fixed`` sampling, granularities, 1-4 nodes, 1-3 ranks and workers, epochs 0-2
and resume points.
"""

from __future__ import annotations

import numpy as np
import pytest

from streaming.order.partition import deal_positions
from streaming.order.resample import choose_per_shard
from streaming.order.shuffles import shuffle_positions
from tests.order.oracle_cases import run_reference_order, work_cases, work_outcome

EXACT_ALGOS = ('naive', 'py1e', 'py1s', 'py2s')


def _shuffle_cases() -> list[dict]:
    rng = np.random.default_rng(5)
    cases = []
    for algo in EXACT_ALGOS:
        for _ in range(25):
            sizes = rng.integers(1, 60, rng.integers(1, 15)).tolist()
            ncn = int(rng.integers(1, 6))
            if sum(sizes) < ncn:  # the reference's py1e cannot leave a node empty
                continue
            cases.append({'kind': 'shuffle', 'algo': algo, 'sizes': sizes, 'ncn': ncn,
                          'seed': int(rng.integers(0, 1000)), 'epoch': int(rng.integers(0, 4)),
                          'block': int(rng.integers(4, 200))})
    return cases


def _partition_cases() -> list[dict]:
    rng = np.random.default_rng(11)
    cases = []
    while len(cases) < 120:
        nodes = int(rng.choice([1, 2, 3, 4]))
        canonical = nodes * int(rng.choice([1, 2, 3])) if rng.random() < 0.7 else max(1,
                                                                                        nodes // 2)
        samples = int(rng.integers(1, 300))
        if samples < canonical < nodes:  # the reference fails there
            continue
        cases.append({'kind': 'partition', 'algo': 'orig', 'num_samples': samples,
                      'num_canonical_nodes': canonical, 'num_physical_nodes': nodes,
                      'ranks_per_node': int(rng.integers(1, 4)),
                      'workers_per_rank': int(rng.integers(1, 4)),
                      'batch_size': int(rng.integers(1, 6)),
                      'drop_first': int(rng.integers(0, samples)) if rng.random() < 0.5 else 0})
    while len(cases) < 200:
        canonical = int(rng.choice([2, 3, 4, 6, 8]))
        initial = int(rng.choice([d for d in range(1, 9)
                                  if canonical % d == 0 or d % canonical == 0]))
        nodes, ranks = int(rng.integers(1, 7)), int(rng.integers(1, 4))
        global_batch = initial * ranks * int(rng.integers(1, 5))
        if global_batch % (nodes * ranks):
            continue
        samples = int(rng.integers(1, 300))
        cases.append({'kind': 'partition', 'algo': 'relaxed', 'num_samples': samples,
                      'num_canonical_nodes': canonical, 'num_physical_nodes': nodes,
                      'ranks_per_node': ranks, 'workers_per_rank': int(rng.integers(1, 4)),
                      'batch_size': global_batch // (nodes * ranks),
                      'drop_first': int(rng.integers(0, samples)) if rng.random() < 0.5 else 0,
                      'initial_physical_nodes': initial})
    # Epochs of one sample a row or fewer, dealt to more nodes than rows: the reference pads
    # the epoch as a whole, wrapping around it.
    for samples, canonical, nodes in [(1, 1, 2), (1, 2, 4), (2, 2, 4), (3, 3, 6), (3, 4, 8),
                                      (4, 4, 8)]:
        for ranks, workers, batch in [(1, 1, 1), (2, 1, 3), (1, 2, 3), (2, 2, 1)]:
            cases.append({'kind': 'partition', 'algo': 'orig', 'num_samples': samples,
                          'num_canonical_nodes': canonical, 'num_physical_nodes': nodes,
                          'ranks_per_node': ranks, 'workers_per_rank': workers,
                          'batch_size': batch, 'drop_first': 0})
    return cases


def _sampling_cases() -> list[dict]:
    rng = np.random.default_rng(0)
    cases = []
    for _ in range(60):
        sizes = rng.integers(1, 50, rng.integers(1, 12)).tolist()
        cases.append({'kind': 'sampling', 'sizes': sizes,
                      'choose': int(rng.integers(0, 3 * sum(sizes))),
                      'granularity': int(rng.integers(1, 20)), 'seed': int(rng.integers(0, 100)),
                      'epoch': int(rng.integers(0, 3)), 'use_epoch': bool(rng.random() < 0.5)})
    return cases


CASES = {'shuffle': _shuffle_cases(), 'partition': _partition_cases(),
         'sampling': _sampling_cases(),
         'work': work_cases(0, 40, EXACT_ALGOS) + work_cases(1, 40, EXACT_ALGOS)}


ITERATE_KWARGS = [{'batch_size': 4, 'shuffle': True, 'shuffle_algo': algo,
                   'num_canonical_nodes': 2, 'shuffle_block_size': 30, 'shuffle_seed': 123}
                  for algo in EXACT_ALGOS]


@pytest.fixture(scope='module')
def small_dataset(tmp_path_factory) -> str:
    """137 samples in shards of about 20, written by our writer."""
    from streaming import MDSWriter
    out = str(tmp_path_factory.mktemp('oracle-order') / 'data')
    with MDSWriter(out=out, columns={'x': 'int'}, size_limit=200) as writer:
        for number in range(137):
            writer.write({'x': number})
    return out


@pytest.fixture(scope='module')
def reference(small_dataset) -> dict[str, list[dict]]:
    groups = dict(CASES, iterate=[{'kind': 'iterate', 'dir': small_dataset, 'kwargs': kwargs,
                                   'epochs': 2} for kwargs in ITERATE_KWARGS])
    ops = [case for group in groups.values() for case in group]
    results = iter(run_reference_order(ops))
    return {name: [next(results) for _ in group] for name, group in groups.items()}


def test_a_dataset_iterates_in_the_reference_order_epoch_after_epoch(reference,
                                                                      small_dataset) -> None:
    from streaming import StreamingDataset
    for kwargs, result in zip(ITERATE_KWARGS, reference['iterate']):
        assert 'error' not in result, result
        dataset = StreamingDataset(local=small_dataset, **kwargs)
        ours = [[int(sample['x']) for sample in dataset] for _ in range(2)]
        assert ours == result['epochs'], kwargs


def _ids(result: dict) -> np.ndarray:
    assert 'error' not in result, result
    return np.array(result['ids'])


def test_every_shuffle_algo_gives_the_reference_permutation(reference) -> None:
    for case, result in zip(CASES['shuffle'], reference['shuffle']):
        ours = shuffle_positions(case['algo'], np.array(case['sizes']), case['ncn'],
                                 case['seed'], case['epoch'], case['block'])
        assert np.array_equal(ours, _ids(result)), case


def test_both_partitions_deal_positions_as_the_reference(reference) -> None:
    for case, result in zip(CASES['partition'], reference['partition']):
        settings = {k: v for k, v in case.items() if k not in ('kind', 'algo')}
        ours = deal_positions(case['algo'], **settings)
        expected = _ids(result)
        assert ours.shape == expected.shape and np.array_equal(ours, expected), case


def test_per_shard_sampling_matches(reference) -> None:
    for case, result in zip(CASES['sampling'], reference['sampling']):
        ours = choose_per_shard(np.array(case['sizes']), case['choose'], case['granularity'],
                                case['seed'], case['epoch'], case['use_epoch'])
        assert ours.tolist() == result['ids'], case


def test_whole_epochs_of_random_batching_match_sample_for_sample(reference) -> None:
    outcomes = [work_outcome(case, result)
                for case, result in zip(CASES['work'], reference['work'])]
    wrong = [(case, outcome) for case, outcome in zip(CASES['work'], outcomes)
             if outcome not in ('same', 'both refuse', 'reference fails')]
    assert not wrong, wrong[:3]
    assert outcomes.count('same') >= 70
