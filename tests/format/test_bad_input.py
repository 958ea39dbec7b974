"""Bad input: each error has the right type and a message naming the file, column or parameter."""

from __future__ import annotations

import os
import re
import struct
from typing import Any, Callable

import numpy as np
import pytest

from streaming import CSVWriter, JSONWriter, LocalDataset, MDSWriter, TSVWriter, XSVWriter
from streaming.errors import IndexFileError, ShardFileError
from tests.unit_helpers import edit_index, read_index, shard_files, write_mds

COLUMNS = {'text': 'str', 'id': 'int', 'arr': 'ndarray', 'u': 'uint16', 'j': 'json'}


def _samples(n: int) -> list[dict[str, Any]]:
    return [{'text': f'tëxt {i}', 'id': i, 'arr': np.arange(i + 1, dtype=np.int16),
             'u': i * 3, 'j': {'k': [i]}} for i in range(n)]


def _write(root: str, n: int = 3, **kwargs: Any) -> str:
    """Write a one-shard MDS dataset; returns the shard path."""
    write_mds(root, COLUMNS, _samples(n), **kwargs)
    name, = shard_files(root)
    return os.path.join(root, name)


def _read_every_sample(root: str) -> list[dict[str, Any]]:
    dataset = LocalDataset(root)
    return [dataset[i] for i in range(len(dataset))]


def _edit_index(root: str, edit: Callable[[dict[str, Any]], Any]) -> None:
    edit_index(root, edit)


def _set_file(path: str, data: bytes) -> None:
    with open(path, 'wb') as f:
        f.write(data)


def _get_file(path: str) -> bytes:
    with open(path, 'rb') as f:
        return f.read()


# ---- writer arguments --------------------------------------------------------------------------

def test_unknown_encoding(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"'my_col'.*'float128'"):
        MDSWriter(columns={'ok': 'int', 'my_col': 'float128'}, out=str(tmp_path))
    with pytest.raises(ValueError, match=r"'shape'.*'ndarray:int32:x'"):
        MDSWriter(columns={'shape': 'ndarray:int32:x'}, out=str(tmp_path))
    with pytest.raises(ValueError, match=r"'blob'.*'bytes'"):
        JSONWriter(columns={'blob': 'bytes'}, out=str(tmp_path))
    # Nothing was written by the failed constructors.
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('columns', [{}, [], None, {1: 'int'}])
def test_bad_columns_argument(tmp_path: Any, columns: Any) -> None:
    with pytest.raises(ValueError, match='olumn'):
        MDSWriter(columns=columns, out=str(tmp_path))


@pytest.mark.parametrize('compression', ['lz4', 'zstd:99', 'gz:x', 'snappy:3', 'zstd:', 'ZSTD'])
def test_unknown_compression(tmp_path: Any, compression: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(compression))):
        MDSWriter(columns={'a': 'int'}, out=str(tmp_path), compression=compression)


@pytest.mark.parametrize('hashes', [['sha1', 'md5'], ['md5', 'md5'], ['xxh64', 'sha256']])
def test_unsorted_or_repeated_hashes(tmp_path: Any, hashes: list[str]) -> None:
    with pytest.raises(ValueError, match='hashes'):
        MDSWriter(columns={'a': 'int'}, out=str(tmp_path), hashes=hashes)


def test_unknown_hash(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match='not_a_hash'):
        MDSWriter(columns={'a': 'int'}, out=str(tmp_path), hashes=['md5', 'not_a_hash'])
    with pytest.raises(ValueError, match='shake_128'):
        MDSWriter(columns={'a': 'int'}, out=str(tmp_path), hashes=['shake_128'])


@pytest.mark.parametrize('size_limit', [2**32, 2**40, '4gb', '5gb', -1, 'lots', '12qb'])
def test_bad_size_limit(tmp_path: Any, size_limit: Any) -> None:
    with pytest.raises(ValueError, match='size_limit'):
        MDSWriter(columns={'a': 'int'}, out=str(tmp_path), size_limit=size_limit)


