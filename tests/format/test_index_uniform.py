"""The uniform match of the shards array (``index_uniform``) gives the entry-by-entry scan's
summary when it applies, and steps aside (None) for anything it cannot prove valid."""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Callable

import numpy as np
import pytest

from streaming import JSONWriter, MDSWriter, StreamingDataset
from streaming.dataset import index_scan
from streaming.dataset.index_scan import scan_index
from streaming.dataset.index_uniform import scan_uniform
from streaming.errors import CorruptIndexError, IndexFileError
from streaming.format.index import load_index
from tests.format.test_bulk_check import _dump, _error, _write, two_shapes


def _scans(path: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, bool]:
    """(summary scanned, summary scanned entry by entry, whether the uniform match applied)."""
    text = open(path, 'rb').read()
    doc = text.decode()
    applied = scan_uniform(path, doc, doc.index('[') + 1) is not None
    scanned = scan_index(path, text)
    with monkeypatch.context() as patch:
        patch.setattr(index_scan, 'scan_uniform', lambda *args: None)
        generic = scan_index(path, text)
    return scanned, generic, applied


def _same(a: Any, b: Any) -> None:
    assert a is not None and b is not None
    for name in ('samples', 'unsafe', 'raw_size', 'max_size', 'file_offsets', 'entry_offsets'):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.files == b.files and a.entries == b.entries


@pytest.mark.parametrize('cls,kwargs', [(MDSWriter, {}), (MDSWriter, {'compression': 'zstd',
                                                                       'hashes': ['md5', 'sha1']}),
                                        (JSONWriter, {'hashes': ['sha1']})])
@pytest.mark.parametrize('dump', [{}, {'sort_keys': True}, {'indent': 1}])
def test_uniform_matches_entry_by_entry(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                        cls: type, kwargs: dict[str, Any],
                                        dump: dict[str, Any]) -> None:
    root = str(tmp_path)
    path = _dump(root, _write(root, cls, **kwargs), **dump)
    scanned, generic, applied = _scans(path, monkeypatch)
    assert applied == ('indent' not in dump)  # Indented: not as json.dumps writes an entry.
    _same(scanned, generic)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(shard: dict[str, Any]) -> None:
        *parents, last = key.split('.')
        for parent in parents:
            shard = shard[parent]
        shard[last] = value
    return edit


# Entries that differ from the first one: valid (the scan still applies, entry by entry) or not.
def _uncompressed(shard: dict[str, Any]) -> None:
    shard['compression'] = shard['zip_data'] = None


VALID = [_set('samples', 7), _set('raw_data.basename', 'sub/x.mds'), _uncompressed,
         _set('raw_data.basename', 'caf\u00e9'), _set('raw_data.basename', 'a"b'),
         _set('size_limit', 1 << 20), _set('raw_data.bytes', 0)]
DUPLICATE = _set('raw_data.basename', 'shard.00005.mds')
INVALID = [_set('samples', 0), _set('samples', -3), _set('samples', 1 << 70),
           _set('samples', 2.0), _set('samples', True), _set('raw_data.bytes', 1 << 62),
           _set('raw_data.basename', '../x'), _set('raw_data.basename', ''),
           _set('raw_data.basename', 'a\\..\\b'), _set('raw_data.basename', 'C:x'),
           DUPLICATE, _set('raw_data.hashes', {'sha1': 'xyz'}),
           _set('raw_data.hashes', {'sha1': ''}), _set('zip_data.basename', 'a/./b'),
           _set('zip_data.bytes', -1), _set('version', 3)]


@pytest.mark.parametrize('edit', VALID, ids=[f'valid-{i}' for i in range(len(VALID))])
@pytest.mark.parametrize('bad', [1, 17])
def test_odd_entry_valid(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                         edit: Callable[[dict[str, Any]], None], bad: int) -> None:
    root = str(tmp_path)
    shards = _write(root, compression='zstd', hashes=['sha1'])
    edit(shards[bad])
    path = _dump(root, shards, ensure_ascii=False)
    scanned, generic, _ = _scans(path, monkeypatch) if open(path, 'rb').read().isascii() else \
        (None, None, False)
    if scanned is not None or generic is not None:
        _same(scanned, generic)
    assert _error(path) is None


