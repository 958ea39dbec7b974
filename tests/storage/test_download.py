"""The shared download layer under faults: a proxy in front of moto's S3 server injects them.

Faults (tests/storage/servers.FaultProxy): connection reset mid-body, 500, 503 and 429 (with
Retry-After), a body that stalls past the timeout, a body truncated short of its Content-Length,
and a flipped byte. With retries each is survived and the file is exact; without, the error
names the URL and the cause within a bounded time; a failed download never leaves a file at its
final path.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import threading
import time

import pytest

from streaming.storage import (
    Backend,
    CorruptDownloadError,
    DiskFullError,
    DownloadConfig,
    DownloadError,
    ObjectInfo,
    Response,
    download_file,
    register_backend,
)
from streaming.storage.download import hash_check
from tests.storage import servers
from tests.storage.conftest import s3_env

FAULTS = servers.FAULTS


@pytest.fixture
def proxy(s3, moto, monkeypatch):
    """(proxy, s3 client, bucket): S3_ENDPOINT_URL goes through a FaultProxy to moto."""
    client, bucket = s3
    fault_proxy = servers.FaultProxy(moto.port, stall_seconds=40.0)
    s3_env(monkeypatch, fault_proxy.url)
    # botocore would catch a flipped byte itself (CRC32); switch that off so that the checks of
    # the download layer are what is tested.
    monkeypatch.setenv('AWS_RESPONSE_CHECKSUM_VALIDATION', 'when_required')
    yield fault_proxy, client, bucket
    fault_proxy.stop()


def _object(client, bucket: str, key: str, size: int) -> tuple[str, bytes]:
    data = os.urandom(size)
    client.put_object(Bucket=bucket, Key=key, Body=data)
    return f's3://{bucket}/{key}', data


def _leftovers(directory) -> list[str]:
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


@pytest.mark.parametrize('fault', FAULTS)
def test_each_fault_is_survived_with_an_exact_file(proxy, tmp_path, fault) -> None:
    fault_proxy, client, bucket = proxy
    url, data = _object(client, bucket, 'obj.bin', 300_000)
    fault_proxy.rule = lambda m, p, n: fault if m == 'GET' and n == 0 else None
    check = hash_check('sha256', hashlib.sha256(data).hexdigest())
    started = time.monotonic()
    download_file(url, str(tmp_path / 'out' / 'obj'), retries=2, timeout=1.0, size=len(data),
                  check=check)
    assert (tmp_path / 'out' / 'obj').read_bytes() == data
    assert [f for f, _, _ in fault_proxy.injected] == [fault]
    assert _leftovers(tmp_path / 'out') == ['obj']
    # Well under the 40 s stall: the timeout, not the server, ended the stalled attempt (the
    # margin is for a loaded machine).
    assert time.monotonic() - started < 20


@pytest.mark.parametrize('fault', FAULTS)
def test_faults_on_ranged_parts_are_retried_part_by_part(proxy, tmp_path, fault) -> None:
    fault_proxy, client, bucket = proxy
    url, data = _object(client, bucket, 'big.bin', 1_200_000)
    fault_proxy.rule = lambda m, p, n: fault if m == 'GET' and n in (1, 3) else None
    config = DownloadConfig(part_size=200_000, concurrency=3)
    download_file(url, str(tmp_path / 'big'), retries=2, timeout=1.0, config=config,
                  check=hash_check('md5', hashlib.md5(data).hexdigest()))
    assert (tmp_path / 'big').read_bytes() == data
    assert len(fault_proxy.injected) == 2
    # Six parts: only the two failed ones are fetched again. A flipped byte shows only in the
    # whole file's checksum (S3 has none per range), so then the whole file is fetched again.
    assert fault_proxy.counts[('GET', f'/{bucket}/big.bin')] == (12 if fault == 'flip' else 8)
    assert _leftovers(tmp_path) == ['big']


@pytest.mark.parametrize('fault', FAULTS)
def test_a_fault_on_every_attempt_gives_a_clear_bounded_error(proxy, tmp_path, fault) -> None:
    fault_proxy, client, bucket = proxy
    url, data = _object(client, bucket, 'bad.bin', 200_000)
    fault_proxy.rule = lambda m, p, n: fault if m == 'GET' else None
    check = hash_check('sha1', hashlib.sha1(data).hexdigest())
    started = time.monotonic()
    with pytest.raises(DownloadError) as caught:
        download_file(url, str(tmp_path / 'out' / 'bad'), retries=2, timeout=1.0,
                      size=len(data), check=check)
    elapsed = time.monotonic() - started
    message = str(caught.value)
    throttled = fault in ('503', '429')
    # A throttling store's refusals use up no attempt: they end the download once it has
    # refused for the timeout.
    assert url in message and re.search(
        r'refused every request for 1\.\d+s' if throttled else r'after 3 attempt\(s\)',
        message), message
    cause = {'reset': 'IncompleteRead|Connection', '500': '500 InternalError',
             '503': '503 SlowDown', '429': '429 TooManyRequests',
             'stall': 'no data received for 1s', 'truncate': 'IncompleteRead',
             'flip': 'sha1 checksum mismatch'}
    assert re.search(cause[fault], message), message
    assert isinstance(caught.value, CorruptDownloadError) == (fault == 'flip')
    # Three attempts of at most the timeout, plus backoff; the margin is for a loaded machine
    # (a stall the timeout did not end would take 40 s an attempt).
    assert elapsed < 20, elapsed
    assert _leftovers(tmp_path / 'out') == []


def test_retry_after_is_honoured(proxy, tmp_path) -> None:
    fault_proxy, client, bucket = proxy
    url, data = _object(client, bucket, 'throttled.bin', 1000)
    fault_proxy.retry_after = '1'
    fault_proxy.rule = lambda m, p, n: '503' if m == 'GET' and n == 0 else None
    started = time.monotonic()
    download_file(url, str(tmp_path / 't'), retries=1)
    assert time.monotonic() - started >= 1.0  # Backoff alone would be <= 0.05s here.
    assert (tmp_path / 't').read_bytes() == data


def test_large_download_resumes_from_its_journal(proxy, tmp_path) -> None:
    fault_proxy, client, bucket = proxy
    url, data = _object(client, bucket, 'resume.bin', 1_000_000)
    path = tmp_path / 'resume'
    config = DownloadConfig(part_size=100_000, concurrency=2)
    fault_proxy.rule = lambda m, p, n: 'reset' if m == 'GET' and n >= 4 else None
    with pytest.raises(DownloadError, match='resume.bin'):
        download_file(url, str(path), retries=0, config=config)
    assert not path.exists()
    assert sorted(os.listdir(tmp_path)) == ['resume.partial', 'resume.partial.json']
    gets = fault_proxy.counts[('GET', f'/{bucket}/resume.bin')]
    fault_proxy.rule = lambda m, p, n: None
    download_file(url, str(path), retries=0, config=config)
    assert path.read_bytes() == data
    assert os.listdir(tmp_path) == ['resume']
    # 4 parts arrived the first time; the second fetches only the 6 that were missing.
    assert fault_proxy.counts[('GET', f'/{bucket}/resume.bin')] - gets == 6


def test_resume_starts_over_when_the_object_changed(proxy, tmp_path) -> None:
    fault_proxy, client, bucket = proxy
    url, _ = _object(client, bucket, 'changed.bin', 600_000)
    config = DownloadConfig(part_size=100_000, concurrency=1)
    fault_proxy.rule = lambda m, p, n: 'reset' if m == 'GET' and n >= 3 else None
    with pytest.raises(DownloadError):
        download_file(url, str(tmp_path / 'c'), retries=0, config=config)
    assert os.path.exists(tmp_path / 'c.partial')
    fault_proxy.rule = lambda m, p, n: None
    _, new = _object(client, bucket, 'changed.bin', 600_000)
    download_file(url, str(tmp_path / 'c'), retries=0, config=config)
    assert (tmp_path / 'c').read_bytes() == new


class _StallingBackend(Backend):
    """A backend whose bodies stop after one chunk: the watchdog must not depend on an SDK."""

    scheme = 'stalling'
    release = threading.Event()

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        return ObjectInfo(2 << 20, 'v1')

    def read(self, url, start=0, end=None, *, timeout, etag=None) -> Response:
        def chunks():
            yield b'x' * 1000
            self.release.wait(30)
        return Response(ObjectInfo(2 << 20, 'v1'), chunks())


def test_timeout_applies_to_any_backend_with_a_stalled_body(tmp_path) -> None:
    register_backend('stalling', _StallingBackend)
    try:
        started = time.monotonic()
        with pytest.raises(DownloadError, match=r'stalling://x.*no data received for 0.5s'):
            download_file('stalling://x', str(tmp_path / 'x'), retries=1, timeout=0.5)
        # Two attempts of 0.5 s, not the 30 s stall; the margin is for a loaded machine.
        assert time.monotonic() - started < 15
        assert _leftovers(tmp_path) == []
    finally:
        _StallingBackend.release.set()
        register_backend('stalling', None)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs; skipped where mounting is not permitted."""
    mount = tmp_path / 'tiny'
    mount.mkdir()
    result = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', str(mount)],
                            capture_output=True)
    if result.returncode != 0:
        pytest.skip('cannot mount a small tmpfs here (needs root)')
    yield mount
    subprocess.run(['umount', '-l', str(mount)], check=False)


