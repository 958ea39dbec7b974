"""Parquet files written by pyarrow, streamed as they are through ``SourceStream``."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.cache_dirs import setup_cache_dir
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SchemaMismatchError, SourceFileError, StaleSourceError
from streaming.sources import sidecar as sources_module
from tests.sources.conftest import write_parquet


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _expected(root: str, columns: list[str] | None = None) -> list[dict]:
    import pyarrow.parquet as pq
    rows = []
    for name in sorted(os.listdir(root)):
        if name.endswith('.parquet'):
            rows.extend(pq.read_table(os.path.join(root, name), columns=columns).to_pylist())
    return rows


def _dataset(remote: str, tmp_path, **kwargs) -> StreamingDataset:
    stream_kwargs = {k: kwargs.pop(k) for k in ('columns', 'format', 'refresh', 'options',
                                                      'in_place')
                     if k in kwargs}
    stream_kwargs.setdefault('options', {'unit_bytes': 1})  # A unit per row group.
    stream = SourceStream(remote=remote, local=str(tmp_path / 'cache'), **stream_kwargs)
    return StreamingDataset(streams=[stream], batch_size=kwargs.pop('batch_size', 8), **kwargs)


@pytest.mark.parametrize('compression,row_group_size', [('zstd', 64), ('snappy', 100),
                                                       ('none', 250), ('gzip', 7)])
def test_every_value_as_pyarrow_reads_it(tmp_path, compression, row_group_size) -> None:
    root = str(tmp_path / 'data')
    write_parquet(root, compression=compression, row_group_size=row_group_size)
    dataset = _dataset(root, tmp_path)
    expected = _expected(root)
    assert dataset.num_samples == len(expected) == 750
    assert dataset.num_shards == 3 * -(-250 // row_group_size)  # A shard per row group.
    got = [_plain(dataset[i]) for i in range(len(dataset))]
    assert got == expected
    sample = dataset[3]
    assert isinstance(sample['tokens'], np.ndarray) and sample['tokens'].dtype == np.int32
    assert isinstance(sample['nested'], np.ndarray) and sample['nested'].shape == (2, 2)
    assert isinstance(sample['blob'], bytes) and isinstance(sample['text'], str)
    assert isinstance(sample['id'], int)


def test_units_of_several_row_groups_read_every_value(tmp_path) -> None:
    # Read in place, the row groups of a file are one unit: each is a chunk of its columns.
    root = str(tmp_path / 'data')
    write_parquet(root, row_group_size=64)
    dataset = _dataset(root, tmp_path, options={}, shuffle=True, shuffle_seed=5)
    assert dataset.num_shards == 3
    expected = _expected(root)
    assert [_plain(dataset[i]) for i in range(len(dataset))] == expected
    projected = _dataset(root, tmp_path / 'b', options={}, columns=['id', 'text', 'blob'],
                         shuffle=True, shuffle_seed=5)
    loader = StreamingDataLoader(projected, batch_size=8, num_workers=0)
    seen = {}
    for batch in loader:
        for i, text, blob in zip(batch['id'].tolist(), batch['text'], batch['blob']):
            seen[i] = (text, blob)
    assert seen == {row['id']: (row['text'], row['blob']) for row in expected}


def test_column_getters_over_chunks_with_nulls() -> None:
    import pyarrow as pa

    from streaming.sources.arrow_values import column_getters
    columns = {
        'blob': pa.chunked_array([[b'a', None], [], [b'ccc', b''], [None]], pa.binary()),
        'text': pa.chunked_array([['x', 'yy'], ['z'], ['', 'w']], pa.large_string()),
        'n': pa.chunked_array([[1, 2], [3], [4, 5]], pa.int64()),
        'tokens': pa.chunked_array([[[1, 2]], [[3], []], [[4, 5, 6], [7]]],
                                   pa.list_(pa.int32())),
        'nested': pa.chunked_array([[[[1, 2], [3, 4]]], [[[4]], None], [[[5]], [[6]]]],
                                   pa.list_(pa.list_(pa.int16()))),
    }
    for name, column in columns.items():
        decoded = column_getters(pa.table({name: column}))
        get = decoded.getters[name]
        expected = column.to_pylist()
        assert [_plain(get(i)) for i in range(len(expected))] == expected, name
        if decoded.gatherers is not None:
            indices = np.array([4, 0, 2, 3, 1])
            got = decoded.gatherers[name](indices)
            assert _plain(list(got)) == [expected[i] for i in indices.tolist()], name
    blob = column_getters(pa.table({'blob': columns['blob']}))
    assert blob.gatherers is None  # Nulls: per sample.
    assert column_getters(pa.table({'text': columns['text']})).gatherers is not None


def test_placed_ranges_and_the_file_object_fallback_read_the_same(tmp_path,
                                                                monkeypatch) -> None:
    from streaming.sources import parquet
    data = b'abcdefghij'
    ranges = [[3, 4], [20, 6]]
    placed = parquet.placed(data, ranges, 30)
    assert len(placed) == 30
    assert placed[3:7] == b'abcd' and placed[20:26] == b'efghij'
    assert placed[:3] == bytes(3) and placed[7:20] == bytes(13) and placed[26:] == bytes(4)
    handle = parquet.RangeFile(data, ranges, 30)
    assert handle.read() == placed[:]
    root = str(tmp_path / 'data')
    write_parquet(root, row_group_size=100)
    expected = _expected(root)

    def no_room(*args):
        raise OSError('no room')

    monkeypatch.setattr(parquet, 'placed', no_room)  # No anonymous map: the file object.
    dataset = _dataset(root, tmp_path, in_place=False)
    assert [_plain(dataset[i]) for i in range(len(dataset))] == expected


def test_row_groups_grouped_into_units_of_unit_bytes(tmp_path) -> None:
    root = str(tmp_path / 'data')
    write_parquet(root, row_group_size=20)  # 13 row groups per file, a few KiB each.
    expected = _expected(root)
    whole = _dataset(root, tmp_path / 'a', options={'unit_bytes': 32 << 20})
    assert whole.num_shards == 3  # A unit per file.
    assert [_plain(whole[i]) for i in range(750)] == expected
    some = _dataset(root, tmp_path / 'b', options={'unit_bytes': 6000})
    assert 3 < some.num_shards < 39
    assert all(s.row_groups[1] > s.row_groups[0] for s in some.shards)
    assert [_plain(some[i]) for i in range(750)] == expected


def test_shuffled_epoch_through_workers_sees_each_row_once(parquet_dir, tmp_path) -> None:
    dataset = _dataset(parquet_dir, tmp_path, shuffle=True, shuffle_seed=7, columns=['id'])
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2)
    ids = [i for batch in loader for i in batch['id'].tolist()]
    assert sorted(ids) == list(range(750)) and ids != sorted(ids)


def test_only_the_projected_columns_are_fetched(parquet_dir, tmp_path) -> None:
    import pyarrow.parquet as pq
    dataset = _dataset(parquet_dir, tmp_path, columns=['id', 'blob'], in_place=False)
    assert [_plain(dataset[i]) for i in range(750)] == _expected(parquet_dir, ['id', 'blob'])
    fetched = sum(shard.get_raw_size() for shard in dataset.shards)
    projected = footers = 0
    for name in sorted(os.listdir(parquet_dir)):
        if not name.endswith('.parquet'):
            continue
        meta = pq.read_metadata(os.path.join(parquet_dir, name))
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            projected += sum(group.column(c).total_compressed_size
                             for c in range(group.num_columns)
                             if group.column(c).path_in_schema in ('id', 'blob'))
        footers += meta.num_row_groups * (meta.serialized_size + 8)
    assert fetched == projected + footers
    local = str(tmp_path / 'cache')
    on_disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(local)
                  for f in fs if '.u0' in f)
    assert on_disk == fetched


def test_sidecar_is_reused_and_only_changed_files_reindexed(parquet_dir, tmp_path,
                                                            monkeypatch) -> None:
    indexed = []
    real = sources_module.index_file
    monkeypatch.setattr(sources_module, 'index_file',
                        lambda root, source, rel, *a: indexed.append(rel) or
                        real(root, source, rel, *a))
    _dataset(parquet_dir, tmp_path)
    assert sorted(indexed) == ['part-000.parquet', 'part-001.parquet', 'part-002.parquet']
    sidecar = os.path.join(parquet_dir, '_shardflow_index.parquet.json')
    assert json.loads(Path(sidecar).read_text())['format'] == 'parquet'
    indexed.clear()
    _dataset(parquet_dir, tmp_path / 'again')  # Another cache: the sidecar beside the data.
    assert indexed == []
    write_parquet(str(tmp_path / 'other'), files=1, rows=40, start=10_000)
    os.replace(str(tmp_path / 'other' / 'part-000.parquet'),
               os.path.join(parquet_dir, 'part-001.parquet'))
    dataset = _dataset(parquet_dir, tmp_path)
    assert indexed == ['part-001.parquet']
    ids = sorted(dataset[i]['id'] for i in range(len(dataset)))
    assert ids == list(range(250)) + list(range(500, 750)) + list(range(10_000, 10_040))


@pytest.mark.parametrize('damage', ['garbage', 'nested'])
def test_a_damaged_sidecar_is_rebuilt(parquet_dir, tmp_path, damage) -> None:
    _dataset(parquet_dir, tmp_path)
    sidecar = os.path.join(parquet_dir, '_shardflow_index.parquet.json')
    with open(sidecar, 'w') as f:  # Not JSON, or JSON nested past the parser's recursion.
        f.write('{"files": ' + ('[' * 100_000 if damage == 'nested' else '\x00 not json'))
    dataset = _dataset(parquet_dir, tmp_path / 'again')
    assert sorted(dataset[i]['id'] for i in range(len(dataset))) == \
        sorted(row['id'] for row in _expected(parquet_dir))
    assert json.loads(Path(sidecar).read_text())['format'] == 'parquet'


def test_read_only_data_directory_keeps_the_sidecar_in_the_cache(parquet_dir, tmp_path) -> None:
    os.chmod(parquet_dir, 0o555)
    try:
        dataset = _dataset(parquet_dir, tmp_path)
        assert dataset[0]['id'] == 0
    finally:
        os.chmod(parquet_dir, 0o755)
    if os.getuid() != 0:  # root writes anyway
        assert not os.path.exists(os.path.join(parquet_dir, '_shardflow_index.parquet.json'))
    assert os.path.exists(os.path.join(setup_cache_dir(str(tmp_path / 'cache')),
                                       '_shardflow_index.parquet.json'))
    assert not os.path.exists(tmp_path / 'cache' / '.shardflow')


def test_schema_drift_names_the_file_and_column(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    root = str(tmp_path / 'data')
    write_parquet(root, files=2)
    pq.write_table(pa.table({'id': pa.array(['x'], pa.string()), 'text': ['a']}),
                   os.path.join(root, 'part-009.parquet'))
    with pytest.raises(SchemaMismatchError, match=r"part-009\.parquet: column 'id' is string"):
        _dataset(root, tmp_path, columns=['id'])
    with pytest.raises(SchemaMismatchError, match=r"part-009\.parquet has no column 'blob'"):
        _dataset(root, tmp_path / 'b', columns=['blob'])


def test_truncated_footer_names_the_file(parquet_dir, tmp_path) -> None:
    path = os.path.join(parquet_dir, 'part-001.parquet')
    with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) - 100)
    with pytest.raises(SourceFileError, match=r'part-001\.parquet.*footer'):
        _dataset(parquet_dir, tmp_path)


def test_corrupt_row_group_names_the_file_and_row_group(tmp_path) -> None:
    import pyarrow.parquet as pq
    root = str(tmp_path / 'data')
    write_parquet(root, compression='snappy')
    path = os.path.join(root, 'part-002.parquet')
    column = pq.read_metadata(path).row_group(1).column(0)
    with open(path, 'r+b') as f:  # Overwrite the id chunk of row group 1 (same size, same mtime
        f.seek(column.data_page_offset)  # granularity aside: the index is rebuilt on change).
        f.write(b'\xff' * column.total_compressed_size)
    dataset = _dataset(root, tmp_path, columns=['id'])
    assert dataset[0]['id'] == 0
    with pytest.raises(SourceFileError, match=r'row group 1 of part-002\.parquet'):
        dataset[500 + 64]


def test_file_changed_after_indexing_is_a_stale_index(parquet_dir, tmp_path) -> None:
    dataset = _dataset(parquet_dir, tmp_path, refresh=False)
    write_parquet(str(tmp_path / 'other'), files=1, rows=40, start=10_000)
    os.replace(str(tmp_path / 'other' / 'part-000.parquet'),
               os.path.join(parquet_dir, 'part-002.parquet'))
    with pytest.raises(StaleSourceError, match=r'part-002\.parquet changed since it was indexed'):
        dataset[600]
    again = _dataset(parquet_dir, tmp_path / 'b')  # Re-listing notices and re-indexes it.
    assert again.num_samples == 540


def test_not_parquet_and_empty_directories(tmp_path) -> None:
    root = tmp_path / 'data'
    root.mkdir()
    (root / 'a.parquet').write_bytes(b'this is not parquet at all')
    with pytest.raises(SourceFileError, match=r'a\.parquet'):
        _dataset(str(root), tmp_path)
    empty = tmp_path / 'empty'
    empty.mkdir()
    with pytest.raises(ValueError, match='format'):
        _dataset(str(empty), tmp_path / 'c')


def test_mixed_with_an_mds_stream_by_proportion(parquet_dir, tmp_path) -> None:
    from streaming import Stream
    from tests.dataset.conftest import write_ids
    mds = write_ids(str(tmp_path / 'mds'), 300, start=5000)
    streams = [SourceStream(remote=parquet_dir, local=str(tmp_path / 'c1'), columns=['id'],
                            proportion=0.5),
               Stream(remote=mds, local=str(tmp_path / 'c2'), proportion=0.5)]
    dataset = StreamingDataset(streams=streams, batch_size=10, epoch_size=600, shuffle=True)
    ids = [s['id'] for s in dataset]
    assert len(ids) == 600
    assert sum(i >= 5000 for i in ids) == 300


def test_quarter_cache_shuffled_epoch_completes(tmp_path) -> None:
    root = str(tmp_path / 'data')
    write_parquet(root, files=4, rows=400, row_group_size=50)
    dataset = _dataset(root, tmp_path, columns=['id', 'fixed', 'blob'], in_place=False)
    total = sum(shard.get_raw_size() for shard in dataset.shards)
    limit = total // 4
    with pytest.warns(UserWarning, match='shuffle_block_size'):
        dataset = _dataset(root, tmp_path / 'q', columns=['id', 'fixed', 'blob'], shuffle=True,
                           cache_limit=limit, in_place=False)
        loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2)
        ids = [i for batch in loader for i in batch['id'].tolist()]
    assert sorted(ids) == list(range(1600))
    assert dataset.cache_usage <= limit


def test_list_item_names_and_dictionary_encoding_are_not_drift(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    root = tmp_path / 'data'
    root.mkdir()
    table = pa.table({'id': [1, 2], 'tokens': pa.array([[1], [2, 3]], pa.list_(pa.int32())),
                      'text': ['a', 'b']})
    pq.write_table(table, str(root / 'a.parquet'))  # Items named "element".
    plain = table.set_column(2, 'text', pa.array(['c', 'd']).dictionary_encode())
    pq.write_table(plain, str(root / 'b.parquet'), use_compliant_nested_type=False,
                   use_dictionary=False)  # Items named "item".
    dataset = _dataset(str(root), tmp_path)
    assert [dataset[i]['text'] for i in range(4)] == ['a', 'b', 'c', 'd']


@pytest.mark.parametrize('workers', [0, 2])
def test_batch_gather_equals_the_per_sample_path(parquet_dir, tmp_path, monkeypatch,
                                                 workers) -> None:
    def batches(fetch: str, cache: str) -> list:
        monkeypatch.setenv('STREAMING_BATCH_FETCH', fetch)
        dataset = _dataset(parquet_dir, tmp_path / cache, columns=['id', 'text', 'blob'],
                           shuffle=True, shuffle_seed=3)
        loader = StreamingDataLoader(dataset, batch_size=8, num_workers=workers)
        return [(b['id'].tolist(), b['text'], b['blob']) for b in loader]

    gathered, per_sample = batches('1', 'a'), batches('0', 'b')
    assert gathered == per_sample and len(gathered) == 750 // 8 + 1


def test_local_files_are_read_in_place(tmp_path) -> None:
    root = str(tmp_path / 'data')
    write_parquet(root, row_group_size=20)  # 13 row groups per file, a few KiB each.
    expected = _expected(root, ['id', 'blob'])
    with warnings.catch_warnings():  # No shuffle block capped for a cache it does not use.
        warnings.simplefilter('error')
        dataset = _dataset(root, tmp_path, columns=['id', 'blob'], options={}, shuffle=True,
                           cache_limit=1 << 16)
    assert dataset.num_shards == 3  # Default units read in place: up to 64 MiB, here a file.
    assert all(shard.source_root == os.path.abspath(root) for shard in dataset.shards)
    got = sorted((s['id'], s['blob']) for s in dataset)
    assert got == sorted((r['id'], r['blob']) for r in expected)
    assert [_plain(dataset[i]) for i in range(0, 750, 7)] == expected[::7]
    assert not dataset.cache.evictable.any()  # Evicting would free nothing.
    cached = [f for _, _, fs in os.walk(str(tmp_path / 'cache')) for f in fs if '.u0' in f]
    assert cached == [] and dataset.cache_usage == os.path.getsize(
        os.path.join(str(tmp_path / 'cache'), 'index.json'))
    kept = _dataset(root, tmp_path / 'k', options={'unit_bytes': 1})  # Asked for: kept.
    assert kept.num_shards == 39
    os.remove(os.path.join(root, 'part-001.parquet'))
    fresh = _dataset(root, tmp_path / 'k', refresh=False, options={'unit_bytes': 1})
    with pytest.raises(StaleSourceError, match=r'part-001\.parquet no longer exists'):
        fresh[300]


def test_in_place_units_beside_a_limited_cache_are_never_evicted(parquet_dir, tmp_path) -> None:
    from streaming import Stream
    from tests.dataset.conftest import write_ids
    mds = write_ids(str(tmp_path / 'mds'), 600, start=5000)  # ~20 shards of 4 KiB.
    streams = [SourceStream(remote=parquet_dir, local=str(tmp_path / 'c1'), columns=['id']),
               Stream(remote=mds, local=str(tmp_path / 'c2'))]
    dataset = StreamingDataset(streams=streams, batch_size=10, shuffle=True,
                               cache_limit=1 << 15, shuffle_block_size=100)
    ids = sorted(s['id'] for s in dataset)
    assert ids == list(range(750)) + list(range(5000, 5600))
    parquet = dataset.stream_per_shard == 0
    assert not dataset.cache.evictable[parquet].any() and dataset.cache.evictable[~parquet].all()
    assert dataset.cache_usage <= 1 << 15
