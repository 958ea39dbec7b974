"""``azure://`` (Blob Storage) and ``azure-dl://`` (Data Lake Storage Gen2).

One URL meaning, for upload and download alike:

- ``azure://CONTAINER/PATH``: the account is ``AZURE_ACCOUNT_NAME``;
- ``azure://ACCOUNT.blob.core.windows.net/CONTAINER/PATH``: the account is in the host (a
  container name never has a dot, so the two forms cannot be confused);
- ``azure-dl://FILESYSTEM/PATH`` and ``azure-dl://ACCOUNT.dfs.core.windows.net/FILESYSTEM/PATH``
  likewise, for Data Lake Gen2 file systems.

Credentials: ``AZURE_ACCOUNT_ACCESS_KEY`` (shared key), else ``AZURE_STORAGE_CONNECTION_STRING``,
else azure-identity's ``DefaultAzureCredential`` (environment, managed identity, Azure CLI).
``STREAMING_AZURE_CLIENT=obstore`` reads with a shared key through obstore instead of the SDK
(``azure_obstore``: less CPU per GB, not fork-safe, so opt-in).
``AZURE_STORAGE_ENDPOINT`` overrides the account URL (sovereign clouds, private endpoints,
Azurite). Data Lake paths are read and written through the Blob API, which Gen2 accounts serve
for the same files (multi-protocol access), so both schemes share one tested code path.
"""

from __future__ import annotations

import os
from typing import Any, Iterator
from urllib.parse import urlparse

from azure.core import MatchConditions, exceptions
from azure.storage.blob import BlobServiceClient

from streaming.storage import azure_obstore
from streaming.storage.backend import Backend
from streaming.storage.clients import ClientCache
from streaming.storage.errors import MissingDependencyError, TransientError
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.retry import THROTTLED_STATUSES, retry_after
from streaming.storage.secrets import redact
from streaming.storage.transport import object_size

__all__ = ['AzureBackend', 'AzureDataLakeBackend']

_CHUNK = 4 << 20


