"""The reference's remote schemes that the storage layer lacked: sftp:// (against a real sshd on
loopback), dbfs: (Databricks SDK) and the fsspec fallback (fsspec's memory:// filesystem)."""

from __future__ import annotations

import os
import uuid
from typing import Any, Iterator

import pytest

from streaming.storage import download_file, get_backend, upload_file
from tests.compat.sshd import start_sshd
from tests.unit_helpers import write_mds


@pytest.fixture(scope='module')
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from start_sshd(str(tmp_path_factory.mktemp('sshd')))


@pytest.fixture
def sftp_env(sshd: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Credentials as the reference's users set them; returns the base URL."""
    monkeypatch.setenv('COMPOSER_SFTP_KEY_FILE', sshd['key'])
    monkeypatch.setenv('COMPOSER_SFTP_KNOWN_HOSTS_FILE', sshd['known_hosts'])
    return f'sftp://{sshd["user"]}@127.0.0.1:{sshd["port"]}'


def test_sftp_download_upload_list(tmp_path: Any, sftp_env: str) -> None:
    served = tmp_path / 'served'
    served.mkdir()
    data = os.urandom(3 << 20)  # Several MiB: ranged reads in chunks.
    (served / 'blob.bin').write_bytes(data)
    url = f'{sftp_env}{served}/blob.bin'
    got = tmp_path / 'got' / 'blob.bin'
    download_file(url, str(got), size=len(data))
    assert got.read_bytes() == data
    assert get_backend(url).stat(url, timeout=10).size == len(data)
    with pytest.raises(FileNotFoundError):
        download_file(f'{sftp_env}{served}/missing.bin', str(tmp_path / 'x'))
    assert not (tmp_path / 'x').exists()
    upload_file(str(got), f'{sftp_env}{served}/up/deeper/copy.bin')
    assert (served / 'up' / 'deeper' / 'copy.bin').read_bytes() == data
    assert not [p for p in os.listdir(served / 'up' / 'deeper') if p.endswith('.tmp')]
    listed = get_backend(sftp_env).list(f'{sftp_env}{served}')
    assert listed == [f'{sftp_env}{served}/blob.bin', f'{sftp_env}{served}/up/deeper/copy.bin']


def test_sftp_dataset_end_to_end(tmp_path: Any, sftp_env: str) -> None:
    """Write a dataset to sftp:// with MDSWriter, stream it back with StreamingDataset."""
    from streaming import StreamingDataset
    remote = f'{sftp_env}{tmp_path}/remote'
    write_mds((str(tmp_path / 'staging'), remote), {'id': 'int', 'text': 'str'},
              [{'id': i, 'text': f'sample {i}'} for i in range(200)], size_limit=1 << 10,
              compression='zstd', hashes=['xxh64'])
    dataset = StreamingDataset(remote=remote, local=str(tmp_path / 'cache'), batch_size=8,
                               shuffle=True, validate_hash='xxh64')
    assert sorted(sample['id'] for sample in dataset) == list(range(200))


def test_sftp_reference_classes(tmp_path: Any, sftp_env: str) -> None:
    from streaming.base.storage import CloudDownloader, CloudUploader, SFTPDownloader
    (tmp_path / 'f.txt').write_text('hello')
    downloader = CloudDownloader.get(f'{sftp_env}{tmp_path}/f.txt')
    assert isinstance(downloader, SFTPDownloader)
    downloader.download(f'{sftp_env}{tmp_path}/f.txt', str(tmp_path / 'out' / 'f.txt'))
    assert (tmp_path / 'out' / 'f.txt').read_text() == 'hello'
    uploader = CloudUploader.get((str(tmp_path / 'stage'), f'{sftp_env}{tmp_path}/dest'))
    (tmp_path / 'stage' / 'g.txt').write_text('up')
    uploader.upload_file('g.txt')
    assert (tmp_path / 'dest' / 'g.txt').read_text() == 'up'
    # Keys are paths on the server, relative to its root (as S3 keys are to the bucket).
    assert uploader.list_objects() == [f'{tmp_path}/dest/g.txt'.lstrip('/')]


def test_sftp_unknown_host_and_bad_key(tmp_path: Any, sshd: dict[str, str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from streaming.storage import sftp
    url = f'sftp://{sshd["user"]}@127.0.0.1:{sshd["port"]}{tmp_path}/x'
    (tmp_path / 'x').write_text('x')
    monkeypatch.setenv('COMPOSER_SFTP_KEY_FILE', sshd['key'])
    monkeypatch.setenv('HOME', str(tmp_path))  # No ~/.ssh/known_hosts either.
    monkeypatch.delenv('COMPOSER_SFTP_KNOWN_HOSTS_FILE', raising=False)
    with pytest.raises(PermissionError, match='unknown host key'):
        sftp.SFTPBackend().stat(url, timeout=10)
    monkeypatch.setenv('COMPOSER_SFTP_KNOWN_HOSTS_FILE', sshd['known_hosts'])
    other = tmp_path / 'other_key'
    os.system(f'ssh-keygen -q -t ed25519 -N "" -f {other}')
    monkeypatch.setenv('COMPOSER_SFTP_KEY_FILE', str(other))
    with pytest.raises(PermissionError, match='authentication failed'):
        sftp.SFTPBackend().stat(url, timeout=10)


def test_sftp_url_parsing() -> None:
    from streaming.storage.sftp import parse_sftp_url
    assert parse_sftp_url('sftp://u:p%40ss@h.example:2222/data/x') == \
        ('h.example', 2222, 'u', 'p@ss', '/data/x')
    assert parse_sftp_url('sftp://h/x') == ('h', 22, None, None, '/x')
    with pytest.raises(ValueError, match='sftp://'):
        parse_sftp_url('sftp:///no-host')


def test_fsspec_fallback_memory(tmp_path: Any) -> None:
    """A scheme with no backend of ours goes through fsspec when fsspec knows it."""
    fsspec = pytest.importorskip('fsspec', reason='the [fsspec] extra is not installed')
    from streaming import StreamingDataset
    from streaming.storage.fsspec_backend import FsspecBackend
    root = f'memory://compat-{uuid.uuid4().hex[:8]}'
    assert isinstance(get_backend(root), FsspecBackend)
    write_mds((str(tmp_path / 'staging'), f'{root}/data'), {'id': 'int'},
              [{'id': i} for i in range(100)], size_limit=1 << 9, hashes=['sha1'])
    assert fsspec.filesystem('memory').exists(f'{root}/data/index.json')
    dataset = StreamingDataset(remote=f'{root}/data', local=str(tmp_path / 'cache'),
                               batch_size=4, validate_hash='sha1')
    assert sorted(sample['id'] for sample in dataset) == list(range(100))
    listed = get_backend(root).list(f'{root}/data')
    assert f'{root}/data/index.json' in listed and len(listed) > 2
    with pytest.raises(FileNotFoundError):
        download_file(f'{root}/nope', str(tmp_path / 'nope'))
    with pytest.raises(ValueError, match="unsupported scheme 'nosuchproto'"):
        get_backend('nosuchproto://x/y')


def test_dbfs_what_can_be_tested_without_databricks(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Databricks emulator exists, so the DBFS backend is not exercised against a server
    here: only the URL handling, the routing of volumes vs DBFS paths, the scheme registration
    and the error users get without a configured workspace (the SDK's own client, for real)."""
    pytest.importorskip('databricks.sdk', reason='the [dbfs] extra is not installed')
    from streaming.base.storage import (
        CloudDownloader,
        DatabricksUnityCatalogDownloader,
        DBFSDownloader,
    )
    from streaming.storage.dbfs import DBFSBackend, dbfs_path, is_volume
    assert dbfs_path('dbfs:/Volumes/c/s/v/x') == '/Volumes/c/s/v/x'
    assert dbfs_path('dbfs:///tmp/x') == '/tmp/x'
    assert is_volume('/Volumes/c/s/v/x') and not is_volume('/tmp/Volumes/x')
    with pytest.raises(ValueError, match='absolute'):
        dbfs_path('dbfs:relative')
    assert isinstance(get_backend('dbfs:/tmp/x'), DBFSBackend)
    assert isinstance(CloudDownloader.get('dbfs:/Volumes/a/b'), DatabricksUnityCatalogDownloader)
    assert isinstance(CloudDownloader.get('dbfs:/a/b'), DBFSDownloader)
    for name in ('DATABRICKS_HOST', 'DATABRICKS_TOKEN', 'DATABRICKS_CONFIG_PROFILE'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('DATABRICKS_CONFIG_FILE', '/nonexistent/databrickscfg')
    monkeypatch.setenv('HOME', '/nonexistent')
    with pytest.raises(PermissionError, match='DATABRICKS_HOST'):
        DBFSBackend().stat('dbfs:/Volumes/c/s/v/x', timeout=5)
