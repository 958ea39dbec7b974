"""merge_index: both call forms over local partition directories."""

from __future__ import annotations

import os
from typing import Any

import pytest

from streaming import JSONWriter, LocalDataset
from streaming.errors import IndexFileError
from streaming.merge import merge_index
from tests.unit_helpers import read_index, write_mds

COLUMNS = {'id': 'int', 'part': 'str'}


def _partition(root: Any, name: str, count: int, **kwargs: Any) -> list[dict[str, Any]]:
    samples = [{'id': i, 'part': name} for i in range(count)]
    write_mds(str(root / name), COLUMNS, samples, size_limit=300, **kwargs)
    return samples


def _check_merged(root: str, names: list[str], expected: list[dict[str, Any]]) -> None:
    merged = read_index(root)
    assert merged['version'] == 2
    partition_shards = []
    for name in names:
        for shard in read_index(os.path.join(root, name))['shards']:
            for key in ('raw_data', 'zip_data', 'raw_meta', 'zip_meta'):
                if shard.get(key):
                    shard[key]['basename'] = f'{name}/{shard[key]["basename"]}'
            partition_shards.append(shard)
    assert merged['shards'] == partition_shards
    assert LocalDataset(root)[:] == expected


def test_merge_from_list(tmp_path: Any) -> None:
    first = _partition(tmp_path, 'p1', 20)
    second = _partition(tmp_path, 'p0', 15, compression='zstd')
    # The list's order is the merged order, whatever the names.
    merge_index([str(tmp_path / 'p1' / 'index.json'), str(tmp_path / 'p0' / 'index.json')],
                str(tmp_path))
    _check_merged(str(tmp_path), ['p1', 'p0'], first + second)
    basenames = [s['raw_data']['basename'] for s in read_index(str(tmp_path))['shards']]
    assert all(b.startswith(('p1/shard.', 'p0/shard.')) for b in basenames)


def test_merge_from_list_keyword(tmp_path: Any) -> None:
    samples = _partition(tmp_path, 'a', 5)
    merge_index(index_file_urls=[str(tmp_path / 'a' / 'index.json')], out=str(tmp_path))
    _check_merged(str(tmp_path), ['a'], samples)


def test_merge_from_root(tmp_path: Any) -> None:
    expected = []
    for name in ['part-00', 'part-01', 'part-02']:
        expected += _partition(tmp_path, name, 12)
    (tmp_path / 'not-a-partition').mkdir()
    (tmp_path / 'notes.txt').write_text('ignored')
    merge_index(str(tmp_path))
    _check_merged(str(tmp_path), ['part-00', 'part-01', 'part-02'], expected)
    # Merging again replaces the merged index rather than merging it into itself.
    merge_index(str(tmp_path))
    _check_merged(str(tmp_path), ['part-00', 'part-01', 'part-02'], expected)


def test_merge_mixed_formats(tmp_path: Any) -> None:
    mds = _partition(tmp_path, 'a', 10)
    text = [{'id': i, 'part': 'b'} for i in range(8)]
    with JSONWriter(columns=COLUMNS, out=str(tmp_path / 'b'), compression='gz',
                    size_limit=100) as writer:
        for sample in text:
            writer.write(sample)
    merge_index(str(tmp_path))
    _check_merged(str(tmp_path), ['a', 'b'], mds + text)
    json_shard = read_index(str(tmp_path))['shards'][-1]
    assert json_shard['raw_meta']['basename'].startswith('b/')
    assert json_shard['zip_meta']['basename'].startswith('b/')


def test_merge_to_local_and_remote(tmp_path: Any) -> None:
    local, remote = tmp_path / 'local', tmp_path / 'remote'
    samples = _partition(local, 'x', 9)
    _partition(remote, 'x', 9)
    merge_index([str(local / 'x' / 'index.json')], (str(local), str(remote)))
    with open(local / 'index.json', 'rb') as a, open(remote / 'index.json', 'rb') as b:
        assert a.read() == b.read()
    assert LocalDataset(str(remote))[:] == samples


def test_merge_with_nothing_to_merge(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match='index_file_urls'):
        merge_index([], str(tmp_path))
    with pytest.raises(IndexFileError, match=str(tmp_path)):
        merge_index(str(tmp_path))


def test_merge_missing_partition_index(tmp_path: Any) -> None:
    missing = str(tmp_path / 'gone' / 'index.json')
    with pytest.raises(FileNotFoundError, match=missing):
        merge_index([missing], str(tmp_path))
