"""Bad settings fail early with a ValueError that names the parameter and what is allowed."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.order import default_num_canonical_nodes
from tests.order.helpers import one_stream, order


@pytest.mark.parametrize('name,value,message', [
    ('shuffle_algo', 'py3x', "shuffle_algo.*'naive', 'py1b', 'py1br', 'py1e', 'py1s', 'py2s'"),
    ('batching_method', 'mixed', "batching_method.*'random', 'stratified'"),
    ('partition_algo', 'new', "partition_algo.*'orig', 'relaxed'"),
    ('sampling_method', 'even', "sampling_method.*'balanced', 'fixed'"),
    ('batch_size', 0, 'batch_size` must be an int >= 1'),
    ('num_canonical_nodes', 0, 'num_canonical_nodes` must be an int >= 1'),
    ('num_physical_nodes', -1, 'num_physical_nodes'),
    ('ranks_per_node', 0, 'ranks_per_node'),
    ('workers_per_rank', -1, 'workers_per_rank` must be an int >= 0'),
    ('shuffle_block_size', 0, 'shuffle_block_size'),
    ('sampling_granularity', 0, 'sampling_granularity'),
    ('sample_in_epoch', -5, 'sample_in_epoch'),
    ('epoch', -1, 'epoch'),
    ('seed', -1, 'seed'),
    ('batch_size', 2.5, 'batch_size'),
    ('initial_physical_nodes', 0, 'initial_physical_nodes'),
])
def test_bad_setting_is_named(name: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        order(**{name: value})


@pytest.mark.parametrize('data,message', [
    ({'shard_sizes': np.array([5, -1])}, 'shard_sizes` must not be negative'),
    ({'shard_sizes': np.array([5.5, 1])}, 'shard_sizes` must be a 1-D array of ints'),
    ({'shard_streams': np.array([0])}, 'shard_streams` has 1 entries but `shard_sizes` has 2'),
    ({'shard_streams': np.array([0, 3])}, 'stream 3 but `stream_choose` has only 1'),
])
def test_bad_arrays_are_named(data: dict, message: str) -> None:
    arguments = one_stream([5, 5])
    arguments.update(data)
    with pytest.raises(ValueError, match=message):
        order(arguments)


def test_shuffle_algo_is_checked_even_when_not_shuffling() -> None:
    with pytest.raises(ValueError, match='shuffle_algo'):
        order(shuffle=False, shuffle_algo='nope')


def test_default_canonical_nodes_follow_the_reference() -> None:
    assert default_num_canonical_nodes('py1e', 3) == 3
    assert default_num_canonical_nodes('py1br', 1) == 1
    assert default_num_canonical_nodes('py1s', 2) == 128
    assert default_num_canonical_nodes('py2s', 1) == 64
