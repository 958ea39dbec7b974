"""WebDataset tars written by the ``webdataset`` package's TarWriter, streamed as they are."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SourceFileError


def write_tars(root: str, tars: int = 3, per_tar: int = 40) -> list[str]:
    import webdataset as wds
    os.makedirs(root, exist_ok=True)
    paths = []
    for t in range(tars):
        path = os.path.join(root, f'shard-{t:05d}.tar')
        with wds.TarWriter(path) as sink:
            for j in range(per_tar):
                i = t * per_tar + j
                sample = {'__key__': f'sample{i:06d}', 'cls': i, 'txt': f'caption {i}',
                          'json': {'id': i, 'tags': ['a', 'b']},
                          'bin': np.random.RandomState(i).bytes(i % 50 + 1)}
                if i % 3 == 0:
                    sample['extra.npy'] = np.arange(i % 5, dtype=np.int64)
                sink.write(sample)
        paths.append(path)
    return paths


def _as_webdataset_reads(paths: list[str]) -> list[dict]:
    import webdataset as wds
    samples = []
    for sample in wds.WebDataset(paths, shardshuffle=False, empty_check=False):
        sample.pop('__url__', None)
        sample.pop('__local_path__', None)
        samples.append(sample)
    return samples


def _dataset(remote: str, local: str, **kwargs) -> StreamingDataset:
    stream_kwargs = {k: kwargs.pop(k) for k in ('columns',) if k in kwargs}
    return StreamingDataset(streams=[SourceStream(remote=remote, local=local, **stream_kwargs)],
                            batch_size=4, **kwargs)


def test_samples_as_webdataset_groups_them(tmp_path) -> None:
    root = str(tmp_path / 'data')
    paths = write_tars(root)
    expected = _as_webdataset_reads(paths)
    dataset = _dataset(root, str(tmp_path / 'cache'))
    assert dataset.num_shards == 3 and dataset.num_samples == 120 == len(expected)
    assert [dataset[i] for i in range(120)] == expected
    assert dataset[4]['cls'] == b'4' and dataset[3]['extra.npy'].startswith(b'\x93NUMPY')


def test_shuffled_through_workers_with_fields_selected(tmp_path) -> None:
    root = str(tmp_path / 'data')
    write_tars(root)
    dataset = _dataset(root, str(tmp_path / 'cache'), columns=['cls'], shuffle=True)
    assert dataset[7] == {'__key__': 'sample000007', 'cls': b'7'}
    keys = [k for b in StreamingDataLoader(dataset, batch_size=4, num_workers=2)
            for k in b['__key__']]
    assert sorted(keys) == [f'sample{i:06d}' for i in range(120)] and keys != sorted(keys)


def test_truncated_tar_names_the_file(tmp_path) -> None:
    root = str(tmp_path / 'data')
    paths = write_tars(root)
    with open(paths[1], 'r+b') as f:
        f.truncate(os.path.getsize(paths[1]) // 2 + 100)
    with pytest.raises(SourceFileError, match=r'shard-00001\.tar.*truncated'):
        _dataset(root, str(tmp_path / 'cache'))


def test_tars_from_s3(s3, tmp_path) -> None:
    client, bucket = s3
    root = str(tmp_path / 'data')
    paths = write_tars(root, tars=2, per_tar=25)
    for path in paths:
        client.upload_file(path, bucket, f'wds/{os.path.basename(path)}')
    dataset = _dataset(f's3://{bucket}/wds', str(tmp_path / 'cache'), shuffle=True)
    got = sorted((s for s in dataset), key=lambda s: s['__key__'])
    assert got == _as_webdataset_reads(paths)
