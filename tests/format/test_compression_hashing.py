"""Whole-file compression and shard hashes: round trips, and what index.json records."""

from __future__ import annotations

import bz2
import gzip
import os
from typing import Any, Callable

import brotli
import pytest
import snappy
import zstandard

from streaming import JSONWriter, LocalDataset
from streaming.format.compression import (
    compress,
    decompress,
    get_compression_extension,
    get_compressions,
    is_compression,
)
from streaming.format.hashing import get_hash, get_hashes, is_hash
from tests.unit_helpers import hexdigest, read_index, shard_files, write_mds

# Independent decompressors, straight from each codec's package.
DECOMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    'br': brotli.decompress,
    'bz2': bz2.decompress,
    'gz': gzip.decompress,
    'snappy': snappy.decompress,
    'zstd': lambda data: zstandard.ZstdDecompressor().decompress(data),
}
LEVELS = {'br': range(0, 12), 'bz2': range(1, 10), 'gz': range(0, 10), 'snappy': range(0),
          'zstd': range(1, 23)}
# The reference's hash names (hashlib's fixed-length algorithms plus xxhash's).
REFERENCE_HASHES = {'md5', 'sha1', 'sha224', 'sha256', 'sha384', 'sha512', 'sha3_224', 'sha3_256',
                    'sha3_384', 'sha3_512', 'blake2b', 'blake2s', 'xxh32', 'xxh64', 'xxh128',
                    'xxh3_64', 'xxh3_128'}
WRITER_COMPRESSIONS = ['br', 'br:5', 'bz2', 'bz2:3', 'gz', 'gz:1', 'snappy', 'zstd', 'zstd:7',
                       'zstd:22']
PAYLOAD = b''.join(b'sample %d: the quick brown fox\n' % (i * 7919 % 1000) for i in range(2000))


def test_compression_names() -> None:
    expected = set(LEVELS)
    for family, levels in LEVELS.items():
        expected.update(f'{family}:{level}' for level in levels)
    assert get_compressions() == expected
    assert len(expected) == 58
    for name in expected:
        assert is_compression(name)
        assert get_compression_extension(name) == name.split(':')[0]
    assert is_compression(None)
    for bad in ['zip', 'zstd:0', 'zstd:23', 'br:12', 'gz:-1', 'snappy:1', 'zstd:', 'zstd:x',
                'ZSTD']:
        assert not is_compression(bad), bad


@pytest.mark.parametrize('algo', sorted(get_compressions()))
def test_compress_round_trip_every_level(algo: str) -> None:
    family = algo.split(':')[0]
    for data in [b'', b'x', PAYLOAD[:5000]]:
        packed = compress(algo, data)
        assert decompress(algo, packed) == data
        assert DECOMPRESSORS[family](packed) == data
    if algo != 'gz:0':  # gzip level 0 stores without compressing.
        assert len(compress(algo, PAYLOAD)) < len(PAYLOAD)


def test_levels_are_honoured() -> None:
    assert compress('bz2:1', PAYLOAD) == bz2.compress(PAYLOAD, 1)
    assert compress('br:3', PAYLOAD) == brotli.compress(PAYLOAD, quality=3)
    assert compress('zstd:19', PAYLOAD) != compress('zstd:1', PAYLOAD)
    assert len(compress('gz:1', PAYLOAD)) == len(gzip.compress(PAYLOAD, 1))
    assert len(compress('gz:1', PAYLOAD)) != len(compress('gz:9', PAYLOAD))
    # Bare names use the reference's defaults.
    assert compress('bz2', PAYLOAD) == bz2.compress(PAYLOAD, 9)
    assert compress('br', PAYLOAD) == brotli.compress(PAYLOAD, quality=11)
    assert compress('zstd', PAYLOAD) == compress('zstd:3', PAYLOAD)
    assert len(compress('gz', PAYLOAD)) == len(gzip.compress(PAYLOAD, 9))


def _samples(n: int) -> list[dict[str, Any]]:
    return [{'text': f'row {i} ' + 'lorem ipsum ' * (i % 17), 'id': i} for i in range(n)]


