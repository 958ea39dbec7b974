"""Batching methods and stream mixing: per-stream counts, and what each batch may hold."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from streaming.order import apply_weights, global_batches
from streaming.order.batching import stratified_counts
from tests.order.helpers import batch_multisets, order, topologies

SIZES = np.array([12, 9, 15, 10, 8, 14, 6, 11])  # stream 0: 46 samples, stream 1: 39
STREAMS = np.array([0, 0, 0, 0, 1, 1, 1, 1])
STREAM_SIZES = np.array([46, 39])


def _data(choose) -> dict:
    return {'shard_sizes': SIZES, 'shard_streams': STREAMS, 'stream_choose': np.array(choose)}


def _stream_of(ids: np.ndarray) -> np.ndarray:
    return (ids >= 46).astype(int)


@pytest.mark.parametrize('weights,expected', [
    ({'proportion': [3, 1], 'epoch_size': 80}, [60, 20]),
    ({'repeat': [2, 0.5]}, [92, 19]),
    ({'choose': [10, 50]}, [10, 50]),
    ({'repeat': [None, 3]}, [46, 117]),
])
@pytest.mark.parametrize('sampling', ['balanced', 'fixed'])
def test_mixing_draws_the_requested_samples_per_stream(weights: dict, expected: list,
                                                       sampling: str) -> None:
    choose = apply_weights(STREAM_SIZES, seed=5, **weights)
    assert choose.tolist() == expected
    for epoch in range(2):
        got = order(_data(choose), epoch=epoch, num_canonical_nodes=1, batch_size=1,
                    sampling_method=sampling)
        ids = got[got >= 0]
        assert np.bincount(_stream_of(ids), minlength=2).tolist() == expected
        counts = Counter(ids.tolist())
        for stream, size, want in ((0, 46, expected[0]), (1, 39, expected[1])):
            members = [counts[i] for i in range(46 * stream, 46 * stream + size)]
            assert max(members) - min(members) <= 1  # drawn as evenly as possible
            assert sum(members) == want


def test_per_stream_global_batches_come_from_one_stream() -> None:
    data = _data([46, 39])
    for shuffle in (True, False):
        got = order(data, batching_method='per_stream', shuffle=shuffle, num_canonical_nodes=1,
                    num_physical_nodes=2, ranks_per_node=2, batch_size=2)
        batches = global_batches(got)
        assert all(len(b) == 8 and len(set(_stream_of(b).tolist())) == 1 for b in batches)
        origins = [_stream_of(b)[0] for b in batches]
        # As the reference: each stream's positions are dealt to the devices (ranks topped up
        # with repeats), and only its global batches without a gap are kept.
        assert origins.count(0) == 6 and origins.count(1) == 5


def test_stratified_batches_hold_proportional_counts() -> None:
    choose = apply_weights(STREAM_SIZES, proportion=[0.75, 0.25], epoch_size=80, seed=1)
    got = order(_data(choose), batching_method='stratified', num_canonical_nodes=2,
                num_physical_nodes=2, ranks_per_node=2, workers_per_rank=2, batch_size=2)
    batches = global_batches(got)
    assert len(batches) == min(60 // 6, 20 // 2)
    for batch in batches:
        assert np.bincount(_stream_of(batch), minlength=2).tolist() == [6, 2]


def test_stratified_counts_round_by_largest_remainder() -> None:
    # As the reference: truncated float shares, the rest to the largest fractions, ties to the
    # higher stream index.
    assert stratified_counts(np.array([1, 1, 1]) / 3, 10).tolist() == [3, 3, 4]
    assert stratified_counts(np.array([0.5, 0.3, 0.2]), 7).tolist() == [4, 2, 1]
    assert stratified_counts(np.array([0.25] * 4), 6).tolist() == [1, 1, 2, 2]
    with pytest.raises(ValueError, match='stratified.*streams \\[1\\]'):
        stratified_counts(np.array([98, 1]) / 99, 16)
    with pytest.raises(ValueError, match='stratified.*streams \\[0\\]'):
        stratified_counts(np.array([0.0, 1.0]), 8)


def test_device_per_stream_device_batches_come_from_one_stream() -> None:
    data = _data([46, 39])
    for shuffle in (True, False):
        got = order(data, batching_method='device_per_stream', shuffle=shuffle,
                    num_canonical_nodes=4, num_physical_nodes=2, ranks_per_node=2,
                    workers_per_rank=2, batch_size=3)
        device_batches = got.reshape(-1, 3)
        device_batches = device_batches[(device_batches >= 0).any(axis=1)]
        assert (device_batches >= 0).all()
        assert all(len(set(_stream_of(b).tolist())) == 1 for b in device_batches)
        per_device = (got >= 0).sum(axis=(2, 3, 4))
        assert (per_device == per_device.flat[0]).all()


@pytest.mark.parametrize('method,epoch_size', [('stratified', 72), ('per_stream', 64)])
def test_stream_batching_is_elastic_for_a_fixed_global_batch(method: str, epoch_size: int) -> None:
    # per_stream (as the reference) only while every stream fills whole global batches: a
    # stream's padded last batch depends on the topology, and with it the interleaving.
    data = _data(apply_weights(STREAM_SIZES, proportion=[1, 1], epoch_size=epoch_size, seed=0))
    results = []
    for nodes, ranks, workers, batch in topologies(global_batch=8):
        got = order(data, batching_method=method, num_canonical_nodes=2, num_physical_nodes=nodes,
                    ranks_per_node=ranks, workers_per_rank=workers, batch_size=batch)
        results.append(batch_multisets(got))
    assert all(result == results[0] for result in results)


def test_device_per_stream_global_batches_do_not_depend_on_the_workers() -> None:
    # As the reference, they depend on the nodes and ranks (each stream is dealt to them).
    data = _data([46, 39])
    results = []
    for workers in (0, 1, 2, 3):
        got = order(data, batching_method='device_per_stream', num_canonical_nodes=4,
                    num_physical_nodes=2, ranks_per_node=2, workers_per_rank=workers,
                    batch_size=3)
        results.append(batch_multisets(got))
    assert all(result == results[0] for result in results)


def test_device_per_stream_explains_when_a_node_cannot_fill_a_batch() -> None:
    with pytest.raises(ValueError, match='device_per_stream.*canonical nodes'):
        order(_data([46, 39]), batching_method='device_per_stream', num_canonical_nodes=8,
              num_physical_nodes=8, batch_size=8)


@pytest.mark.parametrize('method', ['random', 'stratified', 'per_stream'])
def test_a_stream_smaller_than_the_canonical_node_count_is_handled(method: str) -> None:
    data = {'shard_sizes': np.array([40, 3]), 'shard_streams': np.array([0, 1]),
            'stream_choose': np.array([40, 3])}
    got = order(data, batching_method=method, num_canonical_nodes=8, num_physical_nodes=8,
                batch_size=1)
    ids = got[got >= 0]
    assert set(ids.tolist()) <= set(range(43))
    if method == 'random':
        assert set(ids.tolist()) == set(range(43))
