"""Bulk index checks (``bulk_check``) and the cold scan (``index_scan``) decide as entry-by-entry
checks do: the same indexes pass, and a bad one raises the same error, for the same shard."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import numpy as np
import pytest

from streaming import JSONWriter, MDSWriter, StreamingDataset
from streaming.dataset.index_cache import IndexSummary
from streaming.dataset.index_scan import scan_index
from streaming.errors import IndexFileError
from streaming.format import bulk_check
from streaming.format.index import load_index, validate_shard_entry
from tests.format.test_index_schema import MDS_EDITS, Edit

SHARDS = 40


def _write(root: str, cls: type = MDSWriter, **kwargs: Any) -> list[dict[str, Any]]:
    columns = {'a': 'int', 'b': 'str'}
    with cls(columns=columns, out=root, size_limit=60, **kwargs) as writer:
        for i in range(2 * SHARDS):
            writer.write({'a': i, 'b': f'v{i}'})
    with open(os.path.join(root, 'index.json')) as f:
        return json.load(f)['shards']


def _dump(root: str, shards: list[Any], **dump: Any) -> str:
    path = os.path.join(root, 'index.json')
    with open(path, 'w') as f:
        json.dump({'shards': shards, 'version': 2}, f, **dump)
    return path


def _error(path: str, monkeypatch: pytest.MonkeyPatch | None = None) -> str | None:
    try:
        if monkeypatch is None:
            load_index(path)
        else:
            with monkeypatch.context() as patch:  # Entry by entry only, as before bulk checks.
                patch.setattr('streaming.format.index.prove_entries',
                              lambda *args: None)
                load_index(path)
    except IndexFileError as error:
        return str(error)
    return None


@pytest.mark.parametrize('field,edit', MDS_EDITS, ids=[f'{f}-{i}' for i, (f, _) in
                                                         enumerate(MDS_EDITS)])
@pytest.mark.parametrize('bad', [0, 17, SHARDS - 1])
def test_bad_entry_among_many(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, field: str,
                              edit: Edit, bad: int) -> None:
    root = str(tmp_path)
    shards = _write(root)
    edit(shards[bad])
    path = _dump(root, shards)
    expected = _error(path, monkeypatch)
    assert expected is not None and expected.startswith(f'{path}, shard {bad}: ')
    assert _error(path) == expected
    assert scan_index(path, open(path, 'rb').read()) is None
    with pytest.raises(IndexFileError) as info:
        StreamingDataset(local=root, batch_size=4)
    assert str(info.value) == expected


@pytest.mark.parametrize('first,other', [([1, None], [True, None]), ([8, None], [8.0, None]),
                                         ([8, None], [True, None])])
def test_equal_but_not_alike(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, first: Any,
                             other: Any) -> None:
    """``1 == True == 1.0``: a shape is compared by type too, not just ``==``."""
    root = str(tmp_path)
    shards = _write(root)
    encodings = ['uint8', 'str'] if first[0] == 1 else ['int', 'str']
    for shard in shards:
        shard['column_encodings'], shard['column_sizes'] = encodings, list(first)
    shards[9]['column_sizes'] = list(other)
    path = _dump(root, shards)
    expected = _error(path, monkeypatch)
    assert _error(path) == expected
    if isinstance(other[0], bool):
        assert expected is not None and 'shard 9: "column_sizes"' in expected


@pytest.mark.parametrize('key', ['raw_data', 'zip_data'])
def test_same_file_across_batches(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                  key: str) -> None:
    root = str(tmp_path)
    shards = _write(root, compression='zstd')
    shards = [copy.deepcopy(shards[i % len(shards)]) for i in range(5000)]
    for i, shard in enumerate(shards):
        for name in ('raw_data', 'zip_data'):
            shard[name]['basename'] = f'{name}.{i}'
    shards[4500][key]['basename'] = shards[3][key]['basename']
    path = _dump(root, shards)
    expected = _error(path, monkeypatch)
    assert expected is not None and f'shard 4500: "{key}.basename"' in expected
    assert f'shard 3 "{key}"' in expected
    assert _error(path) == expected
    assert scan_index(path, open(path, 'rb').read()) is None


def two_shapes(root: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The entries of two datasets under ``root``, plain and compressed, as merged (``b/``)."""
    plain = _write(os.path.join(root, 'a'))
    packed = _write(os.path.join(root, 'b'), compression='zstd', hashes=['sha1'])
    for shard in packed:
        for key in ('raw_data', 'zip_data'):
            shard[key]['basename'] = 'b/' + shard[key]['basename']
    return plain, packed


