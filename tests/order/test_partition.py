"""Dealing the epoch to nodes, ranks, workers and batches: elastic determinism and padding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from streaming.order import check_partition
from tests.order.helpers import (
    batch_multisets,
    batch_sets,
    one_stream,
    order,
    rank_sequence,
    stream_order,
    topologies,
)

DATA = one_stream([13, 7, 20, 9, 11, 16, 5, 19, 12, 8])  # 120 samples, uneven shards


@pytest.mark.parametrize('algo', ['py1e', 'py1s', 'py2s', 'py1br', 'py1b', 'naive'])
@pytest.mark.parametrize('canonical', [1, 2, 4])
def test_global_batches_hold_the_same_samples_on_any_topology(algo: str, canonical: int) -> None:
    expected = None
    for nodes, ranks, workers, batch in topologies(global_batch=8):
        if nodes % canonical and canonical % nodes:
            continue
        got = order(DATA, shuffle_algo=algo, num_canonical_nodes=canonical,
                    num_physical_nodes=nodes, ranks_per_node=ranks, workers_per_rank=workers,
                    batch_size=batch)
        assert got.shape[:3] == (nodes, ranks, max(workers, 1))
        full = batch_multisets(got)[:-1]
        last = batch_sets(got)[-1]
        if expected is None:
            expected = (full, last)
        assert (full, last) == expected, (nodes, ranks, workers, batch)


def test_unshuffled_global_batches_are_the_same_on_any_topology() -> None:
    expected = None
    for nodes, ranks, workers, batch in topologies(global_batch=12):
        got = batch_sets(order(DATA, shuffle=False, num_canonical_nodes=2, num_physical_nodes=nodes,
                               ranks_per_node=ranks, workers_per_rank=workers, batch_size=batch))
        expected = expected or got
        assert got == expected


@pytest.mark.parametrize('nodes,ranks,batch', [(1, 1, 5), (1, 3, 2), (2, 2, 3), (4, 1, 1)])
def test_a_rank_yields_the_same_batches_whatever_its_worker_count(nodes: int, ranks: int,
                                                                  batch: int) -> None:
    sequences = {}
    for workers in (0, 1, 2, 3, 4, 7):
        got = order(DATA, num_canonical_nodes=4, num_physical_nodes=nodes, ranks_per_node=ranks,
                    workers_per_rank=workers, batch_size=batch)
        sequences[workers] = [rank_sequence(got, n, r) for n in range(nodes) for r in range(ranks)]
    assert all(sequence == sequences[1] for sequence in sequences.values())


@pytest.mark.parametrize('algo', ['py1e', 'py1s', 'py2s', 'py1br', 'py1b', 'naive'])
def test_every_sample_exactly_once_when_no_padding_is_needed(algo: str) -> None:
    data = one_stream([10] * 12)  # 120 samples: 4 canonical nodes x 30, 24 devices x 5
    for nodes, ranks, workers, batch in [(1, 1, 1, 7), (2, 3, 2, 4), (4, 2, 3, 2), (1, 4, 0, 3)]:
        got = order(data, shuffle_algo=algo, num_canonical_nodes=4, num_physical_nodes=nodes,
                    ranks_per_node=ranks, workers_per_rank=workers, batch_size=batch)
        assert sorted(got[got >= 0].tolist()) == list(range(120))


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), min_size=1, max_size=12),
       canonical=st.sampled_from([1, 2, 3, 4, 6]), ranks=st.integers(1, 3),
       workers=st.integers(0, 3), batch=st.integers(1, 5), nodes_index=st.integers(0, 3),
       algo=st.sampled_from(['py1e', 'py1s', 'py2s', 'py1br', 'naive']))
@example(sizes=[1], canonical=2, ranks=1, workers=0, batch=1, nodes_index=2, algo='py1e')
def test_padding_keeps_devices_even_and_loses_nothing(
        sizes: list[int], canonical: int, ranks: int, workers: int, batch: int,
        nodes_index: int, algo: str) -> None:
    nodes = [n for n in range(1, 7) if canonical % n == 0 or n % canonical == 0][nodes_index % 3]
    data = one_stream(sizes)
    total = sum(sizes)
    got = order(data, shuffle_algo=algo, num_canonical_nodes=canonical, num_physical_nodes=nodes,
                ranks_per_node=ranks, workers_per_rank=workers, batch_size=batch)
    real = got[got >= 0]
    assert set(real.tolist()) == set(range(total))  # nothing lost
    per_device = (got >= 0).sum(axis=(2, 3, 4))
    assert (per_device == per_device.flat[0]).all()  # DDP-safe: every device the same count
    for n in range(nodes):  # -1 only after a worker's last sample
        for r in range(ranks):
            for w in range(got.shape[2]):
                flags = (got[n, r, w] >= 0).reshape(-1)
                assert not (flags[1:] & ~flags[:-1]).any()
    # Which samples pad, and where, is the reference's rule (tests/order/test_oracle_order.py).


def test_tiny_dataset_with_more_canonical_nodes_than_samples() -> None:
    got = order(one_stream([3]), num_canonical_nodes=8, num_physical_nodes=8, batch_size=2)
    assert got.shape == (8, 1, 1, 1, 2)
    assert set(got[got >= 0].tolist()) == {0, 1, 2}


def test_empty_dataset_gives_no_batches() -> None:
    got = order(one_stream([0, 0]), num_physical_nodes=2, ranks_per_node=2, batch_size=3)
    assert got.shape == (2, 2, 1, 0, 3)


def test_node_reads_only_its_canonical_nodes_stream_positions() -> None:
    """With 4 canonical nodes on 2 nodes, node n reads stream positions p with p % 2 == n."""
    got = order(DATA, shuffle=False, num_canonical_nodes=4, num_physical_nodes=2,
                ranks_per_node=2, batch_size=3)
    stream = stream_order(got)
    unshuffled = order(DATA, shuffle=False, num_canonical_nodes=4, batch_size=12)
    assert np.array_equal(stream[stream >= 0], unshuffled[unshuffled >= 0])


def test_orig_needs_canonical_and_physical_nodes_to_divide() -> None:
    check_partition(partition_algo='orig', num_canonical_nodes=8, num_physical_nodes=4)
    check_partition(partition_algo='orig', num_canonical_nodes=2, num_physical_nodes=6)
    with pytest.raises(ValueError, match=r'num_canonical_nodes \(3\).*num_physical_nodes \(2\)'):
        check_partition(partition_algo='orig', num_canonical_nodes=3, num_physical_nodes=2)
    with pytest.raises(ValueError, match='initial_physical_nodes'):
        order(DATA, partition_algo='relaxed', num_canonical_nodes=3, num_physical_nodes=2)
    with pytest.raises(ValueError, match='num_canonical_nodes'):
        order(DATA, partition_algo='orig', num_canonical_nodes=3, num_physical_nodes=2,
              initial_physical_nodes=3)
    got = order(DATA, partition_algo='relaxed', num_canonical_nodes=3, num_physical_nodes=2,
                initial_physical_nodes=3, batch_size=3)
    assert got.shape[0] == 2
    with pytest.raises(ValueError, match="partition_algo.*'orig', 'relaxed'"):
        check_partition(partition_algo='fast', num_canonical_nodes=1, num_physical_nodes=1)


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 25), min_size=1, max_size=10),
       canonical=st.sampled_from([1, 2, 4, 8]), global_batch=st.sampled_from([4, 8, 12]),
       first=st.integers(0, 100), second=st.integers(0, 100), epoch=st.integers(0, 5),
       algo=st.sampled_from(['py1e', 'py1s', 'py2s', 'py1br', 'py1b', 'naive']))
def test_elastic_determinism_for_any_pair_of_topologies(
        sizes: list[int], canonical: int, global_batch: int, first: int, second: int,
        epoch: int, algo: str) -> None:
    # An epoch smaller than its canonical node count repeats samples (a warned case, tested in
    # tests/dataset/test_dataset_api.py); with more physical nodes than rows it is refused.
    assume(sum(sizes) >= canonical)
    options = [t for t in topologies(global_batch, max_nodes=4)
               if canonical % t[0] == 0 or t[0] % canonical == 0]
    results = []
    for nodes, ranks, workers, batch in (options[first % len(options)],
                                         options[second % len(options)]):
        got = order(one_stream(sizes), shuffle_algo=algo, epoch=epoch,
                    num_canonical_nodes=canonical, num_physical_nodes=nodes,
                    ranks_per_node=ranks, workers_per_rank=workers, batch_size=batch)
        results.append(batch_multisets(got)[:-1])  # the last one holds topology padding
    assert results[0] == results[1]
