"""Resuming mid-epoch: the resumed order is the full order less what was already consumed."""

from __future__ import annotations

import numpy as np
import pytest

from tests.order.helpers import batch_multisets, batch_sets, one_stream, order

DATA = one_stream([13, 7, 20, 9, 11, 16, 5, 19, 12, 8, 14, 6])  # 140 samples

# (nodes, ranks per node, workers, batch): all with a global batch of 12.
FIRST_RUN = (2, 2, 2, 3)
RESUMED_RUNS = [(2, 2, 2, 3), (1, 1, 0, 12), (1, 4, 3, 3), (2, 1, 1, 6), (4, 3, 1, 1),
                (4, 1, 2, 3), (1, 2, 4, 6)]


def _run(topology: tuple, **settings) -> np.ndarray:
    nodes, ranks, workers, batch = topology
    return order(DATA, num_physical_nodes=nodes, ranks_per_node=ranks,
                 workers_per_rank=workers, batch_size=batch, **settings)


@pytest.mark.parametrize('algo', ['py1e', 'py1s', 'py2s', 'py1br', 'naive'])
@pytest.mark.parametrize('resumed', RESUMED_RUNS)
def test_resume_at_a_global_batch_on_another_topology(algo: str, resumed: tuple) -> None:
    full = batch_multisets(_run(FIRST_RUN, shuffle_algo=algo, num_canonical_nodes=4))
    for consumed in (0, 1, 5, len(full) - 1, len(full)):
        got = batch_multisets(_run(resumed, shuffle_algo=algo, num_canonical_nodes=4,
                                   sample_in_epoch=12 * consumed))
        assert got[:-1] == full[consumed:-1]  # the last one holds topology padding
        assert set().union(*got) >= set().union(*full[consumed:])


def test_resume_on_a_node_count_that_does_not_divide_canonical_nodes() -> None:
    """Started on 4 nodes (4 canonical nodes), resumed on 3 with relaxed partitioning."""
    full = batch_multisets(_run((4, 1, 1, 3), num_canonical_nodes=4))
    got = _run((3, 1, 2, 4), num_canonical_nodes=4, partition_algo='relaxed',
               initial_physical_nodes=4, sample_in_epoch=36)
    assert batch_multisets(got)[:-1] == full[3:-1]
    assert batch_sets(got)[-1] == frozenset(full[-1])


# Resuming after any sample count (not a whole global batch) follows the reference's rule (the
# count rounded down to a multiple of the node count, then dealt from there): compared sample for
# sample with the reference in tests/order/test_oracle_order.py.


@pytest.mark.parametrize('method', ['stratified', 'per_stream', 'device_per_stream'])
def test_other_batching_methods_resume_at_whole_global_batches(method: str) -> None:
    data = {'shard_sizes': np.array([20, 20, 20, 15, 15]),
            'shard_streams': np.array([0, 0, 0, 1, 1]), 'stream_choose': np.array([60, 30])}
    full = batch_multisets(order(data, batching_method=method, num_canonical_nodes=2,
                                 num_physical_nodes=2, batch_size=3))
    for consumed in (1, 3, len(full)):
        for skipped_extra in (0, 5):  # a partial global batch is not skipped
            got = batch_multisets(order(data, batching_method=method, num_canonical_nodes=2,
                                        num_physical_nodes=2, batch_size=3,
                                        sample_in_epoch=6 * consumed + skipped_extra))
            assert got == full[consumed:]


def test_resuming_past_the_end_gives_an_empty_epoch() -> None:
    got = _run((2, 2, 2, 3), num_canonical_nodes=4, sample_in_epoch=10_000)
    assert got.shape[3] == 0
