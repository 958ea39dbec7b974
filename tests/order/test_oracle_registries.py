"""A shuffle, partition and batching method registered the reference's way give its order.

``tests/oracle/custom_order.py`` holds one of each, of the reference's signatures. The reference
gets them in its runtime tables (``streaming.base.shuffle.algos``, ``partition.algos``,
``batching.batching_methods``); we get them either the same way or through our
``register_shuffle`` / ``register_partition`` fronts. Whole epochs (``get_epoch_order``, every
batching method, resume points, topologies) and ``StreamingDataset`` iteration must be identical.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.oracle import custom_order
from tests.order.oracle_cases import run_reference_order, work_cases, work_outcome

METHODS = ('random', 'stratified', 'per_stream', 'device_per_stream')
ACCEPTED = ('same', 'both refuse', 'reference fails')


def _cases() -> list[dict]:
    cases = work_cases(31, 30, ('mine',), METHODS, shard_samples=120)
    for number, case in enumerate(cases):
        case['install'] = ['install']
        if number % 3 == 0:
            case['kwargs']['partition_algo'] = 'mine'
    return cases


CASES = _cases()
ITERATE_KWARGS = [
    {'batch_size': 4, 'shuffle': True, 'shuffle_algo': 'mine', 'num_canonical_nodes': 2,
     'shuffle_block_size': 7, 'shuffle_seed': 5},
    {'batch_size': 4, 'shuffle': True, 'shuffle_algo': 'mine', 'partition_algo': 'mine',
     'num_canonical_nodes': 1, 'shuffle_seed': 6},
    {'batch_size': 4, 'shuffle': True, 'shuffle_algo': 'py1e', 'num_canonical_nodes': 1,
     'shuffle_block_size': 50, 'shuffle_seed': 7},
    {'batch_size': 3, 'shuffle': True, 'shuffle_algo': 'mine', 'partition_algo': 'mine',
     'num_canonical_nodes': 1, 'shuffle_seed': 8, 'epoch_size': 70},
]
# The last two iterate with ``random`` batching replaced by ``odd_first``.
INSTALL = [['install'], ['install'], ['install', 'install_batching'],
           ['install', 'install_batching']]


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory) -> str:
    from streaming import MDSWriter
    out = str(tmp_path_factory.mktemp('registries') / 'data')
    with MDSWriter(out=out, columns={'x': 'int'}, size_limit=300) as writer:
        for index in range(100):
            writer.write({'x': index})
    return out


@pytest.fixture(scope='module')
def reference(data_dir) -> dict[str, list[dict]]:
    iterate = [{'kind': 'iterate', 'dir': data_dir, 'kwargs': kwargs, 'epochs': 2,
                'install': install} for kwargs, install in zip(ITERATE_KWARGS, INSTALL)]
    results = run_reference_order(CASES + iterate)
    return {'work': results[:len(CASES)], 'iterate': results[len(CASES):]}


@pytest.fixture(params=['reference tables', 'register_shuffle'])
def registered(request):
    """``mine`` registered in our tables one way or the other; removed afterwards."""
    from streaming.base import batching, partition, shuffle
    from streaming.order import register_shuffle, unregister_shuffle
    from streaming.order.batching import BuiltinBatching
    from streaming.order.partition import PARTITIONS, register_partition
    if request.param == 'reference tables':
        custom_order.install()
    else:
        register_shuffle('mine', custom_order.shard_runs)
        register_partition('mine', custom_order.reversed_batches)
    assert shuffle.algos['mine'] is custom_order.shard_runs
    assert partition.algos is PARTITIONS and PARTITIONS['mine'] is custom_order.reversed_batches
    yield request.param
    unregister_shuffle('mine')
    PARTITIONS.pop('mine')
    assert isinstance(batching.batching_methods['random'], BuiltinBatching)


def test_whole_epochs_match_the_reference(reference, registered) -> None:
    outcomes = [work_outcome(case, result) for case, result in zip(CASES, reference['work'])]
    wrong = [(case, outcome) for case, outcome in zip(CASES, outcomes) if outcome not in ACCEPTED]
    assert not wrong, wrong[:3]
    assert outcomes.count('same') >= 20, outcomes
    same = {case['kwargs'].get('batching_method') for case, outcome in zip(CASES, outcomes)
            if outcome == 'same'}
    assert same == set(METHODS)
    assert any(case['kwargs']['partition_algo'] == 'mine' and outcome == 'same'
               for case, outcome in zip(CASES, outcomes))


def test_datasets_iterate_in_the_reference_order(reference, registered, data_dir) -> None:
    from streaming import StreamingDataset
    from streaming.base import batching
    builtin = batching.batching_methods['random']
    for kwargs, result, install in zip(ITERATE_KWARGS, reference['iterate'], INSTALL):
        assert 'error' not in result, result
        if 'install_batching' in install:
            custom_order.install_batching()
        try:
            dataset = StreamingDataset(local=data_dir, **kwargs)
            ours = [[int(sample['x']) for sample in dataset] for _ in range(2)]
        finally:
            batching.batching_methods['random'] = builtin
        assert ours == result['epochs'], kwargs
        assert ours[0] != ours[1] and sorted(set(ours[0])) != ours[0]


def test_a_bad_shuffle_result_is_named(registered) -> None:
    from streaming.order import get_epoch_order, register_shuffle, unregister_shuffle

    def short(shard_sizes, num_canonical_nodes, seed, epoch, block_size) -> np.ndarray:
        return np.arange(int(np.sum(shard_sizes)) - 1)

    register_shuffle('short', short)
    try:
        with pytest.raises(ValueError, match="shuffle_algo='short' returned .* one integer"):
            get_epoch_order(shard_sizes=np.array([5, 5]), shard_streams=np.zeros(2, int),
                            stream_choose=np.array([10]), epoch=0, seed=0, shuffle=True,
                            shuffle_algo='short', num_canonical_nodes=1, batch_size=2)
    finally:
        unregister_shuffle('short')
