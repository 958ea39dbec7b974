"""Azure blob reads (GET and HEAD) through obstore, the Rust ``object_store``: opt-in.

Measured against the Azure SDK on Azurite (docs/storage/transport.md), obstore reads the same
bytes for 0.4-0.65x the CPU per GB. It is not the default because its runtime (tokio) does
not survive ``fork``: a process forked after obstore ran in its parent hangs on its first
request, and DataLoader workers are forked. So it is used by ``AzureBackend.read`` and ``stat``
only when ``STREAMING_AZURE_CLIENT=obstore``, ``obstore`` is importable, the account's shared
key is in ``AZURE_ACCOUNT_ACCESS_KEY``, and this process is not a fork of one that used it
(such a child reads through the SDK). Connection strings, Entra ID identities, uploads and
listing stay on the SDK. obstore's own retries are off: the download layer retries.
"""

from __future__ import annotations

import importlib.util
import os
import re
from datetime import timedelta
from typing import Any, Iterator

from streaming.storage.clients import ClientCache
from streaming.storage.errors import TransientError
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.retry import THROTTLED_STATUSES
from streaming.storage.secrets import redact
from streaming.storage.transport import CHUNK_SIZE

__all__ = ['ObstoreAzure', 'usable']

CLIENT_ENV = 'STREAMING_AZURE_CLIENT'
_STATUS = re.compile(r'status code: (\d{3})')
_AVAILABLE: bool | None = None


_STARTED_IN: int | None = None  # The process whose obstore runtime this module started.


def usable() -> bool:
    """Whether reads go through obstore here (asked for, installed, a shared key, not forked)."""
    global _AVAILABLE
    if os.environ.get(CLIENT_ENV, 'sdk').strip().lower() != 'obstore' or \
            not os.environ.get('AZURE_ACCOUNT_ACCESS_KEY'):
        return False
    if _STARTED_IN is not None and _STARTED_IN != os.getpid():
        return False  # Its threads were not forked with us: a request would never finish.
    if _AVAILABLE is None:
        _AVAILABLE = importlib.util.find_spec('obstore') is not None
    return _AVAILABLE


class ObstoreAzure:
    """One ``AzureStore`` per (process, account URL, account, container, timeout)."""

    def __init__(self) -> None:
        self._stores: ClientCache[tuple[str, str, str, float], Any] = ClientCache(
            lambda key: self._make(*key))

    @staticmethod
    def _make(account_url: str, account: str, container: str, timeout: float) -> Any:
        global _STARTED_IN
        from obstore.store import AzureStore
        _STARTED_IN = os.getpid()
        options = {'allow_http': account_url.startswith('http://'),
                   'connect_timeout': timedelta(seconds=min(timeout, 60.0)),
                   'read_timeout': timedelta(seconds=timeout),
                   # A whole request may take as long as it keeps making progress.
                   'timeout': timedelta(days=1)}
        return AzureStore(container, account_name=account,
                          account_key=os.environ['AZURE_ACCOUNT_ACCESS_KEY'],
                          endpoint=account_url or None, client_options=options,
                          retry_config={'max_retries': 0, 'retry_timeout': timedelta(0),
                                        'backoff': {'init_backoff': timedelta(0),
                                                    'max_backoff': timedelta(0), 'base': 1.0}})

    def _store(self, account_url: str, container: str, timeout: float) -> Any:
        account = os.environ.get('AZURE_ACCOUNT_NAME') or \
            (account_url.split('//', 1)[-1].split('.', 1)[0] if account_url else '')
        return self._stores.get((account_url, account, container, float(timeout)))

    def stat(self, url: str, account_url: str, container: str, blob: str, timeout: float
             ) -> ObjectInfo:
        import obstore
        try:
            meta = obstore.head(self._store(account_url, container, timeout), blob)
        except Exception as error:
            raise translate(url, error) from None
        return ObjectInfo(int(meta['size']), meta.get('e_tag'))

    def read(self, url: str, account_url: str, container: str, blob: str, start: int,
             end: int | None, timeout: float, etag: str | None) -> Response:
        import obstore
        options: dict[str, Any] = {}
        if start or end is not None:
            options['range'] = (start, end) if end is not None else {'offset': start}
        if etag:
            options['if_match'] = etag
        try:
            result = obstore.get(self._store(account_url, container, timeout), blob,
                                 options=options or None)
        except Exception as error:
            raise translate(url, error) from None
        meta = result.meta
        return Response(ObjectInfo(int(meta['size']), meta.get('e_tag')),
                        _chunks(url, result.stream(min_chunk_size=CHUNK_SIZE)))


def _chunks(url: str, stream: Any) -> Iterator[bytes]:
    try:
        yield from stream  # Each chunk is ``bytes`` (obstore copies it out of Rust once).
    except Exception as error:
        raise translate(url, error) from None


def translate(url: str, error: Exception) -> Exception:
    """What a failed obstore call raises, as the SDK path's ``AzureBackend._translate``."""
    from obstore import exceptions
    where = redact(url)
    if isinstance(error, exceptions.NotFoundError):
        return FileNotFoundError(f'{where}: no such blob or container (Azure 404).')
    if isinstance(error, (exceptions.PreconditionError, exceptions.NotModifiedError)):
        return TransientError(f'{where} changed during the download (ETag mismatch).')
    if isinstance(error, (exceptions.PermissionDeniedError, exceptions.UnauthenticatedError)):
        return PermissionError(f'{where}: access denied (Azure); check AZURE_ACCOUNT_NAME / '
                               f'AZURE_ACCOUNT_ACCESS_KEY.')
    if not isinstance(error, exceptions.BaseError):
        return error
    text = str(error)
    found = _STATUS.search(text)
    status = int(found.group(1)) if found else 0
    if status in (401, 403):
        return PermissionError(f'{where}: access denied (Azure {status}).')
    if status == 404:
        return FileNotFoundError(f'{where}: no such blob or container (Azure 404).')
    summary = redact(text.split('\n', 1)[0])[:300]
    return TransientError(f'{where}: Azure answered {status} ({summary})' if status else
                          f'{where}: {summary}', throttled=status in THROTTLED_STATUSES)