def test_largest_size_limit_is_accepted(tmp_path: Any) -> None:
    write_mds(str(tmp_path), {'a': 'int'}, [{'a': 1}], size_limit=2**32 - 1)
    assert read_index(str(tmp_path))['shards'][0]['size_limit'] == 2**32 - 1


@pytest.mark.parametrize('cls', [MDSWriter, JSONWriter, CSVWriter])
def test_unknown_writer_kwarg(tmp_path: Any, cls: type) -> None:
    with pytest.raises(ValueError, match='compresion'):
        cls(columns={'a': 'int'}, out=str(tmp_path), compresion='zstd')


@pytest.mark.parametrize('out', [('only-one',), ('a', 'b', 'c'), 42, None])
def test_bad_out(out: Any) -> None:
    with pytest.raises(ValueError, match='out'):
        MDSWriter(columns={'a': 'int'}, out=out)


# ---- sample values -----------------------------------------------------------------------------

def _ok_sample() -> dict[str, Any]:
    return {'text': 'x', 'id': 1, 'arr': np.zeros(2, np.int32), 'u': 3, 'j': [1]}


@pytest.mark.parametrize('column,value,error', [
    ('id', 'seven', TypeError),
    ('id', 1.5, TypeError),
    ('id', np.int64(5), TypeError),
    ('id', 2**64, ValueError),
    ('text', 5, TypeError),
    ('text', None, TypeError),
    ('arr', [1, 2], TypeError),
    ('arr', np.zeros(2, bool), ValueError),
    ('arr', np.zeros((0, 3), np.int32), ValueError),
    ('arr', np.float64(1.0), TypeError),
    ('u', 'abc', ValueError),
    ('u', 70000, ValueError),
    ('j', {1, 2}, TypeError),
])
def test_wrong_value_names_the_column(tmp_path: Any, column: str, value: Any,
                                      error: type) -> None:
    with MDSWriter(columns=COLUMNS, out=str(tmp_path)) as writer:
        with pytest.raises(error, match=f"'{column}'"):
            writer.write({**_ok_sample(), column: value})
        writer.write(_ok_sample())  # The writer is still usable.
    assert len(LocalDataset(str(tmp_path))) == 1


def test_fixed_size_mismatch_names_the_column(tmp_path: Any) -> None:
    with MDSWriter(columns={'fixed': 'ndarray:int32:2', 'n': 'uint8'}, out=str(tmp_path)) as w:
        with pytest.raises(ValueError, match="'fixed'"):
            w.write({'fixed': np.zeros(3, np.int32), 'n': 1})
        with pytest.raises(ValueError, match="'fixed'"):
            w.write({'fixed': np.zeros(2, np.int64), 'n': 1})
        # Pre-encoded bytes of the wrong length.
        with pytest.raises(ValueError, match="'n'"):
            w.write({'fixed': np.zeros(2, np.int32), 'n': b'ab'})


@pytest.mark.parametrize('cls,kwargs', [(MDSWriter, {}), (JSONWriter, {}), (CSVWriter, {}),
                                        (XSVWriter, {'separator': '|'})])
def test_missing_and_extra_columns(tmp_path: Any, cls: type, kwargs: dict[str, Any]) -> None:
    columns = {'alpha': 'str', 'beta': 'int'}
    with cls(columns=columns, out=str(tmp_path), **kwargs) as writer:
        with pytest.raises(ValueError, match='beta'):
            writer.write({'alpha': 'x'})
        with pytest.raises(ValueError, match='gamma'):
            writer.write({'alpha': 'x', 'beta': 1, 'gamma': 2})
        with pytest.raises(ValueError, match=r'beta.*gamma'):
            writer.write({'alpha': 'x', 'gamma': 2})
        with pytest.raises(TypeError, match='dict'):
            writer.write(['x', 1])
        with pytest.raises(TypeError, match='beta'):
            writer.write({'alpha': 'x', 'beta': '1'})


