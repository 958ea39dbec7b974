"""Uploads through the fault proxy in front of moto: retried, parallel, with progress."""

from __future__ import annotations

import os

import pytest

from streaming.storage import Uploader, UploadError, upload_file
from tests.storage import servers
from tests.storage.conftest import s3_env


@pytest.fixture
def proxy(s3, moto, monkeypatch):
    client, bucket = s3
    fault_proxy = servers.FaultProxy(moto.port)
    s3_env(monkeypatch, fault_proxy.url)
    yield fault_proxy, client, bucket
    fault_proxy.stop()


@pytest.mark.parametrize('fault', ['500', '503', '429'])
def test_failed_uploads_are_retried(proxy, tmp_path, fault) -> None:
    fault_proxy, client, bucket = proxy
    fault_proxy.rule = lambda m, p, n: fault if m == 'PUT' and n == 0 else None
    src = tmp_path / 'f.bin'
    src.write_bytes(b'payload' * 1000)
    upload_file(str(src), f's3://{bucket}/f.bin', retries=2)
    assert client.get_object(Bucket=bucket, Key='f.bin')['Body'].read() == src.read_bytes()
    assert [f for f, _, _ in fault_proxy.injected] == [fault]


def test_an_upload_that_always_fails_names_url_and_cause(proxy, tmp_path) -> None:
    fault_proxy, client, bucket = proxy
    fault_proxy.rule = lambda m, p, n: '503' if m == 'PUT' else None
    src = tmp_path / 'f.bin'
    src.write_bytes(b'x')
    with pytest.raises(UploadError, match=rf's3://{bucket}/f.bin.*after 3 attempt.*503'):
        upload_file(str(src), f's3://{bucket}/f.bin', retries=2)


def test_uploader_sends_files_in_parallel_with_progress(proxy, tmp_path, capsys) -> None:
    fault_proxy, client, bucket = proxy
    local = tmp_path / 'stage'
    uploader = Uploader((str(local), f's3://{bucket}/many'), keep_local=False, progress_bar=True,
                        max_workers=4)
    names = [f'shard.{i:05}.mds' for i in range(12)]
    for name in names:
        (local / name).write_bytes(name.encode())
    fault_proxy.rule = lambda m, p, n: '500' if m == 'PUT' and p.endswith('00003.mds') and \
        n == 0 else None
    uploader.upload_files(names)
    uploader.finish()
    keys = sorted(o['Key'] for o in client.list_objects_v2(Bucket=bucket)['Contents'])
    assert keys == [f'many/{n}' for n in names]
    assert not os.path.exists(local)  # Staging removed: keep_local=False.
    assert 'Uploading to s3://' in capsys.readouterr().err