@pytest.mark.parametrize('ranged', [False, True])
def test_full_disk_is_a_clear_error_and_leaves_nothing(s3, tiny_disk, ranged) -> None:
    client, bucket = s3
    url, _ = _object(client, bucket, 'huge.bin', 3_000_000)
    config = DownloadConfig(part_size=500_000) if ranged else DownloadConfig()
    with pytest.raises(DiskFullError, match='No space left') as caught:
        download_file(url, str(tiny_disk / 'huge'), retries=3, config=config)
    assert str(tiny_disk / 'huge') in str(caught.value)
    assert os.listdir(tiny_disk) == []


def test_a_known_size_needs_no_head_and_the_parts_must_agree(proxy, tmp_path) -> None:
    fault_proxy, client, bucket = proxy
    url, data = _object(client, bucket, 'sized.bin', 600_000)
    config = DownloadConfig(part_size=100_000, concurrency=3)
    download_file(url, str(tmp_path / 's'), retries=0, size=len(data), config=config)
    assert (tmp_path / 's').read_bytes() == data
    assert fault_proxy.counts.get(('HEAD', f'/{bucket}/sized.bin'), 0) == 0
    assert fault_proxy.counts[('GET', f'/{bucket}/sized.bin')] == 6
    # Every part names the object's real size: a wrong expected size fails, nothing is kept.
    with pytest.raises(CorruptDownloadError, match='has 600000 bytes, expected 500000'):
        download_file(url, str(tmp_path / 'w'), retries=0, size=500_000, config=config)
    assert _leftovers(tmp_path) == ['s']


