"""Each shard is checked against its index entry when first opened: a mismatch is refused.

Indexes here are edited so they still pass the schema (same lengths, known encodings of the same
width), yet disagree with the shards: only the shards' own headers can tell.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

from streaming import CSVWriter, JSONWriter, LocalDataset, MDSWriter, StreamingDataset, XSVWriter
from streaming.errors import IndexFileError, ShardFileError
from tests.unit_helpers import edit_index

Edit = Callable[[dict[str, Any]], Any]


def _write(root: str, cls: type = MDSWriter, columns: dict[str, str] | None = None,
           **kwargs: Any) -> None:
    columns = columns or {'a': 'int32', 'b': 'float32', 'c': 'str'}
    extra = {'separator': '|'} if cls is XSVWriter else {}
    with cls(columns=columns, out=root, **extra, **kwargs) as writer:
        for i in range(5):
            writer.write({'a': i, 'b': i + 0.5, 'c': f'v{i}'})


def _edit(root: str, edit: Edit) -> None:
    edit_index(root, lambda obj: edit(obj['shards'][0]))


def _read_all(root: str) -> list[dict[str, Any]]:
    dataset = LocalDataset(root)
    return [dataset[i] for i in range(len(dataset))]


def _swap_names(shard: dict[str, Any]) -> None:
    shard['column_names'][0], shard['column_names'][1] = shard['column_names'][1], \
        shard['column_names'][0]


def _rename(shard: dict[str, Any]) -> None:
    shard['column_names'][0] = 'z'


def _same_width(shard: dict[str, Any]) -> None:
    shard['column_encodings'][0] = 'float32'  # int32 -> float32: 4 bytes either way.


def _uint(shard: dict[str, Any]) -> None:
    shard['column_encodings'][0] = 'uint32'


MDS_CASES = {'swapped': _swap_names, 'renamed': _rename, 'same-width': _same_width,
             'signedness': _uint}


@pytest.mark.parametrize('case', sorted(MDS_CASES))
def test_mds_index_disagreeing_with_its_shard(tmp_path: Any, case: str) -> None:
    root = str(tmp_path)
    _write(root)
    _edit(root, MDS_CASES[case])
    with pytest.raises(ShardFileError, match=r'shard\.00000\.mds disagrees with its index'):
        _read_all(root)


@pytest.mark.parametrize('samples', [0, 4, 6])
def test_sample_count_disagreeing(tmp_path: Any, samples: int) -> None:
    root = str(tmp_path)
    _write(root)
    _edit(root, lambda shard: shard.update(samples=samples))
    # A zero count would hide the shard's samples without opening it: the schema refuses it.
    error = IndexFileError if samples == 0 else ShardFileError
    with pytest.raises(error, match=r'"samples"' if samples == 0 else r'shard\.00000\.mds'):
        _read_all(root)


@pytest.mark.parametrize('cls', [CSVWriter, XSVWriter])
@pytest.mark.parametrize('case', ['swapped', 'renamed', 'encoding'])
def test_xsv_index_disagreeing_with_its_shard(tmp_path: Any, cls: type, case: str) -> None:
    root = str(tmp_path)
    _write(root, cls, {'a': 'int', 'b': 'float', 'c': 'str'})
    edits = {'swapped': _swap_names, 'renamed': _rename,
             'encoding': lambda shard: shard['column_encodings'].__setitem__(0, 'str')}
    _edit(root, edits[case])
    with pytest.raises(ShardFileError, match=r'\.meta disagrees with its index'):
        _read_all(root)


def test_json_index_disagreeing_with_its_shard(tmp_path: Any) -> None:
    root = str(tmp_path)
    _write(root, JSONWriter, {'a': 'int', 'b': 'float', 'c': 'str'})
    _edit(root, lambda shard: shard['columns'].update(a='str'))
    with pytest.raises(ShardFileError, match=r'\.meta disagrees with its index'):
        _read_all(root)


def test_format_disagreeing_with_the_shard(tmp_path: Any) -> None:
    root = str(tmp_path)
    _write(root, CSVWriter, {'a': 'int', 'b': 'float', 'c': 'str'})
    _edit(root, lambda shard: shard.update(format='tsv'))
    with pytest.raises(ShardFileError, match='format'):
        _read_all(root)


def test_corrupt_header_json(tmp_path: Any) -> None:
    root = str(tmp_path)
    _write(root)
    path = os.path.join(root, 'shard.00000.mds')
    data = bytearray(open(path, 'rb').read())
    start = 4 * 7  # count + 6 offsets for 5 samples
    data[start] = ord('!')
    with open(path, 'wb') as f:
        f.write(data)
    with pytest.raises(ShardFileError, match='not valid JSON'):
        _read_all(root)


# ---- with a remote: a bad cached shard is downloaded once more, then refused --------------------

@pytest.mark.parametrize('compression', [None, 'zstd'])
def test_bad_cached_shard_is_downloaded_again(tmp_path: Any, compression: str | None) -> None:
    remote, local = str(tmp_path / 'remote'), str(tmp_path / 'cache')
    _write(remote, compression=compression)
    first = StreamingDataset(remote=remote, local=local, batch_size=1)
    expected = [first[i]['a'] for i in range(len(first))]
    os.remove(os.path.join(local, 'shard.00000.mds'))
    if compression:
        # A damaged compressed copy beside no raw file: decompression fails, then refetch.
        with open(os.path.join(local, 'shard.00000.mds.zstd'), 'wb') as f:
            f.write(b'\0' * os.path.getsize(os.path.join(remote, 'shard.00000.mds.zstd')))
    else:
        with open(os.path.join(remote, 'shard.00000.mds'), 'rb') as f:
            good = f.read()
        with open(os.path.join(local, 'shard.00000.mds'), 'wb') as f:
            f.write(good.replace(b'"int32"', b'"int64"'))
    again = StreamingDataset(remote=remote, local=local, batch_size=1)
    assert [again[i]['a'] for i in range(len(again))] == expected


def test_bad_remote_shard_is_refused_after_one_more_download(tmp_path: Any) -> None:
    remote, local = str(tmp_path / 'remote'), str(tmp_path / 'cache')
    _write(remote)
    path = os.path.join(remote, 'shard.00000.mds')
    with open(path, 'rb') as f:
        good = f.read()
    with open(path, 'wb') as f:
        f.write(good.replace(b'"int32"', b'"int64"'))
    dataset = StreamingDataset(remote=remote, local=local, batch_size=1)
    with pytest.raises(ShardFileError, match='disagrees with its index'):
        dataset[0]


# ---- with a checksum: a corrupt payload is refused -----------------------------------------------

@pytest.mark.parametrize('kind', ['local', 'streaming-local'])
def test_corrupt_payload_caught_with_validate_hash(tmp_path: Any, kind: str) -> None:
    root = str(tmp_path)
    _write(root, hashes=['sha1', 'xxh64'])
    path = os.path.join(root, 'shard.00000.mds')
    data = bytearray(open(path, 'rb').read())
    data[-1] ^= 1  # The last sample's text: same size, still valid UTF-8, wrong content.
    with open(path, 'wb') as f:
        f.write(bytes(data))
    if kind == 'local':
        assert _read_all(root)[-1]['c'] != 'v4'  # Unchecked: the flip goes unseen.
        dataset = LocalDataset(root, validate_hash='xxh64')
        with pytest.raises(ShardFileError, match=r'shard\.00000\.mds does not match its xxh64'):
            dataset[0]
    else:
        with pytest.raises(ShardFileError, match=r'shard\.00000\.mds does not match its sha1'):
            StreamingDataset(local=root, batch_size=1, validate_hash='sha1')


def test_validate_hash_not_in_the_index(tmp_path: Any) -> None:
    root = str(tmp_path)
    _write(root, hashes=['sha1'])
    with pytest.raises(ShardFileError, match=r"validate_hash='md5'.*\['sha1'\]"):
        LocalDataset(root, validate_hash='md5')[0]
