"""Writer options, the MDS shard layout, and how samples are grouped into shards."""

from __future__ import annotations

import json
import os
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import LocalDataset, MDSWriter
from tests.unit_helpers import parse_mds_shard, read_index, shard_files, write_mds

COLUMNS = {'text': 'str', 'id': 'int'}


def _samples(n: int, width: int = 10) -> list[dict[str, Any]]:
    return [{'text': f'{i:0{width}d}', 'id': i} for i in range(n)]


def _read_all(root: str, split: str | None = None) -> list[dict[str, Any]]:
    dataset = LocalDataset(root, split=split)
    return [dataset[i] for i in range(len(dataset))]


# ---- the MDS shard layout ----------------------------------------------------------------------

def test_mds_shard_layout_matches_reference_example(tmp_path: Any) -> None:
    """The worked example of research notes section 2.2, checked byte by byte."""
    root = str(tmp_path)
    columns = {'text': 'str', 'id': 'int', 'arr': 'ndarray:int16:2', 'dyn': 'ndarray',
               'u8': 'uint8'}
    floats = np.array([[1.0, 2.5, -3.0]], np.float32)
    write_mds(root, columns, [
        {'text': 'hi', 'id': 7, 'arr': np.array([1, 2], np.int16), 'dyn': floats, 'u8': 5},
        {'text': 'abc', 'id': -1, 'arr': np.array([3, 4], np.int16),
         'dyn': np.arange(4, dtype=np.uint8), 'u8': 255},
    ])
    sample0 = (bytes.fromhex('10000000 02000000 0100 0200 22 08 01 03') + floats.tobytes()
               + bytes.fromhex('0700000000000000') + b'hi' + b'\x05')
    sample1 = bytes.fromhex('07000000 03000000 0300 0400 08 04 04 00010203 ffffffffffffffff '
                            '616263 ff')
    config = {'column_encodings': ['ndarray:int16:2', 'ndarray', 'int', 'str', 'uint8'],
              'column_names': ['arr', 'dyn', 'id', 'text', 'u8'],
              'column_sizes': [4, None, 8, None, 1], 'compression': None, 'format': 'mds',
              'hashes': [], 'size_limit': 1 << 26, 'version': 2}
    config_bytes = json.dumps(config, sort_keys=True).encode()
    start = 4 + 4 * 3 + len(config_bytes)
    offsets = [start, start + len(sample0), start + len(sample0) + len(sample1)]
    expected = struct.pack('<4I', 2, *offsets) + config_bytes + sample0 + sample1
    assert shard_files(root) == ['shard.00000.mds']
    with open(os.path.join(root, 'shard.00000.mds'), 'rb') as f:
        assert f.read() == expected
    index = read_index(root)
    assert index['version'] == 2
    shard, = index['shards']
    assert shard == {**config, 'raw_data': {'basename': 'shard.00000.mds',
                                            'bytes': len(expected), 'hashes': {}},
                     'samples': 2, 'zip_data': None}
    # The index file is one line with sorted keys, like the reference's json.dump(sort_keys=True).
    with open(os.path.join(root, 'index.json')) as f:
        assert f.read() == json.dumps(index, sort_keys=True)


def test_shard_names_count_up(tmp_path: Any) -> None:
    root = str(tmp_path)
    write_mds(root, COLUMNS, _samples(30), size_limit=200)
    names = shard_files(root)
    assert names == [f'shard.{i:05d}.mds' for i in range(len(names))]
    assert [s['raw_data']['basename'] for s in read_index(root)['shards']] == names


# ---- grouping samples into shards --------------------------------------------------------------

def _check_shards(root: str, size_limit: int | None, payloads: list[bytes]) -> None:
    """Shards obey size_limit, none is empty, and samples come back in order."""
    index = read_index(root)
    got: list[bytes] = []
    for shard in index['shards']:
        path = os.path.join(root, shard['raw_data']['basename'])
        with open(path, 'rb') as f:
            data = f.read()
        offsets, config, blobs = parse_mds_shard(data)
        assert shard['samples'] == len(blobs) >= 1
        assert shard['raw_data']['bytes'] == len(data) == offsets[-1]
        assert config['size_limit'] == size_limit == shard['size_limit']
        if size_limit is not None and shard['samples'] > 1:
            assert len(data) <= size_limit
        got += [blob[4:] for blob in blobs]  # Drop the one uint32 length of the bytes column.
    assert got == payloads
    dataset = LocalDataset(root)
    assert [s['x'] for s in dataset[:]] == payloads


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 400), min_size=0, max_size=40), st.integers(1, 3000))
def test_property_offsets_table(tmp_path_factory: pytest.TempPathFactory, sizes: list[int],
                                size_limit: int) -> None:
    root = str(tmp_path_factory.mktemp('shards'))
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    write_mds(root, {'x': 'bytes'}, [{'x': p} for p in payloads], size_limit=size_limit)
    _check_shards(root, size_limit, payloads)


