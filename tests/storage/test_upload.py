"""Uploads through the fault proxy in front of moto: retried, parallel, with progress, and paced
through a store that refuses most PUTs (a refusal uses up no attempt)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from benchmarks.store_limits import StoreLimits
from streaming.storage import Uploader, UploadError, upload_file
from streaming.storage.pacing import PACING_FIELDS
from streaming.storage.upload import UPLOAD_PACER
from tests.storage import servers
from tests.storage.conftest import s3_env
from tests.storage.test_e2e import read_all, write


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
    fault_proxy.rule = lambda m, p, n: '500' if m == 'PUT' else None
    src = tmp_path / 'f.bin'
    src.write_bytes(b'x')
    with pytest.raises(UploadError, match=rf's3://{bucket}/f.bin.*after 3 attempt.*500'):
        upload_file(str(src), f's3://{bucket}/f.bin', retries=2)


@pytest.fixture
def upload_pace(monkeypatch):
    """A fresh pace for this test's uploads (the process's is shared by every test)."""
    monkeypatch.setattr(UPLOAD_PACER, 'state', np.zeros(PACING_FIELDS, np.float64))
    return UPLOAD_PACER


def test_a_store_that_refuses_every_put_ends_the_upload_in_bounded_time(proxy, tmp_path,
                                                                         upload_pace) -> None:
    fault_proxy, client, bucket = proxy
    fault_proxy.rule = lambda m, p, n: '503' if m == 'PUT' else None
    src = tmp_path / 'f.bin'
    src.write_bytes(b'x')
    started = time.monotonic()
    with pytest.raises(UploadError, match=rf's3://{bucket}/f.bin.*refused every request for '
                                          r'\d.*SlowDown'):
        upload_file(str(src), f's3://{bucket}/f.bin', retries=0, throttle_limit=1.0)
    assert 1.0 <= time.monotonic() - started < 10
    assert len(fault_proxy.injected) >= 2 and upload_pace.throttles == len(fault_proxy.injected)


def test_a_writer_outlasts_a_store_that_refuses_puts_beyond_its_budget(proxy, tmp_path,
                                                                      upload_pace) -> None:
    """MDSWriter, retry=0, to a store allowing 4 PUTs/s (S3 style ``503 SlowDown`` beyond).

    The writer sends its shards faster than that, so the store refuses some; none uses up the
    one attempt allowed (before, the first refusal failed the writer): the PUTs are paced, the
    writer completes and the dataset reads back exactly.
    """
    fault_proxy, client, bucket = proxy
    limits, lock = StoreLimits(allow_rps=4.0), threading.Lock()

    def over_budget(method: str, path: str, n: int) -> str | None:
        with lock:
            return '503' if method == 'PUT' and not limits.admit(path, time.monotonic()) \
                else None
    fault_proxy.rule = over_budget
    remote = f's3://{bucket}/ds'
    write(remote, range(480), retry=0, max_workers=8)
    files = sum(method == 'PUT' for method, _ in fault_proxy.counts)
    refused = len(fault_proxy.injected)
    assert files >= 20 and refused >= 5, (files, refused)  # Refusals beyond retry=0...
    assert upload_pace.throttles == refused and upload_pace.rate is not None  # ...and paced.
    assert sorted(read_all(remote, str(tmp_path / 'cache'))) == list(range(480))


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
