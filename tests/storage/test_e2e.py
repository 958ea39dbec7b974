"""End to end on each backend: MDSWriter to the remote, merge_index on the remote, and a
StreamingDataset read back through a StreamingDataLoader with 2 workers.

Servers: moto (S3), gcp-storage-emulator (GCS), Azurite (azure:// and azure-dl://), and the
local OCI fake (OCI has no emulator; see tests/storage/servers.FakeOCI).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset
from streaming.merge import merge_index
from streaming.storage import get_backend

REMOTES = ['s3', 'gcs', 'azure', 'azure-dl', 'oci']
COLUMNS = {'id': 'int', 'payload': 'bytes'}


def payload(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * 8


def write(out, ids, **kwargs) -> None:
    with MDSWriter(out=out, columns=COLUMNS, size_limit=1 << 12, hashes=['sha1'],
                   **kwargs) as writer:
        for i in ids:
            writer.write({'id': i, 'payload': payload(i)})


def read_all(remote: str, local: str, **kwargs) -> list[int]:
    dataset = StreamingDataset(remote=remote, local=local, batch_size=4, **kwargs)
    ids = []
    for batch in StreamingDataLoader(dataset, batch_size=4, num_workers=2):
        for i, data in zip(batch['id'].tolist(), batch['payload']):
            assert data == payload(i), f'sample {i} is corrupt'
            ids.append(i)
    return ids


@pytest.fixture(params=REMOTES)
def remote(request) -> str:
    kind = request.param
    if kind == 's3':
        return f's3://{request.getfixturevalue("s3")[1]}/ds'
    if kind == 'gcs':
        return f'gs://{request.getfixturevalue("gcs")[1]}/ds'
    if kind in ('azure', 'azure-dl'):
        return f'{kind}://{request.getfixturevalue("azure")[1]}/ds'
    return f'oci://{request.getfixturevalue("oci")[1]}@ns/ds'


def test_write_merge_and_stream_back(remote, tmp_path) -> None:
    # Two partitions written in parallel-style: one straight to the remote, one through a kept
    # local copy; then merged on the remote into one dataset.
    write(f'{remote}/part0', range(0, 150), compression='zstd')
    write((str(tmp_path / 'part1'), f'{remote}/part1'), range(150, 300), keep_local=True)
    assert (tmp_path / 'part1' / 'index.json').exists()  # keep_local kept it.
    listed = get_backend(remote).list(remote)
    assert f'{remote}/part0/index.json' in listed and f'{remote}/part1/index.json' in listed
    merge_index(remote, keep_local=False)
    assert f'{remote}/index.json' in get_backend(remote).list(remote)

    ids = read_all(remote, str(tmp_path / 'cache'), validate_hash='sha1')
    assert sorted(ids) == list(range(300))  # Every sample exactly once, none corrupt.


def test_merge_index_from_a_list_of_remote_index_files(remote, tmp_path) -> None:
    write(f'{remote}/a', range(0, 40))
    write(f'{remote}/b', range(40, 80))
    merge_index([f'{remote}/a/index.json', f'{remote}/b/index.json'], remote, keep_local=False)
    assert sorted(read_all(remote, str(tmp_path / 'cache'))) == list(range(80))


def test_writer_uploads_in_parallel_and_cleans_its_staging_dir(s3, tmp_path) -> None:
    client, bucket = s3
    remote = f's3://{bucket}/parallel'
    writer = MDSWriter(out=remote, columns=COLUMNS, size_limit=1 << 11, max_workers=4)
    for i in range(200):
        writer.write({'id': i, 'payload': payload(i)})
    staging = writer.local
    writer.finish()
    keys = {o['Key'] for o in client.list_objects_v2(Bucket=bucket)['Contents']}
    shards = {k for k in keys if k.startswith('parallel/shard.')}
    assert 'parallel/index.json' in keys and len(shards) > 10
    assert not os.path.exists(staging)  # out=remote without keep_local: nothing left locally.
    index = client.get_object(Bucket=bucket, Key='parallel/index.json')['Body'].read()
    assert len(np.unique([s for s in shards])) == len(shards) and b'shard.00000.mds' in index
