"""One gather per batch over all its shards (``streaming.dataset.span_table``): the same columns,
value for value and in batch order, as the gather shard by shard (``MDSReader.gather_columns``)
and as the samples read one by one, through the first batch on each shard (its own layout), the
later ones (the table), shards reopened, shards past the table's size, several column layouts
and missing files."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from torch.utils.data import default_collate

from streaming import MDSWriter, StreamingDataset
from streaming.dataset import handoff, span_table
from streaming.dataset.batches import SampleStream
from streaming.dataset.handoff import Scattered
from streaming.dataset.span_table import ShardOpenFailed, SpanTable
from streaming.format.mds import reader as mds_reader
from tests.dataset.test_batches import _equal


def _write(out: str, count: int, size_limit: int = 9_000, start: int = 0) -> str:
    """int, str and bytes columns of ragged sizes (empty values too), many small shards."""
    with MDSWriter(out=out, columns={'id': 'int', 'text': 'str', 'tokens': 'bytes'},
                   size_limit=size_limit) as writer:
        for i in range(start, start + count):
            writer.write({'id': i * 3 - 700, 'text': 'é' * (i % 5) + str(i),
                          'tokens': np.random.RandomState(i).bytes(37 * (i % 60))})
    return out


def _stream(dataset: StreamingDataset, seed: int, tabled: bool) -> SampleStream:
    ids = np.random.default_rng(seed).permutation(dataset.num_samples)
    stream = SampleStream(ids, dataset.sample_offset_per_shard, dataset.cache,
                          dataset.get_item, True, None)
    if not tabled:
        stream._table = None  # The gather shard by shard.
    return stream


def _plain(columns: dict) -> dict:
    """Columns with ``Scattered`` values copied out and arrays as lists, to compare."""
    return {name: value.values() if isinstance(value, Scattered) else
            value.tolist() if isinstance(value, np.ndarray) else value
            for name, value in columns.items()}


def _samples(dataset: StreamingDataset, shards: np.ndarray, indices: np.ndarray) -> list:
    starts = dataset.sample_offset_per_shard
    return [dataset[int(starts[s]) + i] for s, i in zip(shards.tolist(), indices.tolist())]


@pytest.mark.parametrize('whole_at_once', [0, mds_reader.WHOLE_AT_ONCE])
@pytest.mark.parametrize('spans', [False, True])
def test_every_batch_equals_the_gather_shard_by_shard(tmp_path, monkeypatch, spans,
                                                      whole_at_once) -> None:
    """A whole epoch in batches of 32 (the last one partial), tabled and shard by shard: the
    first batch on a shard reads its samples' own layout (with ``WHOLE_AT_ONCE`` 0) or the
    shard's whole one, the later ones the table."""
    monkeypatch.setattr(mds_reader, 'WHOLE_AT_ONCE', whole_at_once)
    path = _write(str(tmp_path / 'ds'), 1_000)
    tabled = _stream(StreamingDataset(local=path, batch_size=32, shuffle=True), 3, True)
    dataset = StreamingDataset(local=path, batch_size=32, shuffle=True)
    by_shard = _stream(dataset, 3, False)
    assert dataset.num_shards >= 60
    batches = 0
    while True:
        shards, indices = tabled.take(32)
        want_shards, want_indices = by_shard.take(32)
        assert np.array_equal(shards, want_shards) and np.array_equal(indices, want_indices)
        if not len(shards):
            break
        got, want = tabled.gather(shards, indices, spans), by_shard.gather(shards, indices,
                                                                             spans)
        assert got is not None and want is not None
        assert isinstance(got[0]['tokens'], Scattered) is spans
        _equal(_plain(got[0]), _plain(want[0]))
        sample_list = _samples(dataset, shards, indices)
        assert _plain(got[0])['tokens'] == [sample['tokens'] for sample in sample_list]
        assert _plain(got[0])['id'] == [sample['id'] for sample in sample_list]
        batches += 1
    assert batches == -(-1_000 // 32)
    assert len(tabled._table.filled) == dataset.num_shards  # Every shard read from the table.


def test_packed_batches_equal_default_collate(tmp_path) -> None:
    """Packed into this process's ring as a worker packs a batch, rebuilt as the main process
    rebuilds it: the default collate of the samples, for every batch of an epoch."""
    path = _write(str(tmp_path / 'ds'), 600, size_limit=20_000)
    dataset = StreamingDataset(local=path, batch_size=72, shuffle=True)
    stream = _stream(dataset, 11, True)
    through_ring = 0
    while True:
        shards, indices = stream.take(72)
        if not len(shards):
            break
        packed = handoff.pack(stream.gather(shards, indices, spans=True), False)
        through_ring += packed.slot is not None
        batch = pickle.loads(pickle.dumps(packed))
        _equal(batch, default_collate(_samples(dataset, shards, indices)))
    assert through_ring >= 5  # Batches of ~80 KB go through the ring.


def test_a_reopened_shard_is_read_from_its_new_map(tmp_path) -> None:
    path = _write(str(tmp_path / 'ds'), 300)
    dataset = StreamingDataset(local=path, batch_size=32)
    stream = _stream(dataset, 5, True)
    shards, indices = stream.take(64)
    for _ in range(3):  # Own layout, then the table, then from the table again.
        first = _plain(stream.gather(shards, indices)[0])
    table = stream._table
    old_maps = {shard: table.filled[shard] for shard in np.unique(shards).tolist()}
    for shard in old_maps:
        dataset.cache.shards[shard].close()  # As an eviction does.
    for _ in range(3):
        assert _plain(stream.gather(shards, indices)[0]) == first
    assert all(table.filled[shard] is not old for shard, old in old_maps.items())
    assert all(table.filled[shard] is dataset.cache.shards[shard]._maps for shard in old_maps)


def test_shards_past_the_table_size_are_read_shard_by_shard(tmp_path, monkeypatch) -> None:
    path = _write(str(tmp_path / 'ds'), 500)
    dataset = StreamingDataset(local=path, batch_size=32, shuffle=True)
    monkeypatch.setattr(span_table, 'MAX_ROWS', 200)  # Shards past sample 200 stay out.
    stream, by_shard = _stream(dataset, 9, True), _stream(dataset, 9, False)
    for _ in range(12):
        shards, indices = stream.take(32)
        by_shard.take(32)
        assert _plain(stream.gather(shards, indices)[0]) == \
            _plain(by_shard.gather(shards, indices)[0])
    assert stream._table.filled and stream._table.rows <= 200
    starts = dataset.sample_offset_per_shard
    assert all(starts[shard] + len(dataset.cache.shards[shard]) <= 200
               for shard in stream._table.filled)


def test_streams_of_other_columns_are_not_tabled(tmp_path) -> None:
    """Two streams with different columns: batches with shards of both keep the per-shard
    gather (which gives None when columns differ: the samples are then collated whole)."""
    from streaming import Stream
    first = _write(str(tmp_path / 'a'), 200)
    other = str(tmp_path / 'b')
    with MDSWriter(out=other, columns={'id': 'int', 'blob': 'bytes'}, size_limit=4_000) as w:
        for i in range(200):
            w.write({'id': i, 'blob': bytes([i]) * (i % 30)})
    dataset = StreamingDataset(streams=[Stream(local=first), Stream(local=other)],
                               batch_size=64, shuffle=True)
    stream = _stream(dataset, 1, True)
    kinds = set()
    while True:
        shards, indices = stream.take(64)
        if not len(shards):
            break
        got = stream.gather(shards, indices)
        if got is None:
            kinds.add('mixed')
        else:
            kinds.add(tuple(got[0]))
            want = _samples(dataset, shards, indices)
            assert _plain(got[0]) == {name: [s[name] for s in want] for name in got[0]}
    assert 'mixed' in kinds  # Both streams in one batch: not gathered as columns.


def test_a_missing_shard_file_is_reported_with_its_shard(tmp_path) -> None:
    path = _write(str(tmp_path / 'ds'), 300)
    dataset = StreamingDataset(local=path, batch_size=32)
    shards = np.array([0, 1, 1])
    indices = np.array([0, 0, 1])
    readers = [dataset.cache.ready(0), dataset.cache.ready(1)]
    os.remove(readers[1].path(readers[1].file_pairs[0][0]))  # Gone before it is opened.
    table = SpanTable(dataset.sample_offset_per_shard)
    assert all(table.accepts(reader) for reader in readers)
    with pytest.raises(ShardOpenFailed) as failed:
        table.gather(readers, [0, 1], shards, indices, False)
    assert failed.value.shard_id == 1 and isinstance(failed.value.error, FileNotFoundError)
    stream = _stream(dataset, 0, True)
    assert stream.gather(shards, indices) is None  # The per-sample path reads (and reports).
    assert dataset.cache._known_local[1] is False  # Prepared again at the next read.


def test_scattered_in_order_values_and_copy() -> None:
    sources = [b'abcdefgh', b'0123456789']
    scattered = Scattered.in_order(sources, np.array([1, 0, 1, 0]), np.array([2, 0, 9, 5]),
                                   np.array([5, 3, 10, 5]))
    assert scattered.values() == [b'234', b'abc', b'9', b'']
    assert scattered.sizes().tolist() == [3, 3, 1, 0]
    out = bytearray(7)
    scattered.copy_into(memoryview(out), np.array([0, 3, 6, 7, 7]))
    assert bytes(out) == b'234abc9'


@pytest.mark.filterwarnings('ignore:predownload=0')
@pytest.mark.parametrize('spans', [False, True])
def test_a_batch_whose_shards_evict_each_other_fetches_each_once(tmp_path, spans) -> None:
    """Under a cache_limit of two shards, readying a batch's third shard evicts its first
    before the gather reads it: its map, made when it was readied, still reads it (no fetch
    again, as the per-shard path: ready, then read), and the columns are the samples'."""
    remote = _write(str(tmp_path / 'remote'), 300)
    whole = StreamingDataset(local=remote, batch_size=4)
    sizes = [whole.shards[s].get_max_size() for s in range(3)]
    index = os.path.getsize(os.path.join(remote, 'index.json'))
    limit = index + 2 * max(whole.shards[s].get_max_size() for s in range(whole.num_shards))
    assert sum(sizes) > limit - index  # The third shard does not fit beside the first two.
    dataset = StreamingDataset(remote=remote, local=str(tmp_path / 'cache'), batch_size=4,
                               cache_limit=limit, predownload=0)  # No downloads ahead.
    stream = _stream(dataset, 0, True)
    assert stream._table is not None  # The one gather per batch, under a limit too.
    shards, indices = np.array([0, 2, 1, 0, 2]), np.array([3, 0, 5, 1, 2])
    got = stream.gather(shards, indices, spans)
    assert got is not None
    assert dataset.cache.egress()[1] == 3  # One GET a shard: none fetched twice.
    first = dataset.shards[0]
    assert not os.path.exists(first.path(first.file_pairs[0][0]))  # Evicted for shard 2.
    want = _samples(whole, shards, indices)
    assert _plain(got[0]) == {name: [s[name] for s in want] for name in got[0]}