@pytest.mark.parametrize('cls,kwargs,bad', [
    (CSVWriter, {}, 'a,b'),
    (TSVWriter, {}, 'a\tb'),
    (XSVWriter, {'separator': '||'}, 'a||b'),
    (CSVWriter, {}, 'line\nbreak'),
    (CSVWriter, {'newline': '\r\n'}, 'line\r\nbreak'),
    # Not containing the separator, but ending with part of it: 'a|' + '||' splits as 'a', '|'.
    (XSVWriter, {'separator': '||'}, 'a|'),
])
def test_xsv_value_with_separator_or_newline(tmp_path: Any, cls: type, kwargs: dict[str, Any],
                                             bad: str) -> None:
    with cls(columns={'name': 'str', 'num': 'int'}, out=str(tmp_path), **kwargs) as writer:
        with pytest.raises(ValueError, match="'name'"):
            writer.write({'name': bad, 'num': 1})
        writer.write({'name': 'fine', 'num': 2})
    assert LocalDataset(str(tmp_path))[:] == [{'name': 'fine', 'num': 2}]


def test_xsv_bad_separator_and_column_names(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match='separator'):
        XSVWriter(columns={'a': 'str'}, separator='', out=str(tmp_path))
    with pytest.raises(ValueError, match='newline'):
        XSVWriter(columns={'a': 'str'}, separator='\n', out=str(tmp_path))
    with pytest.raises(ValueError, match="'a,b'"):
        CSVWriter(columns={'a,b': 'str'}, out=str(tmp_path))


# ---- damaged shard files -----------------------------------------------------------------------

@pytest.mark.parametrize('keep', [0, 3, 10, 0.5, -1])
def test_truncated_shard(tmp_path: Any, keep: float) -> None:
    root = str(tmp_path)
    path = _write(root)
    data = _get_file(path)
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    _set_file(path, data[:cut])
    with pytest.raises(ShardFileError, match=re.escape(path)):
        _read_every_sample(root)


def test_every_truncation_raises_shard_file_error(tmp_path: Any) -> None:
    """Even when index.json is edited to match the truncated size."""
    root = str(tmp_path)
    path = _write(root)
    data = _get_file(path)
    for cut in range(len(data)):
        _set_file(path, data[:cut])
        _edit_index(root, lambda obj, n=cut: obj['shards'][0]['raw_data'].update(bytes=n))
        with pytest.raises(ShardFileError, match=re.escape(path)):
            _read_every_sample(root)


def test_every_byte_flip_is_harmless_or_shard_file_error(tmp_path: Any) -> None:
    """A corrupt byte anywhere gives samples or ShardFileError, never struct/Index/KeyError."""
    root = str(tmp_path)
    path = _write(root)
    data = _get_file(path)
    failures = 0
    for pos in range(len(data)):
        for mask in (0x01, 0xff):
            corrupt = bytearray(data)
            corrupt[pos] ^= mask
            _set_file(path, bytes(corrupt))
            try:
                _read_every_sample(root)
            except ShardFileError as error:
                assert path in str(error)
                failures += 1
    assert failures > 0


def test_corrupt_offset_table(tmp_path: Any) -> None:
    root = str(tmp_path)
    path = _write(root)
    data = _get_file(path)
    count, = struct.unpack_from('<I', data)
    offsets = list(struct.unpack_from(f'<{count + 1}I', data, 4))
    bad_tables = [
        [offsets[0], offsets[2], offsets[1], offsets[3]],  # Decreasing.
        [offsets[0], offsets[1], offsets[2], offsets[3] + 1],  # Past the end.
        [0, offsets[1], offsets[2], offsets[3]],  # Starts inside the header.
        [offsets[0], 2**32 - 1, offsets[2], offsets[3]],
        [offsets[0], offsets[1] + 1, offsets[2], offsets[3]],  # Shifted sample boundary.
    ]
    for table in bad_tables:
        _set_file(path, data[:4] + struct.pack(f'<{count + 1}I', *table)
                  + data[4 + 4 * (count + 1):])
        with pytest.raises(ShardFileError, match=re.escape(path)):
            _read_every_sample(root)
    # A wrong sample count.
    _set_file(path, struct.pack('<I', count + 1) + data[4:])
    with pytest.raises(ShardFileError, match=re.escape(path)):
        _read_every_sample(root)