def test_shards_are_filled_greedily(tmp_path: Any) -> None:
    root = str(tmp_path)
    write_mds(root, COLUMNS, _samples(100), size_limit=1000)
    shards = read_index(root)['shards']
    # Each shard is full: the next shard's first sample would not have fitted.
    for shard, nxt in zip(shards, shards[1:]):
        sample_bytes = (shard['raw_data']['bytes'] - 8 - len(json.dumps(
            {k: shard[k] for k in ['column_encodings', 'column_names', 'column_sizes',
                                   'compression', 'format', 'hashes', 'size_limit', 'version']},
            sort_keys=True))) // shard['samples']
        assert shard['raw_data']['bytes'] + sample_bytes > 1000
        assert nxt['samples'] >= 1
    assert sum(s['samples'] for s in shards) == 100


def test_shards_lists_every_flushed_shard_before_finish(tmp_path: Any) -> None:
    # The reference's writer appends a shard's entry when it is flushed; ours compresses and
    # writes on a thread pool, and `shards` must still list every shard flushed so far (it
    # raced with the pool before: an empty list under load).
    with MDSWriter(out=str(tmp_path), columns=COLUMNS, size_limit=600,
                   compression='zstd') as writer:
        for i, sample in enumerate(_samples(200)):
            writer.write(sample)
            if i % 50 == 49:
                flushed = writer.shard_id
                assert flushed > 0
                assert [s['raw_data']['basename'] for s in writer.shards] == \
                    [f'shard.{n:05d}.mds' for n in range(flushed)]
    assert sum(s['samples'] for s in writer.shards) == 200


def test_oversized_sample_gets_its_own_shard(tmp_path: Any) -> None:
    root = str(tmp_path)
    big = b'B' * 5000
    payloads = [b'a' * 10, b'b' * 10, big, b'c' * 10, big, big, b'd' * 10]
    write_mds(root, {'x': 'bytes'}, [{'x': p} for p in payloads], size_limit=1000)
    _check_shards(root, 1000, payloads)
    counts = [s['samples'] for s in read_index(root)['shards']]
    assert counts == [2, 1, 1, 1, 1, 1]


def test_oversized_first_sample_makes_no_empty_shard(tmp_path: Any) -> None:
    root = str(tmp_path)
    payloads = [b'B' * 5000, b'a']
    write_mds(root, {'x': 'bytes'}, [{'x': p} for p in payloads], size_limit=1000)
    assert [s['samples'] for s in read_index(root)['shards']] == [1, 1]
    _check_shards(root, 1000, payloads)


@pytest.mark.parametrize('size_limit', [None, 0])
def test_no_size_limit_makes_one_shard(tmp_path: Any, size_limit: int | None) -> None:
    root = str(tmp_path)
    write_mds(root, COLUMNS, _samples(500, width=200), size_limit=size_limit)
    shard, = read_index(root)['shards']
    assert shard['samples'] == 500 and shard['size_limit'] is None
    assert _read_all(root) == _samples(500, width=200)


@pytest.mark.parametrize('text,value', [('1kb', 1024), ('2KB', 2048), ('1.5kb', 1536),
                                        ('700', 700), ('700b', 700)])
def test_size_limit_strings(tmp_path: Any, text: str, value: int) -> None:
    root = str(tmp_path)
    write_mds(root, COLUMNS, _samples(200), size_limit=text)
    shards = read_index(root)['shards']
    assert len(shards) > 1
    for shard in shards:
        assert shard['size_limit'] == value
        assert shard['raw_data']['bytes'] <= value
    assert _read_all(root) == _samples(200)


def test_no_samples_writes_an_empty_index(tmp_path: Any) -> None:
    root = str(tmp_path)
    write_mds(root, COLUMNS, [])
    assert read_index(root) == {'shards': [], 'version': 2}
    assert shard_files(root) == []
    dataset = LocalDataset(root)
    assert len(dataset) == 0
    with pytest.raises(IndexError):
        dataset[0]


# ---- output locations --------------------------------------------------------------------------

def test_out_local_dir_is_created(tmp_path: Any) -> None:
    root = str(tmp_path / 'a' / 'b' / 'c')
    write_mds(root, COLUMNS, _samples(5))
    assert _read_all(root) == _samples(5)


@pytest.mark.parametrize('keep_local', [True, False])
@pytest.mark.parametrize('scheme', ['', 'file://'])
def test_out_local_and_remote(tmp_path: Any, keep_local: bool, scheme: str) -> None:
    local, remote = str(tmp_path / 'local'), str(tmp_path / 'remote')
    samples = _samples(100)
    write_mds((local, scheme + remote), COLUMNS, samples, keep_local=keep_local, size_limit=600,
              compression='zstd')
    remote_files = sorted(os.listdir(remote))
    assert 'index.json' in remote_files and len(remote_files) > 2
    assert _read_all(remote) == samples
    if keep_local:
        assert sorted(os.listdir(local)) == remote_files
        for name in remote_files:
            with open(os.path.join(local, name), 'rb') as a, \
                    open(os.path.join(remote, name), 'rb') as b:
                assert a.read() == b.read()
    else:
        assert not os.path.exists(local) or os.listdir(local) == []


