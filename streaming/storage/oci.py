"""``oci://BUCKET@NAMESPACE/PATH``: Oracle Cloud Infrastructure Object Storage, with the oci SDK.

Configuration comes from the oci config file (``~/.oci/config``, or ``OCI_CONFIG_FILE`` /
``OCI_CLI_CONFIG_FILE``; profile ``OCI_CONFIG_PROFILE`` / ``OCI_CLI_PROFILE``, default
``DEFAULT``), as the reference reads it. ``OCI_SERVICE_ENDPOINT`` overrides the object storage
endpoint. The SDK's retry strategy is off: the shared layer retries.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import oci

from streaming.storage.backend import Backend
from streaming.storage.clients import ClientCache
from streaming.storage.errors import TransientError
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.secrets import redact
from streaming.storage.transport import body_chunks, byte_range, object_size, status_error

__all__ = ['OCIBackend', 'split_oci_url']


def split_oci_url(url: str) -> tuple[str, str, str]:
    """``oci://bucket@namespace/path`` -> (bucket, namespace, path)."""
    parsed = urlparse(url)
    bucket, at, namespace = parsed.netloc.partition('@')
    if not (bucket and at and namespace):
        raise ValueError(f'URL {url!r}: expected oci://BUCKET@NAMESPACE/PATH.')
    return bucket, namespace, parsed.path.lstrip('/')


class OCIBackend(Backend):
    """Objects in OCI Object Storage, one client per (process, timeout)."""

    scheme = 'oci'

    def __init__(self) -> None:
        self._clients: ClientCache[float, Any] = ClientCache(self._make_client)

    def _client(self, timeout: float) -> Any:
        return self._clients.get(float(timeout))

    @staticmethod
    def _make_client(timeout: float) -> Any:
        path = os.environ.get('OCI_CONFIG_FILE') or os.environ.get('OCI_CLI_CONFIG_FILE') or \
            oci.config.DEFAULT_LOCATION
        profile = os.environ.get('OCI_CONFIG_PROFILE') or os.environ.get('OCI_CLI_PROFILE') or \
            'DEFAULT'
        config = oci.config.from_file(file_location=path, profile_name=profile)
        kwargs: dict[str, Any] = {'timeout': (min(timeout, 60.0), timeout),
                                  'retry_strategy': oci.retry.NoneRetryStrategy()}
        endpoint = os.environ.get('OCI_SERVICE_ENDPOINT')
        if endpoint:
            kwargs['service_endpoint'] = endpoint
        return oci.object_storage.ObjectStorageClient(config, **kwargs)

    def _translate(self, url: str, error: Exception) -> Exception:
        if isinstance(error, oci.exceptions.ServiceError):
            return status_error(url, int(error.status), error.headers or {}, 'OCI')
        if isinstance(error, (oci.exceptions.RequestException,
                              oci.exceptions.ConnectTimeout)):
            return TransientError(f'{redact(url)}: {redact(error)}')
        return error

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        bucket, namespace, name = split_oci_url(url)
        try:
            head = self._client(timeout).head_object(namespace, bucket, name)
        except Exception as error:
            raise self._translate(url, error) from None
        return ObjectInfo(int(head.headers['content-length']), head.headers.get('etag'))

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        bucket, namespace, name = split_oci_url(url)
        kwargs: dict[str, Any] = {}
        if start or end is not None:
            kwargs['range'] = byte_range(start, end)
        if etag:
            kwargs['if_match'] = etag
        try:
            response = self._client(timeout).get_object(namespace, bucket, name, **kwargs)
        except Exception as error:
            raise self._translate(url, error) from None
        headers = response.headers
        total = object_size(headers.get('content-range'), headers.get('content-length'),
                            'range' in kwargs)
        return Response(ObjectInfo(total, headers.get('etag')), body_chunks(url, response.data))

    def upload(self, local_path: str, url: str) -> None:
        bucket, namespace, name = split_oci_url(url)
        try:
            with open(local_path, 'rb') as f:
                self._client(300.0).put_object(namespace, bucket, name, f)
        except Exception as error:
            raise self._translate(url, error) from None

    def list(self, url: str) -> list[str]:
        bucket, namespace, prefix = split_oci_url(url)
        client = self._client(60.0)
        found, start = [], None
        try:
            while True:
                kwargs = {'prefix': prefix, 'fields': 'name,size'}
                if start:
                    kwargs['start'] = start
                page = client.list_objects(namespace, bucket, **kwargs).data
                found.extend(f'oci://{bucket}@{namespace}/{o.name}' for o in page.objects)
                start = page.next_start_with
                if not start:
                    return sorted(found)
        except Exception as error:
            raise self._translate(url, error) from None