def test_corrupt_sample_bytes(tmp_path: Any) -> None:
    root = str(tmp_path)
    path = _write(root, n=1)
    data = _get_file(path)
    offsets = struct.unpack_from('<2I', data, 4)
    start = offsets[0]
    # Sample layout: lengths of (arr, j, text), then arr, id, j, text, u.
    arr_len, j_len, text_len = struct.unpack_from('<3I', data, start)
    body = start + 12
    edits = {
        'variable length too big': (start, struct.pack('<I', 10**6)),
        'unknown ndarray dtype code': (body, b'\x07'),
        'ndarray shape mismatch': (body + 1, bytes([(2 << 2) | 0])),
        'invalid utf-8': (body + arr_len + 8 + j_len, b'\xff\xfe'),
        'invalid json': (body + arr_len + 8, b'}'),
    }
    for name, (pos, patch) in edits.items():
        corrupt = data[:pos] + patch + data[pos + len(patch):]
        _set_file(path, corrupt)
        with pytest.raises(ShardFileError, match=re.escape(path)):
            _read_every_sample(root)
            pytest.fail(f'{name}: no error')


def test_corrupt_split_shards(tmp_path: Any) -> None:
    for cls in [JSONWriter, CSVWriter]:
        root = str(tmp_path / cls.__name__)
        with cls(columns={'s': 'str', 'n': 'int'}, out=root) as writer:
            for i in range(3):
                writer.write({'s': f'v{i}', 'n': i})
        shard, = read_index(root)['shards']
        data_path = os.path.join(root, shard['raw_data']['basename'])
        meta_path = os.path.join(root, shard['raw_meta']['basename'])
        data, meta = _get_file(data_path), _get_file(meta_path)
        # A damaged line.
        _set_file(data_path, data.replace(b'1', b'x'))
        with pytest.raises(ShardFileError, match=re.escape(data_path)):
            _read_every_sample(root)
        _set_file(data_path, data)
        # Truncated meta, with and without the index agreeing.
        for cut in range(len(meta)):
            _set_file(meta_path, meta[:cut])
            with pytest.raises(ShardFileError, match=re.escape(meta_path)):
                _read_every_sample(root)
        # Offsets past the end of the data file.
        bad = meta[:4] + struct.pack('<I', len(data) + 5) + meta[8:]
        _set_file(meta_path, bad)
        with pytest.raises(ShardFileError, match=re.escape(meta_path)):
            _read_every_sample(root)
        _set_file(meta_path, meta)
        assert len(_read_every_sample(root)) == 3


