"""Wide binary Parquet columns read from their pages (``streaming.sources.parquet_pages``).

Files written by pyarrow with every page layout it makes: each codec, data pages v1 and v2,
dictionary-encoded or PLAIN (and PLAIN after the dictionary grew too large), nulls, strings,
several pages per chunk. Every value must equal what pyarrow itself reads, and the page reader
must be the one that read it (or, where it cannot, pyarrow, with the same values and errors).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming import StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SourceFileError

ROWS = 40


def _write(path: str, *, nulls: bool = False, text: bool = False, repeats: bool = False,
           **options) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.RandomState(7)
    values = []
    for i in range(ROWS):
        size = 24_000 + int(rng.randint(0, 9_000))
        raw = rng.bytes(size) if not repeats else bytes([i % 3]) * size
        value: object = raw.hex()[:size] if text else raw
        values.append(None if nulls and i % 4 == 1 else value)
    kind = pa.string() if text else pa.binary()
    table = pa.table({'id': pa.array(range(ROWS), pa.int64()), 'blob': pa.array(values, kind)})
    pq.write_table(table, path, row_group_size=options.pop('row_group_size', 16), **options)
    return table.to_pylist()


def _read(root: str, cache: str, columns: list[str] | None = None) -> list[dict]:
    stream = SourceStream(remote=root, local=cache, columns=columns)
    dataset = StreamingDataset(streams=[stream], batch_size=4)
    return [dataset[i] for i in range(dataset.num_samples)]


@pytest.mark.parametrize('compression', ['none', 'snappy', 'zstd', 'gzip', 'brotli',
                                         'lz4'])
@pytest.mark.parametrize('version', ['1.0', '2.0'])
def test_every_codec_and_page_version_reads_as_pyarrow_does(tmp_path, spied, compression,
                                                            version) -> None:
    root = tmp_path / 'data'
    root.mkdir()
    want = _write(str(root / 'a.parquet'), compression=compression, data_page_version=version,
                  data_page_size=40_000, nulls=True)
    assert _read(str(root), str(tmp_path / 'cache')) == want
    # Three row groups' blob chunks, by the page reader (pyarrow's "lz4" is LZ4_RAW).
    assert spied == [True] * 3


@pytest.mark.parametrize('dictionary', [True, False])
@pytest.mark.parametrize('text', [True, False])
def test_dictionary_and_plain_pages_of_bytes_and_strings(tmp_path, spied, dictionary,
                                                         text) -> None:
    root = tmp_path / 'data'
    root.mkdir()
    want = _write(str(root / 'a.parquet'), use_dictionary=dictionary, text=text,
                  repeats=dictionary, compression='snappy')
    got = _read(str(root), str(tmp_path / 'cache'), columns=['blob'])
    assert got == [{'blob': row['blob']} for row in want]
    assert all(isinstance(row['blob'], str if text else bytes) for row in got)
    assert spied == [True] * 3


def test_a_dictionary_that_overflows_to_plain_pages(tmp_path, spied) -> None:
    root = tmp_path / 'data'
    root.mkdir()  # 1 MiB of dictionary is ~45 values: the rest of the chunk is PLAIN pages.
    want = _write(str(root / 'a.parquet'), row_group_size=ROWS, compression='zstd',
                  dictionary_pagesize_limit=100_000, data_page_size=50_000)
    assert _read(str(root), str(tmp_path / 'cache')) == want
    assert spied == [True]


def test_narrow_and_nested_columns_are_left_to_pyarrow(tmp_path, spied) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    root = tmp_path / 'data'
    root.mkdir()
    table = pa.table({
        'small': pa.array([b'x' * (i % 50) for i in range(ROWS)]),
        'inner': pa.array([{'blob': os.urandom(20_000)} for _ in range(ROWS)]),
        'many': pa.array([[os.urandom(20_000)] for _ in range(ROWS)]),
    })
    pq.write_table(table, str(root / 'a.parquet'), row_group_size=16)
    assert _read(str(root), str(tmp_path / 'cache')) == table.to_pylist()
    assert spied == []  # None of them was even tried.


def test_a_page_it_cannot_parse_goes_to_pyarrow_and_its_error(tmp_path, spied) -> None:
    import pyarrow.parquet as pq
    root = tmp_path / 'data'
    root.mkdir()
    path = str(root / 'a.parquet')
    _write(path, compression='snappy', use_dictionary=False)
    column = pq.read_metadata(path).row_group(1).column(1)
    with open(path, 'r+b') as f:  # The blob chunk of row group 1: its page header garbled.
        f.seek(column.data_page_offset)
        f.write(b'\x00\xff' * 8)
    stream = SourceStream(remote=str(root), local=str(tmp_path / 'cache'), columns=['blob'],
                          options={'unit_bytes': 1})  # A unit per row group.
    dataset = StreamingDataset(streams=[stream], batch_size=4)
    assert dataset[0]['blob'] is not None
    with pytest.raises(SourceFileError, match=r'row group 1 of a\.parquet'):
        dataset[16]
    assert spied[:1] == [True] and False in spied


def test_fetched_units_read_their_pages_from_the_placed_ranges(tmp_path, spied) -> None:
    root = tmp_path / 'data'
    root.mkdir()  # Not in place: the unit's ranges are fetched into the cache, then placed.
    want = _write(str(root / 'a.parquet'), compression='zstd', nulls=True)
    stream = SourceStream(remote=str(root), local=str(tmp_path / 'cache'), in_place=False,
                          columns=['blob', 'id'])
    dataset = StreamingDataset(streams=[stream], batch_size=4)
    assert [dataset[i] for i in range(ROWS)] == [{'blob': r['blob'], 'id': r['id']}
                                                 for r in want]
    assert spied == [True] * 3


@pytest.mark.parametrize('workers', [0, 2])
def test_shuffled_batches_through_workers_equal_the_per_sample_path(tmp_path, monkeypatch,
                                                                   workers) -> None:
    from streaming import StreamingDataLoader
    root = tmp_path / 'data'
    root.mkdir()
    for f in range(3):  # 120 rows in 24 row groups: batches draw on many units at once.
        _write(str(root / f'part-{f}.parquet'), compression='snappy', row_group_size=5)

    def batches(fetch: str, cache: str) -> list:
        monkeypatch.setenv('STREAMING_BATCH_FETCH', fetch)
        stream = SourceStream(remote=str(root), local=str(tmp_path / cache),
                              options={'unit_bytes': 1})
        dataset = StreamingDataset(streams=[stream], batch_size=8, shuffle=True,
                                   shuffle_seed=11)
        loader = StreamingDataLoader(dataset, batch_size=8, num_workers=workers)
        return [(batch['id'].tolist(), batch['blob']) for batch in loader]

    gathered, per_sample = batches('1', 'a'), batches('0', 'b')
    assert gathered == per_sample
    assert sorted(i for ids, _ in gathered for i in ids) == sorted(list(range(ROWS)) * 3)