class _Counting:
    """A local backend that records its calls (for the shape of a download)."""

    def __init__(self) -> None:
        from streaming.storage.local import LocalBackend
        self.inner, self.calls = LocalBackend(), []
        self.scheme, self.streams, self.can_read = 'file', True, True

    def read(self, url, start=0, end=None, *, timeout, etag=None):
        self.calls.append(('read', start, end))
        return self.inner.read(url, start, end, timeout=timeout, etag=etag)

    def stat(self, url, *, timeout):
        self.calls.append(('stat',))
        return self.inner.stat(url, timeout=timeout)


def test_preallocation_reserves_the_blocks_but_leaves_the_size_to_the_writes(tmp_path) -> None:
    from streaming.fileio import preallocate
    size = 3 << 20
    fd = os.open(tmp_path / 'shard', os.O_CREAT | os.O_RDWR, 0o644)
    try:
        reserved = preallocate(fd, size)
        # A short download must still read as short: the size is only what was written.
        assert os.fstat(fd).st_size == 0
        assert reserved == (os.fstat(fd).st_blocks * 512 >= size)
        os.pwrite(fd, b'x' * 1000, 0)
        assert os.fstat(fd).st_size == 1000
        assert not preallocate(fd, 0) and not preallocate(fd, None)
    finally:
        os.close(fd)


def test_in_parts_splits_a_known_size(tmp_path) -> None:
    from streaming.storage.download import MIN_PART, in_parts
    data = os.urandom(4 * MIN_PART + 5)
    (tmp_path / 'src.bin').write_bytes(data)
    url = f'file://{tmp_path}/src.bin'
    backend = _Counting()
    with in_parts(4):
        download_file(url, str(tmp_path / 'a'), size=len(data), backend=backend)
    assert (tmp_path / 'a').read_bytes() == data
    assert sorted(c[1] for c in backend.calls) == [i * (-(-len(data) // 4)) for i in range(4)]
    backend.calls.clear()
    with in_parts(64):  # Never below MIN_PART a part.
        download_file(url, str(tmp_path / 'b'), size=len(data), backend=backend)
    assert len(backend.calls) == 4
    backend.calls.clear()
    download_file(url, str(tmp_path / 'c'), size=len(data), backend=backend)  # Outside: one.
    assert backend.calls == [('read', 0, None)]
    assert (tmp_path / 'c').read_bytes() == data


def test_one_get_skips_the_head_unless_the_object_is_missing(tmp_path) -> None:
    data = os.urandom(1000)
    (tmp_path / 'src.bin').write_bytes(data)
    backend = _Counting()
    download_file(f'file://{tmp_path}/src.bin', str(tmp_path / 'd'), backend=backend,
                  one_get=True)
    assert backend.calls == [('read', 0, None)]  # No stat first.
    assert (tmp_path / 'd').read_bytes() == data
    backend.calls.clear()
    with pytest.raises(FileNotFoundError):  # Missing: the stat's error, as without one_get.
        download_file(f'file://{tmp_path}/nope.bin', str(tmp_path / 'e'), backend=backend,
                      one_get=True)
    assert backend.calls == [('read', 0, None), ('stat',)]