class AzureBackend(Backend):
    """Blobs in an Azure storage account, one client per (process, account, timeout)."""

    scheme = 'azure'
    host_kind = 'blob'

    def __init__(self) -> None:
        self._clients: ClientCache[tuple[str, float], Any] = ClientCache(
            lambda key: self._make(*key))
        self._obstore: azure_obstore.ObstoreAzure | None = None

    def _fast(self) -> azure_obstore.ObstoreAzure | None:
        """The obstore read path when asked for and safe here (``azure_obstore``), else None."""
        if not azure_obstore.usable():
            return None
        if self._obstore is None:
            self._obstore = azure_obstore.ObstoreAzure()
        return self._obstore

    # ---- URLs and clients --------------------------------------------------------------------
    def locate(self, url: str) -> tuple[str, str, str]:
        """(account URL, container, blob name) of ``url``."""
        parsed = urlparse(url)
        host, path = parsed.netloc, parsed.path.lstrip('/')
        if not host:
            raise ValueError(f'URL {url!r} names no container; expected {self.scheme}://'
                             f'CONTAINER/PATH.')
        if '.' in host:
            container, _, blob = path.partition('/')
            account = host.split('.', 1)[0]
            account_url = f'https://{account}.blob.{host.split(".", 2)[2]}' \
                if host.count('.') >= 2 else f'https://{host}'
        else:
            container, blob = host, path
            account = os.environ.get('AZURE_ACCOUNT_NAME', '')
            account_url = ''
        endpoint = os.environ.get('AZURE_STORAGE_ENDPOINT')
        if endpoint:
            account_url = endpoint.rstrip('/')
        elif not account_url:
            if not account and not os.environ.get('AZURE_STORAGE_CONNECTION_STRING'):
                raise ValueError(f'URL {url!r}: set AZURE_ACCOUNT_NAME, or name the account in '
                                 f'the URL as {self.scheme}://ACCOUNT.{self.host_kind}.core.'
                                 f'windows.net/CONTAINER/PATH.')
            account_url = f'https://{account}.blob.core.windows.net' if account else ''
        if not container:
            raise ValueError(f'URL {url!r} names no container.')
        return account_url, container, blob

    def _service(self, account_url: str, timeout: float) -> Any:
        return self._clients.get((account_url, float(timeout)))

    def _make(self, account_url: str, timeout: float) -> Any:
        options = {'retry_total': 0, 'connection_timeout': min(timeout, 60.0),
                   'read_timeout': timeout, 'max_single_get_size': _CHUNK,
                   'max_chunk_get_size': _CHUNK}
        key = os.environ.get('AZURE_ACCOUNT_ACCESS_KEY')
        connection = os.environ.get('AZURE_STORAGE_CONNECTION_STRING')
        if key:
            account = os.environ.get('AZURE_ACCOUNT_NAME') or \
                urlparse(account_url).hostname.split('.')[0]  # type: ignore[union-attr]
            credential: Any = {'account_name': account, 'account_key': key}
        elif connection:
            return BlobServiceClient.from_connection_string(
                connection, **({'account_url': account_url} if account_url else {}), **options)
        else:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError as error:
                raise MissingDependencyError(
                    'Azure without AZURE_ACCOUNT_ACCESS_KEY uses azure-identity, which is not '
                    'installed; install it with: pip install "shardflow[azure]"') from error
            credential = DefaultAzureCredential()
        return BlobServiceClient(account_url=account_url, credential=credential, **options)

    def _blob(self, url: str, timeout: float) -> Any:
        account_url, container, blob = self.locate(url)
        return self._service(account_url, timeout).get_blob_client(container, blob)

    def _translate(self, url: str, error: Exception) -> Exception:
        where = redact(url)
        if isinstance(error, exceptions.ResourceNotFoundError):
            return FileNotFoundError(f'{where}: no such blob or container (Azure 404).')
        if isinstance(error, exceptions.ResourceModifiedError):
            return TransientError(f'{where} changed during the download (ETag mismatch).')
        if isinstance(error, exceptions.ClientAuthenticationError):
            return PermissionError(f'{where}: access denied (Azure); check AZURE_ACCOUNT_NAME / '
                                   f'AZURE_ACCOUNT_ACCESS_KEY or the identity\'s role.')
        if isinstance(error, exceptions.HttpResponseError):
            status = int(error.status_code or 0)
            if status in (401, 403):
                return PermissionError(f'{where}: access denied (Azure {status}).')
            return TransientError(f'{where}: Azure answered {status} '
                                  f'{redact(getattr(error, "error_code", "") or "")}',
                                  retry_after=retry_after(getattr(error.response, 'headers',
                                                                  None)),
                                  throttled=status in THROTTLED_STATUSES)
        if isinstance(error, exceptions.AzureError):
            return TransientError(f'{where}: {redact(error)}')
        return error

    # ---- operations -------------------------------------------------------------------------
    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        fast = self._fast()
        if fast is not None:
            return fast.stat(url, *self.locate(url), timeout)
        try:
            props = self._blob(url, timeout).get_blob_properties()
        except Exception as error:
            raise self._translate(url, error) from None
        return ObjectInfo(int(props.size), props.etag)

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        fast = self._fast()
        if fast is not None:
            return fast.read(url, *self.locate(url), start, end, timeout, etag)
        kwargs: dict[str, Any] = {'max_concurrency': 1}
        if start or end is not None:
            kwargs['offset'] = start
            if end is not None:
                kwargs['length'] = end - start
        if etag:
            kwargs.update(etag=etag, match_condition=MatchConditions.IfNotModified)
        try:
            downloader = self._blob(url, timeout).download_blob(**kwargs)
        except Exception as error:
            raise self._translate(url, error) from None
        props = downloader.properties
        # ``props.size`` is the length of the range read; the object's size follows the slash
        # of ``content_range`` (the SDK fills it for whole-object reads too).
        total = object_size(getattr(props, 'content_range', None), str(props.size),
                            bool(start or end is not None))
        return Response(ObjectInfo(total, props.etag), self._chunks(url, downloader))

    def _chunks(self, url: str, downloader: Any) -> Iterator[bytes]:
        try:
            yield from downloader.chunks()
        except Exception as error:
            raise self._translate(url, error) from None

    def upload(self, local_path: str, url: str) -> None:
        try:
            with open(local_path, 'rb') as f:
                self._blob(url, 300.0).upload_blob(f, overwrite=True, max_concurrency=4)
        except Exception as error:
            raise self._translate(url, error) from None

    def list(self, url: str) -> list[str]:
        account_url, container, prefix = self.locate(url)
        parsed = urlparse(url)
        head = f'{self.scheme}://{parsed.netloc}/' + (f'{container}/' if '.' in parsed.netloc
                                                       else '')
        client = self._service(account_url, 60.0).get_container_client(container)
        try:
            return sorted(head + blob.name for blob in
                          client.list_blobs(name_starts_with=prefix, include=['metadata'])
                          if not (blob.metadata or {}).get('hdi_isfolder'))
        except Exception as error:
            raise self._translate(url, error) from None


class AzureDataLakeBackend(AzureBackend):
    """Data Lake Gen2 file systems (``azure-dl://``), through the Blob API of the account."""

    scheme = 'azure-dl'
    host_kind = 'dfs'