@pytest.mark.parametrize('algo', WRITER_COMPRESSIONS)
def test_writer_compression(tmp_path: Any, algo: str) -> None:
    root = str(tmp_path)
    samples = _samples(300)
    write_mds(root, {'text': 'str', 'id': 'int'}, samples, compression=algo, size_limit=4000,
              hashes=['sha1', 'xxh64'])
    family = algo.split(':')[0]
    index = read_index(root)
    assert len(index['shards']) > 1
    # Only the compressed files are written.
    assert shard_files(root) == sorted(s['zip_data']['basename'] for s in index['shards'])
    for shard in index['shards']:
        assert shard['compression'] == algo
        raw_info, zip_info = shard['raw_data'], shard['zip_data']
        assert zip_info['basename'] == raw_info['basename'] + '.' + family
        with open(os.path.join(root, zip_info['basename']), 'rb') as f:
            zipped = f.read()
        raw = DECOMPRESSORS[family](zipped)
        assert zip_info['bytes'] == len(zipped)
        assert raw_info['bytes'] == len(raw)
        assert raw_info['bytes'] <= 4000
        for algo_name in ['sha1', 'xxh64']:
            assert raw_info['hashes'][algo_name] == hexdigest(algo_name, raw)
            assert zip_info['hashes'][algo_name] == hexdigest(algo_name, zipped)
    dataset = LocalDataset(root)
    assert [dataset[i] for i in range(len(dataset))] == samples


def test_compressed_split_format(tmp_path: Any) -> None:
    root = str(tmp_path)
    samples = [{'s': f'value {i}', 'n': i} for i in range(200)]
    with JSONWriter(columns={'s': 'str', 'n': 'int'}, out=root, compression='zstd:5',
                    hashes=['md5'], size_limit=1500) as writer:
        for sample in samples:
            writer.write(sample)
    index = read_index(root)
    assert all(name.endswith('.zstd') for name in shard_files(root))
    for shard in index['shards']:
        for raw_key, zip_key in [('raw_data', 'zip_data'), ('raw_meta', 'zip_meta')]:
            with open(os.path.join(root, shard[zip_key]['basename']), 'rb') as f:
                zipped = f.read()
            raw = DECOMPRESSORS['zstd'](zipped)
            assert shard[zip_key]['basename'] == shard[raw_key]['basename'] + '.zstd'
            assert shard[raw_key]['bytes'] == len(raw)
            assert shard[raw_key]['hashes'] == {'md5': hexdigest('md5', raw)}
            assert shard[zip_key]['hashes'] == {'md5': hexdigest('md5', zipped)}
    assert LocalDataset(root)[:] == samples


def test_hash_names() -> None:
    assert get_hashes() >= REFERENCE_HASHES
    assert not any(name.startswith('shake_') for name in get_hashes())
    for name in get_hashes():
        assert is_hash(name)
    assert not is_hash('sha999')


@pytest.mark.parametrize('algo', sorted(get_hashes()))
def test_get_hash_matches_hashlib_and_xxhash(algo: str) -> None:
    for data in [b'', b'abc', PAYLOAD]:
        assert get_hash(algo, data) == hexdigest(algo, data)


@pytest.mark.parametrize('algo', sorted(get_hashes()))
def test_writer_records_each_hash(tmp_path: Any, algo: str) -> None:
    root = str(tmp_path)
    write_mds(root, {'text': 'str', 'id': 'int'}, _samples(50), hashes=[algo], compression='gz')
    shard, = read_index(root)['shards']
    assert shard['hashes'] == [algo]
    with open(os.path.join(root, shard['zip_data']['basename']), 'rb') as f:
        zipped = f.read()
    assert shard['zip_data']['hashes'] == {algo: hexdigest(algo, zipped)}
    assert shard['raw_data']['hashes'] == {algo: hexdigest(algo, gzip.decompress(zipped))}


def test_writer_records_all_hashes_at_once(tmp_path: Any) -> None:
    root = str(tmp_path)
    algos = sorted(get_hashes())
    write_mds(root, {'id': 'int'}, [{'id': i} for i in range(10)], hashes=algos)
    shard, = read_index(root)['shards']
    with open(os.path.join(root, shard['raw_data']['basename']), 'rb') as f:
        raw = f.read()
    assert shard['raw_data']['hashes'] == {a: hexdigest(a, raw) for a in algos}
    assert shard['zip_data'] is None
    assert shard['raw_data']['bytes'] == len(raw)


def test_no_hashes_records_empty(tmp_path: Any) -> None:
    root = str(tmp_path)
    write_mds(root, {'id': 'int'}, [{'id': 1}])
    shard, = read_index(root)['shards']
    assert shard['hashes'] == []
    assert shard['raw_data']['hashes'] == {}
    assert shard['compression'] is None
