"""The strict index schema: each bad field is an IndexFileError naming the file, shard and field."""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import pytest

from streaming import CSVWriter, JSONWriter, LocalDataset, MDSWriter, XSVWriter
from streaming.errors import IndexFileError
from tests.unit_helpers import edit_index

Edit = Callable[[dict[str, Any]], Any]


def _write(root: str, cls: type = MDSWriter, shards: int = 2, **kwargs: Any) -> None:
    columns = {'a': 'int', 'b': 'str'}
    extra = {'separator': '|'} if cls is XSVWriter else {}
    with cls(columns=columns, out=root, size_limit=60, **extra, **kwargs) as writer:
        for i in range(4 * shards):
            writer.write({'a': i, 'b': f'v{i}'})


def _set(key: str, value: Any) -> Edit:
    def edit(shard: dict[str, Any]) -> None:
        target = shard
        *parents, last = key.split('.')
        for parent in parents:
            target = target[parent]
        target[last] = value
    return edit


MDS_EDITS = [
    ('samples', _set('samples', 2**32)),
    ('samples', _set('samples', 1.5)),
    ('samples', _set('samples', None)),
    ('raw_data.bytes', _set('raw_data.bytes', -1)),
    ('raw_data.bytes', _set('raw_data.bytes', 2**40)),
    ('raw_data.bytes', _set('raw_data.bytes', 3.0)),
    ('raw_data.bytes', _set('raw_data.bytes', False)),
    ('raw_data.basename', _set('raw_data.basename', 'shard\0.mds')),
    ('raw_data.basename', _set('raw_data.basename', '')),
    ('raw_data.basename', _set('raw_data.basename', 'a/../../x')),
    ('raw_data.basename', _set('raw_data.basename', '..')),
    ('raw_data.basename', _set('raw_data.basename', './shard')),
    ('raw_data.basename', _set('raw_data.basename', 'dir//shard')),
    ('raw_data.basename', _set('raw_data.basename', '\\\\server\\share')),
    ('raw_data.basename', _set('raw_data.basename', 'C:\\Windows\\x')),
    ('raw_data.basename', _set('raw_data.basename', 7)),
    ('raw_data.basename', _set('raw_data.basename', ['x'])),
    ('raw_data.hashes', _set('raw_data.hashes', {'sha1': 5})),
    ('raw_data.hashes', _set('raw_data.hashes', {'sha1': 'not hex'})),
    ('raw_data.hashes', _set('raw_data.hashes', {'sha1': ''})),
    ('raw_data.hashes', _set('raw_data.hashes', {'sha1': 'abc\n'})),
    ('raw_data.hashes', _set('raw_data.hashes', ['sha1'])),
    ('hashes', _set('hashes', 'sha1')),
    ('hashes', _set('hashes', [1])),
    ('compression', _set('compression', 'lz4')),
    ('compression', _set('compression', 5)),
    ('zip_data', _set('zip_data', {'basename': 'x.zstd', 'bytes': 3, 'hashes': {}})),
    ('size_limit', _set('size_limit', -5)),
    ('size_limit', _set('size_limit', '64mb')),
    ('version', _set('version', True)),
    ('version', _set('version', 3)),
    ('format', _set('format', None)),
    ('format', _set('format', ['mds'])),
    ('column_names', _set('column_names', ['a', 'a'])),
    ('column_names', _set('column_names', [])),
    ('column_names', _set('column_names', [1, 'b'])),
    ('column_names', _set('column_names', ['a'])),
    ('column_encodings', _set('column_encodings', ['int', 'float128'])),
    ('column_encodings', _set('column_encodings', [None, 'str'])),
    ('column_sizes', _set('column_sizes', [8, 8])),
    ('column_sizes', _set('column_sizes', [None, None])),
    ('column_sizes', _set('column_sizes', [8])),
    ('column_sizes', _set('column_sizes', [True, None])),
    ('column_sizes', _set('column_encodings', ['uint32', 'str'])),  # same width? no: 4 != 8.
]