def test_corrupt_compressed_shard(tmp_path: Any) -> None:
    root = str(tmp_path)
    write_mds(root, COLUMNS, _samples(5), compression='zstd')
    name, = shard_files(root)
    path = os.path.join(root, name)
    data = _get_file(path)
    for corrupt in [data[:len(data) // 2], data[:4] + bytes(len(data) - 4), b'not zstd']:
        _set_file(path, corrupt)
        size = len(corrupt)
        _edit_index(root, lambda obj, n=size: obj['shards'][0]['zip_data'].update(bytes=n))
        with pytest.raises(ShardFileError, match=re.escape(path)):
            _read_every_sample(root)
    assert not os.path.exists(path[:-len('.zstd')])  # No partial raw file is left behind.


def test_missing_shard_file(tmp_path: Any) -> None:
    root = str(tmp_path)
    path = _write(root)
    os.remove(path)
    dataset = LocalDataset(root)
    with pytest.raises(FileNotFoundError, match=re.escape(path)):
        dataset[0]


def test_index_claims_more_samples_than_shard(tmp_path: Any) -> None:
    root = str(tmp_path)
    path = _write(root)
    _edit_index(root, lambda obj: obj['shards'][0].update(samples=4))
    dataset = LocalDataset(root)
    assert len(dataset) == 4
    with pytest.raises(ShardFileError, match=re.escape(path)):
        dataset[0]


# ---- damaged index.json ------------------------------------------------------------------------

def test_missing_index(tmp_path: Any) -> None:
    path = os.path.join(str(tmp_path), 'index.json')
    with pytest.raises(FileNotFoundError, match=re.escape(path)):
        LocalDataset(str(tmp_path))
    with pytest.raises(IndexFileError, match=re.escape(path)):
        LocalDataset(str(tmp_path))
    write_mds(str(tmp_path / 'train'), {'a': 'int'}, [{'a': 1}])
    with pytest.raises(FileNotFoundError, match='val'):
        LocalDataset(str(tmp_path), split='val')


@pytest.mark.parametrize('text', ['', 'not json', '{"shards": [', '\xff\xfe', '[]', '"x"',
                                  'null'])
def test_index_not_json_or_not_an_object(tmp_path: Any, text: str) -> None:
    _write(str(tmp_path))
    path = os.path.join(str(tmp_path), 'index.json')
    with open(path, 'w', encoding='latin-1') as f:
        f.write(text)
    with pytest.raises(IndexFileError, match=re.escape(path)):
        LocalDataset(str(tmp_path))


def _drop(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda shard: shard.pop(key)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    return lambda shard: shard.update({key: value})


@pytest.mark.parametrize('edit,named', [
    (_drop('samples'), 'samples'),
    (_set('samples', '3'), 'samples'),
    (_set('samples', -1), 'samples'),
    (_set('samples', True), 'samples'),
    (_drop('raw_data'), 'raw_data'),
    (_set('raw_data', 'shard.00000.mds'), 'raw_data'),
    (_set('raw_data', {'basename': 'shard.00000.mds', 'bytes': '12', 'hashes': {}}), 'raw_data'),
    (_set('raw_data', {'basename': '../../etc/passwd', 'bytes': 12, 'hashes': {}}), 'raw_data'),
    (_set('raw_data', {'basename': '/etc/passwd', 'bytes': 12, 'hashes': {}}), 'raw_data'),
    (_drop('column_encodings'), 'column_encodings'),
    (_set('column_names', 'text'), 'column_names'),
    (_set('column_sizes', [None]), 'column_sizes'),
    (_set('format', 'avro'), 'avro'),  # parquet is a registered (source) format now
    (_drop('format'), 'format'),
    (_set('version', 1), 'version'),
    (_set('compression', 'zstd'), 'zip_data'),
    (_set('column_encodings', ['ndarray', 'json', 'int', 'str', 'nope']), 'nope'),
])
def test_malformed_shard_entry(tmp_path: Any, edit: Callable[[dict[str, Any]], Any],
                               named: str) -> None:
    root = str(tmp_path)
    _write(root)
    _edit_index(root, lambda obj: edit(obj['shards'][0]))
    path = os.path.join(root, 'index.json')
    with pytest.raises(IndexFileError) as info:
        _read_every_sample(root)
    assert path in str(info.value) or root in str(info.value)
    assert named in str(info.value)


@pytest.mark.parametrize('edit,named', [
    (lambda obj: obj.update(version=1), 'version'),
    (lambda obj: obj.update(version='2'), 'version'),
    (lambda obj: obj.pop('version'), 'version'),
    (lambda obj: obj.pop('shards'), 'shards'),
    (lambda obj: obj.update(shards={'a': 1}), 'shards'),
    (lambda obj: obj.update(shards=[1]), 'shard 0'),
])
def test_malformed_index_top_level(tmp_path: Any, edit: Callable[[dict[str, Any]], Any],
                                   named: str) -> None:
    root = str(tmp_path)
    _write(root)
    _edit_index(root, edit)
    with pytest.raises(IndexFileError, match=re.escape(os.path.join(root, 'index.json'))) as info:
        LocalDataset(root)
    assert named in str(info.value)


def test_unknown_extra_keys_are_ignored(tmp_path: Any) -> None:
    root = str(tmp_path)
    _write(root)
    _edit_index(root, lambda obj: (obj.update(extra=1), obj['shards'][0].update(future_key=2)))
    assert len(_read_every_sample(root)) == 3