@pytest.mark.parametrize('edit', INVALID, ids=[f'invalid-{i}' for i in range(len(INVALID))])
@pytest.mark.parametrize('bad', [0, 1, 17])
def test_odd_entry_invalid(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                           edit: Callable[[dict[str, Any]], None], bad: int) -> None:
    """A bad varying value is refused, with the entry-by-entry error naming the file and shard."""
    root = str(tmp_path)
    shards = _write(root, compression='zstd', hashes=['sha1'])
    edit(shards[bad])
    if edit is DUPLICATE:
        bad = max(bad, 5)  # The later of the two entries naming the file is the bad one.
    path = _dump(root, shards)
    text = open(path, 'rb').read()
    doc = text.decode()
    assert scan_uniform(path, doc, doc.index('[') + 1) is None
    assert scan_index(path, text) is None
    expected = _error(path, monkeypatch)
    assert expected is not None and expected.startswith(f'{path}, shard {bad}: ')
    with pytest.raises(IndexFileError) as info:
        StreamingDataset(local=root, batch_size=4)
    assert str(info.value) == expected


def test_large_uniform_dataset(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """5,000 entries matched, a duplicate name late among them refused as before."""
    root = str(tmp_path)
    shards = _write(root)
    shards = [copy.deepcopy(shards[i % len(shards)]) for i in range(5000)]
    for i, shard in enumerate(shards):
        shard['raw_data']['basename'] = f'shard.{i:05}.mds'
        shard['samples'] = 1 + i % 3
    path = _dump(root, shards)
    scanned, generic, applied = _scans(path, monkeypatch)
    assert applied
    _same(scanned, generic)
    assert scanned.samples.tolist() == [1 + i % 3 for i in range(5000)]
    shards[4999]['raw_data']['basename'] = 'shard.00004.mds'
    path = _dump(root, shards)
    assert scan_index(path, open(path, 'rb').read()) is None
    assert 'shard 4999: "raw_data.basename"' in (_error(path) or '')


def test_mark_character_in_index(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``@`` in the first entry (the template's marks) leaves it to the entry-by-entry scan."""
    root = str(tmp_path)
    shards = _write(root)
    for shard in shards:
        shard['column_names'] = ['@0@', 'b']
    path = _dump(root, shards)
    scanned, generic, applied = _scans(path, monkeypatch)
    assert not applied
    _same(scanned, generic)
    assert json.loads(open(path).read())['shards'][0]['column_names'] == ['@0@', 'b']
    assert os.path.exists(path)


def test_runs_of_shapes(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merged index of two shapes is matched a run each; a shape per entry, entry by entry."""
    root = str(tmp_path)
    plain, packed = two_shapes(root)
    path = _dump(root, plain + packed + plain[:1])
    assert _error(path) is not None  # plain[0] twice: refused, by the usual error.
    assert scan_index(path, open(path, 'rb').read()) is None
    path = _dump(root, plain + packed)
    scanned, generic, applied = _scans(path, monkeypatch)
    assert applied
    _same(scanned, generic)
    mixed = [shard for pair in zip(plain, packed) for shard in pair]
    path = _dump(root, mixed)
    scanned, generic, applied = _scans(path, monkeypatch)
    assert not applied  # 80 runs of one entry.
    _same(scanned, generic)


@pytest.mark.parametrize('separator', [',', ' ,  ', ',\n'])
def test_other_separators(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                          separator: str) -> None:
    root = str(tmp_path)
    shards = _write(root)
    path = os.path.join(root, 'index.json')
    with open(path, 'w') as f:
        f.write('{"shards": [' + separator.join(map(json.dumps, shards)) + '], "version": 2}')
    scanned, generic, _ = _scans(path, monkeypatch)
    _same(scanned, generic)
    with open(path, 'w') as f:  # A trailing separator: not JSON.
        f.write('{"shards": [' + separator.join(map(json.dumps, shards)) + separator +
                '], "version": 2}')
    assert scan_index(path, open(path, 'rb').read()) is None
    with pytest.raises(CorruptIndexError):
        load_index(path)