@pytest.mark.parametrize('field,edit', MDS_EDITS, ids=[f'{f}-{i}' for i, (f, _) in
                                                         enumerate(MDS_EDITS)])
def test_bad_mds_field(tmp_path: Any, field: str, edit: Edit) -> None:
    root = str(tmp_path)
    _write(root)
    path = edit_index(root, lambda obj: edit(obj['shards'][1]))
    with pytest.raises(IndexFileError) as info:
        LocalDataset(root)
    message = str(info.value)
    assert message.startswith(f'{path}, shard 1: '), message
    assert f'"{field}"' in message or field.split('.')[0] in message, message


TEXT_EDITS = [
    ('newline', _set('newline', '')),
    ('newline', _set('newline', 5)),
    ('column_encodings', _set('column_encodings', ['int', 'bytes'])),
    ('column_names', _set('column_names', ['b', 'b'])),
    ('column_names', _set('column_names', ['a'])),
    ('raw_meta.basename', _set('raw_meta.basename', '/etc/passwd')),
    ('raw_meta.bytes', _set('raw_meta.bytes', -4)),
]


@pytest.mark.parametrize('cls', [CSVWriter, XSVWriter])
@pytest.mark.parametrize('field,edit', TEXT_EDITS)
def test_bad_xsv_field(tmp_path: Any, cls: type, field: str, edit: Edit) -> None:
    root = str(tmp_path)
    _write(root, cls)
    path = edit_index(root, lambda obj: edit(obj['shards'][0]))
    with pytest.raises(IndexFileError, match=f'^{path}, shard 0: .*{field.split(".")[0]}'):
        LocalDataset(root)


@pytest.mark.parametrize('field,edit', [
    ('columns', _set('columns', {})),
    ('columns', _set('columns', {'a': 'int', 'b': 'pkl'})),
    ('newline', _set('newline', '')),
    ('separator', _set('separator', '')),
])
def test_bad_json_or_xsv_only_field(tmp_path: Any, field: str, edit: Edit) -> None:
    root = str(tmp_path)
    _write(root, XSVWriter if field == 'separator' else JSONWriter)
    path = edit_index(root, lambda obj: edit(obj['shards'][0]))
    with pytest.raises(IndexFileError, match=f'^{path}, shard 0: .*{field}'):
        LocalDataset(root)


@pytest.mark.parametrize('key', ['raw_data', 'zip_data'])
def test_two_entries_naming_one_file(tmp_path: Any, key: str) -> None:
    root = str(tmp_path)
    _write(root, compression='zstd')
    path = edit_index(root, lambda obj: obj['shards'][1][key].update(
        basename=obj['shards'][0][key]['basename']))
    with pytest.raises(IndexFileError, match=f'^{path}, shard 1: "{key}.basename".*shard 0'):
        LocalDataset(root)


def test_zip_named_like_the_raw_file(tmp_path: Any) -> None:
    root = str(tmp_path)
    _write(root, compression='gz')
    path = edit_index(root, lambda obj: obj['shards'][0]['zip_data'].update(
        basename=obj['shards'][0]['raw_data']['basename']))
    with pytest.raises(IndexFileError, match=f'^{path}, shard 0: "zip_data.basename"'):
        LocalDataset(root)


def test_subdirectory_basenames_still_read(tmp_path: Any) -> None:
    """merge_index writes basenames like ``part/shard.00000.mds``: still valid."""
    root = str(tmp_path)
    _write(os.path.join(root, 'part'))
    with open(os.path.join(root, 'part', 'index.json')) as f:
        obj = json.load(f)
    for shard in obj['shards']:
        shard['raw_data']['basename'] = 'part/' + shard['raw_data']['basename']
    with open(os.path.join(root, 'index.json'), 'w') as f:
        json.dump(obj, f)
    dataset = LocalDataset(root)
    assert [dataset[i]['a'] for i in range(len(dataset))] == list(range(8))
