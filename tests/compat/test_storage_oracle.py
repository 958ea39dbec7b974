"""``streaming.base.storage`` against the reference on the same S3 server (moto on loopback):
the same classes for the same URLs, the same listings, the same downloaded bytes."""

from __future__ import annotations

import os
import uuid
from typing import Any, Iterator

import pytest

from streaming.storage import registry
from tests.compat.oracle import run_reference_code


@pytest.fixture(scope='module')
def moto_url() -> Iterator[str]:
    pytest.importorskip('moto.server', reason='moto[server] (the storage-test extra) is missing')
    from tests.storage import servers
    server = servers.moto_server()
    yield server.url
    server.stop()


@pytest.fixture
def bucket(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> str:
    for name in list(os.environ):
        if name.startswith(('AWS_', 'S3_')):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('AWS_CONFIG_FILE', str(tmp_path / 'none'))
    monkeypatch.setenv('AWS_SHARED_CREDENTIALS_FILE', str(tmp_path / 'none'))
    monkeypatch.setenv('S3_ENDPOINT_URL', moto_url)
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'fake-key-id')
    monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'fake-secret')
    monkeypatch.setenv('AWS_DEFAULT_REGION', 'us-east-1')
    monkeypatch.setattr(registry, '_instances', {})
    import boto3
    name = f'compat-{uuid.uuid4().hex[:10]}'
    boto3.client('s3', endpoint_url=moto_url).create_bucket(Bucket=name)
    return name


def test_uploader_and_downloader_agree_with_the_reference(bucket: str, tmp_path: Any) -> None:
    from streaming.base.storage import CloudDownloader, CloudUploader, S3Downloader, S3Uploader
    stage = tmp_path / 'stage'
    uploader = CloudUploader.get((str(stage), f's3://{bucket}/ours'), keep_local=True)
    assert isinstance(uploader, S3Uploader)
    for name, data in [('a.bin', b'alpha'), ('sub/b.bin', b'beta' * 1000)]:
        (stage / name).parent.mkdir(parents=True, exist_ok=True)
        (stage / name).write_bytes(data)
        uploader.upload_file(name)
    assert (stage / 'a.bin').exists()  # keep_local
    ref = run_reference_code(f"""
import os, tempfile
from streaming.base.storage import CloudUploader, CloudDownloader
stage = tempfile.mkdtemp()
up = CloudUploader.get((stage, 's3://{bucket}/theirs'), keep_local=True, exist_ok=True)
for name, data in [('a.bin', b'alpha'), ('sub/b.bin', b'beta' * 1000)]:
    os.makedirs(os.path.dirname(os.path.join(stage, name)), exist_ok=True)
    open(os.path.join(stage, name), 'wb').write(data)
    up.upload_file(name)
emit(type(up).__name__)
emit(up.list_objects())
emit(up.list_objects('sub'))
out = tempfile.mkdtemp()
d = CloudDownloader.get('s3://{bucket}/ours/sub/b.bin')
emit(type(d).__name__)
d.download('s3://{bucket}/ours/sub/b.bin', out + '/x/b.bin')
emit(open(out + '/x/b.bin', 'rb').read().hex())
""")
    kind, listed, listed_sub, down_kind, fetched = ref
    assert kind == type(uploader).__name__
    # The same keys for the same layout (each library under its own prefix).
    assert [key.replace('theirs/', 'ours/') for key in listed] == uploader.list_objects()
    assert [key.replace('theirs/', 'ours/') for key in listed_sub] == \
        uploader.list_objects('sub')
    assert bytes.fromhex(fetched) == b'beta' * 1000  # The reference reads what we uploaded.
    downloader = CloudDownloader.get(f's3://{bucket}/theirs/a.bin')
    assert isinstance(downloader, S3Downloader) and type(downloader).__name__ == down_kind
    downloader.download(f's3://{bucket}/theirs/a.bin', str(tmp_path / 'got' / 'a.bin'))
    assert (tmp_path / 'got' / 'a.bin').read_bytes() == b'alpha'  # We read what it uploaded.
    with pytest.raises(FileNotFoundError):
        downloader.download(f's3://{bucket}/theirs/nope', str(tmp_path / 'nope'))
