"""The shuffle registry: what each option of register_shuffle changes in the epoch order."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from streaming.order import (
    CanonicalRow,
    default_num_canonical_nodes,
    get_epoch_order,
    get_shuffle,
    register_shuffle,
    shuffle_names,
    unregister_shuffle,
)

SIZES = np.array([10, 10, 10, 10])


def epoch(algo: str, **kwargs) -> list[int]:
    """One device, one worker: the epoch's ids in reading order."""
    arguments = dict(shard_sizes=SIZES, shard_streams=np.zeros(4, int),
                     stream_choose=np.array([40]), epoch=0, seed=3, shuffle=True,
                     shuffle_algo=algo, num_canonical_nodes=1, batch_size=40)
    arguments.update(kwargs)
    ids = get_epoch_order(**arguments).reshape(-1)
    return ids[ids >= 0].tolist()


def write_in_order(row: CanonicalRow, out: np.ndarray, block_size: int,
                   rng: np.random.Generator) -> None:
    row.write_to(out)


def reverse(ids: np.ndarray, rng: np.random.Generator) -> None:
    ids[:] = ids[::-1].copy()


@pytest.fixture
def registered():
    names = []

    def register(name: str, *args, **kwargs):
        names.append(name)
        return register_shuffle(name, *args, **kwargs)

    yield register
    for name in names:
        unregister_shuffle(name)


def test_a_row_shuffle_gets_its_row_and_the_block_size(registered) -> None:
    seen = []

    def spy(row: CanonicalRow, out: np.ndarray, block_size: int,
            rng: np.random.Generator) -> None:
        seen.append((row.num_spans, row.num_samples, block_size, len(out)))
        row.write_to(out)

    registered('spy', spy)
    # Shards are dealt to the canonical node in a seeded order, whole: 4 spans of 10.
    ids = epoch('spy', shuffle_block_size=7)
    assert seen == [(4, 40, 7, 40)]
    assert sorted(ids) == list(range(40)) and ids != list(range(40))
    assert all(ids[i:i + 10] == list(range(ids[i], ids[i] + 10)) for i in range(0, 40, 10))


def test_a_whole_epoch_shuffle_sees_every_id_at_once(registered) -> None:
    registered('reverse', shuffle_epoch=reverse)
    assert epoch('reverse') == list(range(40))[::-1]


def test_shuffle_within_units_shuffles_each_shard_before_rows_are_cut(registered) -> None:
    registered('inside', write_in_order, shuffle_within_units=True)
    ids = epoch('inside')
    blocks = [ids[i:i + 10] for i in range(0, 40, 10)]
    assert all(len({i // 10 for i in block}) == 1 for block in blocks)  # Shards stay whole...
    assert any(block != sorted(block) for block in blocks)  # ...but are shuffled inside.


def test_canonical_nodes_per_node_sets_the_default(registered) -> None:
    registered('wide', write_in_order, canonical_nodes_per_node=8)
    assert default_num_canonical_nodes('wide', 3) == 24
    assert default_num_canonical_nodes('py1s', 1) == 64


def test_registration_rules(registered) -> None:
    first = registered('mine', write_in_order)
    assert 'mine' in shuffle_names() and get_shuffle('mine') is first
    second = registered('mine', write_in_order, uses_block_size=True)  # A custom name: replaced.
    assert get_shuffle('mine') is second
    with pytest.raises(ValueError, match='built-in'):
        register_shuffle('py1s', write_in_order)
    with pytest.raises(ValueError, match='built in'):
        unregister_shuffle('naive')
    with pytest.raises(ValueError, match='exactly one'):
        register_shuffle('x', write_in_order, shuffle_epoch=reverse)
    with pytest.raises(ValueError, match='canonical_nodes_per_node'):
        register_shuffle('x', write_in_order, canonical_nodes_per_node=0)
    with pytest.raises(ValueError, match="`shuffle_algo` must be one of .*'mine'"):
        get_shuffle('x')


def test_an_entry_unpickled_where_it_is_missing_registers_itself(registered) -> None:
    """What a DataLoader worker started by spawn does with the dataset's shuffle."""
    registered('travels', write_in_order, uses_block_size=True)
    data = pickle.dumps(get_shuffle('travels'))
    unregister_shuffle('travels')
    algo = pickle.loads(data)
    assert get_shuffle('travels') is algo and algo.uses_block_size
    assert pickle.loads(pickle.dumps(get_shuffle('py1e'))) is get_shuffle('py1e')


@pytest.mark.parametrize('method', ['stratified', 'per_stream', 'device_per_stream'])
def test_a_new_shuffle_serves_every_batching_method(registered, method: str) -> None:
    # A new name takes our layout (streaming/order/batching.py), not the reference's path.
    registered('in-order', write_in_order)
    streams = np.array([0, 0, 1, 1])
    order = get_epoch_order(shard_sizes=SIZES, shard_streams=streams,
                            stream_choose=np.array([20, 20]), epoch=0, seed=3, shuffle=True,
                            shuffle_algo='in-order', num_canonical_nodes=2, num_physical_nodes=2,
                            ranks_per_node=2, batch_size=2, batching_method=method)
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