def test_mixed_shapes_grouped(tmp_path: Any) -> None:
    """Entries of two shapes (two compressions) are proven, a group each."""
    plain, packed = two_shapes(str(tmp_path))
    shards = plain + packed
    groups = bulk_check.prove_entries('x', shards, 0, {}, validate_shard_entry)
    assert groups == [0] * len(plain) + [1] * len(packed)


@pytest.mark.parametrize('dump', [{}, {'indent': 2}, {'separators': (',', ':')},
                                  {'sort_keys': False}])
@pytest.mark.parametrize('cls,kwargs', [(MDSWriter, {}), (MDSWriter, {'compression': 'zstd',
                                                                       'hashes': ['sha1']}),
                                        (JSONWriter, {})])
def test_scan_matches_build(tmp_path: Any, dump: dict[str, Any], cls: type,
                            kwargs: dict[str, Any]) -> None:
    """The scanned summary is the built one (entries as text aside), whatever the layout."""
    root = str(tmp_path)
    shards = _write(root, cls, **kwargs)
    path = _dump(root, shards, **dump)
    scanned = scan_index(path, open(path, 'rb').read())
    built = IndexSummary.build(load_index(path)['shards'])
    assert scanned is not None and built is not None
    for name in ('samples', 'unsafe', 'raw_size', 'max_size', 'file_offsets'):
        assert np.array_equal(getattr(scanned, name), getattr(built, name)), name
    assert scanned.files == built.files
    assert [scanned.entry(i) for i in range(len(shards))] == shards
    # Round trip through the summary file's encoding.
    unpacked = IndexSummary.unpack(b''.join(part.tobytes() for part in scanned.pack()))
    assert [unpacked.entry(i) for i in range(len(shards))] == shards


@pytest.mark.parametrize('text', [
    b'{"shards": [], "version": 2}',
    b'  {"version": 2, "shards": []}  ',
    b'{"shards": [{"a": 1}], "version": 2}',
    b'{"shards": [], "version": 3}',
    b'{"shards": [], "shards": [], "version": 2}',
    b'{"shards": [], "version": 2,}',
    b'{"shards": [], "version": 2} x',
    b'{"shards": {}, "version": 2}',
    b'[1, 2]',
    b'{"shards": [], "version": 2, "note": "\xc3\xa9"}',
])
def test_scan_odd_indexes(tmp_path: Any, text: bytes) -> None:
    """An odd index is scanned to what load_index gives, or left to it (None)."""
    path = os.path.join(str(tmp_path), 'index.json')
    with open(path, 'wb') as f:
        f.write(text)
    try:
        expected = IndexSummary.build(load_index(path)['shards'])
    except (IndexFileError, ValueError):
        expected = None
    scanned = scan_index(path, text)
    if expected is None:
        assert scanned is None
    elif scanned is not None:
        assert len(scanned) == len(expected)


def test_dataset_cold_and_warm(tmp_path: Any) -> None:
    """A dataset over an indented index reads the same samples cold (scanned) and warm."""
    root = str(tmp_path)
    shards = _write(root, compression='zstd')
    _dump(root, shards, indent=1)
    cold = [s['a'] for s in StreamingDataset(local=root, batch_size=4)]
    warm = [s['a'] for s in StreamingDataset(local=root, batch_size=4)]
    assert cold == warm == list(range(2 * SHARDS))


@pytest.mark.parametrize('subdir', [False, True])
def test_local_usage_from_scanned_summary(tmp_path: Any, subdir: bool) -> None:
    """Complete shards count, truncated and missing ones do not (names in subdirectories too)."""
    from streaming.dataset.index_cache import LazyShards
    from streaming.dataset.local_scan import local_shard_usage

    root = str(tmp_path)
    shards = _write(root)
    if subdir:
        os.makedirs(os.path.join(root, 'part'))
        for shard in shards:
            name = shard['raw_data']['basename']
            os.rename(os.path.join(root, name), os.path.join(root, 'part', name))
            shard['raw_data']['basename'] = f'part/{name}'
    path = _dump(root, shards)
    files = [os.path.join(root, shard['raw_data']['basename']) for shard in shards]
    os.remove(files[3])
    with open(files[5], 'r+b') as f:
        f.truncate(10)
    summary = scan_index(path, open(path, 'rb').read())
    assert summary is not None
    usage = local_shard_usage(LazyShards(summary, root, '', False, path), None, False, False)
    expected = [0 if i in (3, 5) else shard['raw_data']['bytes']
                for i, shard in enumerate(shards)]
    assert usage == expected