def test_out_remote_url_only(tmp_path: Any) -> None:
    remote = str(tmp_path / 'remote')
    write_mds('file://' + remote, COLUMNS, _samples(20), size_limit=300)
    assert 'index.json' in os.listdir(remote)
    assert _read_all(remote) == _samples(20)


def test_exist_ok(tmp_path: Any) -> None:
    root = tmp_path / 'out'
    root.mkdir()
    # An empty directory is fine without exist_ok.
    write_mds(str(root), COLUMNS, _samples(3))
    (root / 'stale.txt').write_text('old')
    with pytest.raises(FileExistsError, match=str(root)):
        MDSWriter(columns=COLUMNS, out=str(root))
    # The failed attempt touched nothing.
    assert (root / 'stale.txt').exists() and _read_all(str(root)) == _samples(3)
    write_mds(str(root), COLUMNS, _samples(4), exist_ok=True)
    assert not (root / 'stale.txt').exists()
    assert _read_all(str(root)) == _samples(4)


def test_progress_bar(tmp_path: Any, capsys: pytest.CaptureFixture) -> None:
    root = str(tmp_path)
    write_mds(root, COLUMNS, _samples(50), size_limit=300, progress_bar=True)
    assert capsys.readouterr().err != ''
    assert _read_all(root) == _samples(50)


def test_max_workers_do_not_change_output(tmp_path: Any) -> None:
    outputs = []
    for workers in [1, 2, 8]:
        root = str(tmp_path / f'w{workers}')
        write_mds(root, COLUMNS, _samples(300), size_limit=500, max_workers=workers,
                  hashes=['xxh64'], compression='br:1', retry=0)
        files = {}
        for name in sorted(os.listdir(root)):
            with open(os.path.join(root, name), 'rb') as f:
                files[name] = f.read()
        outputs.append(files)
        assert _read_all(root) == _samples(300)
    assert len(outputs[0]) > 10
    assert outputs[0] == outputs[1] == outputs[2]


def test_compressed_only_output(tmp_path: Any) -> None:
    root = str(tmp_path)
    write_mds(root, COLUMNS, _samples(100), size_limit=600, compression='zstd')
    names = sorted(os.listdir(root))
    assert names[0] == 'index.json'
    assert names[1:] and all(n.startswith('shard.') and n.endswith('.mds.zstd')
                             for n in names[1:])
    assert _read_all(root) == _samples(100)


# ---- lifecycle ---------------------------------------------------------------------------------

def test_exception_in_with_block_publishes_no_index(tmp_path: Any) -> None:
    root = str(tmp_path)
    with pytest.raises(RuntimeError, match='boom'):
        with MDSWriter(columns=COLUMNS, out=root, size_limit=200) as writer:
            for sample in _samples(50):
                writer.write(sample)
            raise RuntimeError('boom')
    assert not os.path.exists(os.path.join(root, 'index.json'))
    # The directory can be written again.
    write_mds(root, COLUMNS, _samples(2), exist_ok=True)
    assert _read_all(root) == _samples(2)


def test_finish_without_context_manager(tmp_path: Any) -> None:
    root = str(tmp_path)
    writer = MDSWriter(columns=COLUMNS, out=root)
    for sample in _samples(7):
        writer.write(sample)
    assert not os.path.exists(os.path.join(root, 'index.json'))
    writer.finish()
    writer.finish()  # A second finish does nothing.
    assert _read_all(root) == _samples(7)
    with pytest.raises(RuntimeError):
        writer.write(_samples(1)[0])


def test_column_order_is_sorted_and_sample_key_order_is_irrelevant(tmp_path: Any) -> None:
    root = str(tmp_path)
    columns = {'b': 'int', 'c': 'str', 'a': 'bytes'}
    write_mds(root, columns, [{'c': 'x', 'a': b'y', 'b': 1}, {'b': 2, 'a': b'', 'c': ''}])
    shard, = read_index(root)['shards']
    assert shard['column_names'] == ['a', 'b', 'c']
    assert shard['column_encodings'] == ['bytes', 'int', 'str']
    assert _read_all(root) == [{'a': b'y', 'b': 1, 'c': 'x'}, {'a': b'', 'b': 2, 'c': ''}]


def test_split_subdirectories(tmp_path: Any) -> None:
    root = tmp_path / 'data'
    write_mds(str(root / 'train'), COLUMNS, _samples(10))
    write_mds(str(root / 'val'), COLUMNS, _samples(3))
    assert _read_all(str(root), 'train') == _samples(10)
    assert _read_all(str(root), 'val') == _samples(3)
