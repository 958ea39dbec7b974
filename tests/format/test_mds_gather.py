"""``MDSReader.gather_columns``: the first call on a map reads the batch's own layout (the
whole shard's, for shards of up to ``WHOLE_AT_ONCE`` samples), later calls index the shard's
whole layout table; both give what ``decode_sample`` gives, and a shard whose layout does not
add up gives None (the per-sample path reports it) either way."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from streaming import MDSWriter
from streaming.format.mds import reader as mds_reader
from streaming.format.mds.reader import MDSReader, Spans


def _reader(out: str) -> MDSReader:
    with open(os.path.join(out, 'index.json')) as file:
        shard = json.load(file)['shards'][0]
    return MDSReader(dirname=out, split=None, column_encodings=shard['column_encodings'],
                     column_names=shard['column_names'], column_sizes=shard['column_sizes'],
                     compression=None, hashes=[], raw_data=shard['raw_data'],
                     samples=shard['samples'], size_limit=None, zip_data=None)


def _write(out: str, count: int = 200) -> None:
    with MDSWriter(out=out, columns={'id': 'int', 'text': 'str', 'blob': 'bytes'},
                   size_limit=1 << 20) as writer:
        for i in range(count):
            writer.write({'id': i * 7 - 500, 'text': 'é' * (i % 5) + str(i),
                          'blob': bytes([i % 256]) * (i % 37)})


@pytest.fixture(params=['own layout first', 'whole at once'])
def first_call(request, monkeypatch) -> str:
    """Whether a first call reads the batch's own layout (shards past ``WHOLE_AT_ONCE``)."""
    if request.param == 'own layout first':
        monkeypatch.setattr(mds_reader, 'WHOLE_AT_ONCE', 0)
    return request.param


def test_every_call_matches_decode_sample(tmp_path, first_call) -> None:
    out = str(tmp_path / 'ds')
    _write(out)
    reader = _reader(out)
    rng = np.random.default_rng(7)
    for call in range(4):  # The first from the samples' own fields, then from the table.
        indices = rng.permutation(reader.samples)[:50]
        for spans in (False, True):
            columns = reader.gather_columns(indices, spans=spans)
            assert columns is not None
            want = [reader.get_item(int(i)) for i in indices]
            assert columns['id'].tolist() == [sample['id'] for sample in want]
            assert columns['text'] == [sample['text'] for sample in want]
            blobs = columns['blob'].values() if spans else columns['blob']
            assert isinstance(columns['blob'], Spans) is spans
            assert blobs == [sample['blob'] for sample in want]
            first = call == 0 and not spans and first_call == 'own layout first'
            assert isinstance(reader._layout_table[1], dict) is not first
    assert reader._layout_table is not None and isinstance(reader._layout_table[1], dict)
    reader.close()  # The table goes with the map; the next map starts again.
    assert reader._layout_table is None
    indices = np.array([3, 1, 2])
    assert reader.gather_columns(indices)['id'].tolist() == [-479, -493, -486]
    assert reader.gather_columns(indices)['id'].tolist() == [-479, -493, -486]
    # A sample past the shard (a bad index): None, for the per-sample path to report.
    assert reader.gather_columns(np.array([1, reader.samples])) is None


def test_a_bad_layout_gives_none_on_every_call(tmp_path, first_call) -> None:
    out = str(tmp_path / 'ds')
    _write(out)
    reader = _reader(out)
    path = reader.path(reader.file_pairs[0][0])
    offsets = np.fromfile(path, '<u4', reader.samples + 1, offset=4)
    with open(path, 'r+b') as file:  # Sample 150's blob claims one byte more than it has.
        file.seek(int(offsets[150]) + 4)
        size = int(np.frombuffer(file.read(4), '<u4')[0])
        file.seek(int(offsets[150]) + 4)
        file.write(np.array([size + 1], '<u4').tobytes())
    for _ in range(3):
        assert reader.gather_columns(np.array([150, 2])) is None
    assert reader.gather_columns(np.array([2, 3])) is None  # Table: the shard's layout is bad.
