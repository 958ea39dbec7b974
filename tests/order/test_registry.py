"""The shuffle and partition tables: one per extension point, shared with ``streaming.base``."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from streaming.order import (
    SHUFFLES,
    default_num_canonical_nodes,
    get_epoch_order,
    get_shuffle,
    register_shuffle,
    shuffle_names,
    shuffle_traits,
    unregister_shuffle,
)
from streaming.order.shuffles import shuffle_entry

SIZES = np.array([10, 10, 10, 10])


def epoch(algo: str, **kwargs) -> list[int]:
    """One device, one worker: the epoch's ids in reading order."""
    arguments = dict(shard_sizes=SIZES, shard_streams=np.zeros(4, int),
                     stream_choose=np.array([40]), epoch=0, seed=3, shuffle=True,
                     shuffle_algo=algo, num_canonical_nodes=1, batch_size=40)
    arguments.update(kwargs)
    ids = get_epoch_order(**arguments).reshape(-1)
    return ids[ids >= 0].tolist()


def backwards(shard_sizes, num_canonical_nodes, seed, epoch, block_size) -> np.ndarray:
    return np.arange(int(np.sum(shard_sizes)))[::-1].copy()


@pytest.fixture
def registered():
    names = []

    def register(name: str, *args, **kwargs):
        names.append(name)
        return register_shuffle(name, *args, **kwargs)

    yield register
    for name in names:
        unregister_shuffle(name)


def test_a_shuffle_gets_the_reference_arguments(registered) -> None:
    seen = []

    def spy(shard_sizes, num_canonical_nodes, seed, epoch, block_size) -> np.ndarray:
        seen.append((shard_sizes.tolist(), num_canonical_nodes, seed, epoch, block_size))
        return np.arange(int(shard_sizes.sum()))

    registered('spy', spy)
    assert epoch('spy', shuffle_block_size=7) == list(range(40))
    assert seen == [([10, 10, 10, 10], 1, 3, 0, 7)]
    epoch('spy', stream_choose=np.array([25]), epoch=2)  # A partial draw: its units.
    assert sum(seen[-1][0]) == 25 and seen[-1][3] == 2


def test_the_table_is_the_reference_import_paths_table(registered) -> None:
    from streaming.base import shuffle
    assert shuffle.algos is SHUFFLES
    shuffle.algos['direct'] = backwards
    try:
        assert epoch('direct') == list(range(40))[::-1]
        assert 'direct' in shuffle_names()
        assert shuffle_traits('direct').canonical_nodes_per_node == 1
        assert shuffle.get_shuffle('direct', SIZES, 1, 0, 0).tolist() == list(range(40))[::-1]
    finally:
        unregister_shuffle('direct')
    registered('front', backwards)
    assert shuffle.algos['front'] is backwards


def test_a_built_in_replaced_in_the_table_is_used(registered) -> None:
    """As in the reference, ``algos['py1e'] = fn`` changes what py1e means."""
    original = SHUFFLES['py1e']
    SHUFFLES['py1e'] = backwards
    try:
        assert epoch('py1e') == list(range(40))[::-1]
    finally:
        SHUFFLES['py1e'] = original
    assert epoch('py1e') != list(range(40))[::-1]
    assert np.array_equal(original(SIZES, 1, 3, 0, 16), get_shuffle('py1e')(SIZES, 1, 3, 0, 16))


def test_traits(registered) -> None:
    registered('wide', backwards, canonical_nodes_per_node=8, uses_block_size=True)
    assert default_num_canonical_nodes('wide', 3) == 24
    assert shuffle_traits('wide').uses_block_size
    assert default_num_canonical_nodes('py1s', 1) == 64
    assert not shuffle_traits('naive').uses_block_size and shuffle_traits('index').uses_block_size


def test_registration_rules(registered) -> None:
    first = registered('mine', backwards)
    assert 'mine' in shuffle_names() and get_shuffle('mine') is first

    def other(*args) -> np.ndarray:
        return backwards(*args)

    registered('mine', other, uses_block_size=True)  # A custom name: replaced.
    assert get_shuffle('mine') is other and shuffle_traits('mine').uses_block_size
    with pytest.raises(ValueError, match='built-in'):
        register_shuffle('py1s', backwards)
    with pytest.raises(ValueError, match='built in'):
        unregister_shuffle('naive')
    with pytest.raises(ValueError, match='callable'):
        register_shuffle('x', None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match='canonical_nodes_per_node'):
        register_shuffle('x', backwards, canonical_nodes_per_node=0)
    with pytest.raises(ValueError, match="`shuffle_algo` must be one of .*'mine'"):
        get_shuffle('x')


def test_an_entry_unpickled_where_it_is_missing_registers_itself(registered) -> None:
    """What a DataLoader worker started by spawn does with the dataset's shuffle."""
    registered('travels', backwards, uses_block_size=True)
    data = pickle.dumps(shuffle_entry('travels'))
    unregister_shuffle('travels')
    entry = pickle.loads(data)
    assert get_shuffle('travels') is backwards and entry.traits.uses_block_size
    assert pickle.loads(pickle.dumps(shuffle_entry('py1e'))).fn.algo == 'py1e'


@pytest.mark.parametrize('method', ['stratified', 'per_stream', 'device_per_stream'])
def test_a_new_shuffle_serves_every_batching_method(registered, method: str) -> None:
    registered('backwards', backwards)
    streams = np.array([0, 0, 1, 1])
    order = get_epoch_order(shard_sizes=SIZES, shard_streams=streams,
                            stream_choose=np.array([20, 20]), epoch=0, seed=3, shuffle=True,
                            shuffle_algo='backwards', num_canonical_nodes=2,
                            num_physical_nodes=2, ranks_per_node=2, batch_size=2,
                            batching_method=method)
    device_batches = order.reshape(-1, 2)
    device_batches = device_batches[(device_batches >= 0).all(axis=1)]
    ids = device_batches.ravel()
    assert len(ids) and set(ids.tolist()) <= set(range(40))
    if method == 'stratified':
        global_batches = order.transpose(3, 2, 0, 1, 4).reshape(-1, 8)
        for batch in global_batches[(global_batches >= 0).all(axis=1)]:
            assert np.bincount(batch >= 20, minlength=2).tolist() == [4, 4]
    else:
        assert all(len({i >= 20 for i in batch.tolist()}) == 1 for batch in device_batches)


def test_partition_table_is_shared_and_checked() -> None:
    from streaming.base import partition
    from streaming.order import PARTITIONS, check_partition
    from streaming.order.partition import register_partition
    assert partition.algos is PARTITIONS
    with pytest.raises(ValueError, match='built in'):
        register_partition('orig', lambda *args: None)

    def broken(*args) -> np.ndarray:
        return np.zeros((2, 2))

    register_partition('broken', broken)
    try:
        check_partition(partition_algo='broken', num_canonical_nodes=3, num_physical_nodes=2)
        with pytest.raises(ValueError, match="partition_algo='broken' returned an array"):
            epoch('py1e', partition_algo='broken')
    finally:
        PARTITIONS.pop('broken')
    with pytest.raises(ValueError, match="`partition_algo` must be one of"):
        epoch('py1e', partition_algo='broken')
