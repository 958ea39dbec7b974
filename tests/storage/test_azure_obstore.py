"""Azure reads through obstore (``streaming.storage.azure_obstore``, opt-in), against Azurite: the
same bytes, sizes and errors as the SDK path, chosen only where asked for and safe, and a forked
child of a process that used it reads through the SDK instead of hanging."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from streaming.storage import azure_obstore
from streaming.storage.azure import AzureBackend
from streaming.storage.download import download_file
from streaming.storage.errors import TransientError

from .conftest import _require

DATA = os.urandom(3 << 20 | 12345)


@pytest.fixture(autouse=True)
def _obstore_asked_for(monkeypatch) -> None:
    try:
        import obstore  # noqa: F401
    except ImportError:
        _require('obstore (the "obstore" extra)')
    monkeypatch.setenv('STREAMING_AZURE_CLIENT', 'obstore')


@pytest.fixture
def blob(azure):
    client, container = azure
    client.get_container_client(container).upload_blob('dir/data.bin', DATA)
    return f'azure://{container}/dir/data.bin'


def _read(backend: AzureBackend, url: str, start: int = 0, end: int | None = None,
          etag: str | None = None) -> tuple[object, bytes]:
    response = backend.read(url, start, end, timeout=30, etag=etag)
    return response.info, b''.join(response.chunks)


def test_reads_match_the_sdk_path(blob, monkeypatch) -> None:
    fast = AzureBackend()
    assert fast._fast() is not None
    whole = _read(fast, blob)
    ranged = _read(fast, blob, 1000, 200_000)
    tail = _read(fast, blob, len(DATA) - 10)
    stat = fast.stat(blob, timeout=30)
    monkeypatch.setenv('STREAMING_AZURE_CLIENT', 'sdk')
    sdk = AzureBackend()
    assert sdk._fast() is None
    assert whole == _read(sdk, blob) and whole[1] == DATA
    assert ranged == _read(sdk, blob, 1000, 200_000) and ranged[1] == DATA[1000:200_000]
    assert tail == _read(sdk, blob, len(DATA) - 10) and tail[1] == DATA[-10:]
    assert stat == sdk.stat(blob, timeout=30) and stat.size == len(DATA)


def test_used_only_when_asked_for_with_a_shared_key(azure, monkeypatch) -> None:
    assert azure_obstore.usable()
    monkeypatch.delenv('STREAMING_AZURE_CLIENT')
    assert not azure_obstore.usable()  # The SDK by default.
    monkeypatch.setenv('STREAMING_AZURE_CLIENT', 'obstore')
    monkeypatch.delenv('AZURE_ACCOUNT_ACCESS_KEY')
    assert not azure_obstore.usable()  # Connection strings and identities stay on the SDK.


def test_errors_are_the_backends(blob, monkeypatch) -> None:
    backend = AzureBackend()
    missing = blob.replace('data.bin', 'nothing.bin')
    with pytest.raises(FileNotFoundError, match='nothing.bin'):
        backend.read(missing, timeout=30)
    with pytest.raises(FileNotFoundError, match='nothing.bin'):
        backend.stat(missing, timeout=30)
    with pytest.raises(TransientError, match='changed during the download'):
        _read(backend, blob, 0, 100, etag='"0x8D000000000000"')
    monkeypatch.setenv('AZURE_ACCOUNT_ACCESS_KEY', 'd3Jvbmcga2V5' * 4)
    with pytest.raises(PermissionError, match='access denied'):
        AzureBackend().read(blob, timeout=30)


def test_throttling_text_becomes_a_throttled_transient_error() -> None:
    from obstore.exceptions import GenericError
    error = azure_obstore.translate('azure://c/k', GenericError(
        'Generic MicrosoftAzure error: Error performing GET http://x/c/k - Server returned '
        'non-2xx status code: 503 Service Unavailable: <Code>ServerBusy</Code>'))
    assert isinstance(error, TransientError) and error.throttled and '503' in str(error)


def _child_download(url: str, path: str, queue: multiprocessing.Queue) -> None:
    try:
        usable = azure_obstore.usable()
        download_file(url, path, timeout=30)
        queue.put((usable, os.path.getsize(path)))
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        queue.put(repr(error))


def test_a_forked_child_of_a_user_reads_through_the_sdk(blob, tmp_path) -> None:
    download_file(blob, str(tmp_path / 'parent.bin'), timeout=30)  # Starts obstore here.
    assert azure_obstore.usable()
    context = multiprocessing.get_context('fork')  # As DataLoader workers are started.
    queue = context.Queue()
    child = context.Process(target=_child_download,
                            args=(blob, str(tmp_path / 'child.bin'), queue))
    child.start()
    child.join(120)  # obstore itself would hang here: its runtime's threads stayed behind.
    assert child.exitcode == 0 and queue.get(timeout=5) == (False, len(DATA))
    assert (tmp_path / 'child.bin').read_bytes() == DATA
