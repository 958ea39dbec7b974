"""Read-only ``http://`` and ``https://`` remotes through urllib3 (pooled, ranged, timed).

A server that answers HEAD with ``Accept-Ranges: bytes`` gets parallel ranged GETs for large
files; any other is read with one GET. ``STREAMING_HTTP_AUTHORIZATION``, if set, is sent as the
``Authorization`` header (and is scrubbed from every message). Uploads and listing are not
possible over plain HTTP.
"""

from __future__ import annotations

import os
from typing import Any

import urllib3

from streaming.storage.backend import Backend
from streaming.storage.clients import ClientCache
from streaming.storage.errors import TransientError
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.secrets import redact
from streaming.storage.transport import body_chunks, byte_range, object_size, status_error

__all__ = ['HTTPBackend', 'status_error']


class HTTPBackend(Backend):
    """GET-only access to objects served over HTTP(S)."""

    scheme = 'http'

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self._headers = dict(headers or {})
        self._pools: ClientCache[None, Any] = ClientCache(
            lambda _: urllib3.PoolManager(maxsize=32, retries=False))

    def _manager(self) -> Any:
        return self._pools.get(None)

    def headers(self, url: str) -> dict[str, str]:
        """Headers for a request to ``url`` (auth, user agent)."""
        headers = {'Accept-Encoding': 'identity', **self._headers}
        auth = os.environ.get('STREAMING_HTTP_AUTHORIZATION')
        if auth and 'Authorization' not in headers:
            headers['Authorization'] = auth
        return headers

    def resolve(self, url: str) -> str:
        """The HTTP(S) URL to fetch for ``url``."""
        return url

    def _request(self, method: str, url: str, timeout: float, headers: dict[str, str]) -> Any:
        try:
            return self._manager().request(
                method, self.resolve(url), headers=headers, preload_content=False,
                redirect=True, retries=urllib3.Retry(total=None, connect=0, read=0, status=0,
                                                     other=0, redirect=5, raise_on_redirect=True),
                timeout=urllib3.Timeout(connect=min(timeout, 60.0), read=timeout))
        except urllib3.exceptions.HTTPError as error:
            raise TransientError(f'{redact(url)}: {redact(error)}') from None

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        response = self._request('HEAD', url, timeout, self.headers(url))
        response.release_conn()
        if response.status != 200:
            raise status_error(url, response.status, response.headers)
        length = response.headers.get('Content-Length')
        ranged = response.headers.get('Accept-Ranges', '').lower() == 'bytes'
        return ObjectInfo(int(length) if length and ranged else None, response.headers.get('ETag'))

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        headers = self.headers(url)
        ranged = bool(start or end is not None)
        if ranged:
            headers['Range'] = byte_range(start, end)
        if etag:
            headers['If-Match'] = etag
        response = self._request('GET', url, timeout, headers)
        if response.status not in (200, 206) or (ranged and response.status != 206):
            response.drain_conn()
            response.release_conn()
            if ranged and response.status == 200:
                raise ValueError(f'{redact(url)}: the server ignored a Range request.')
            raise status_error(url, response.status, response.headers)
        total = object_size(response.headers.get('Content-Range'),
                            response.headers.get('Content-Length'), ranged)
        return Response(ObjectInfo(total, response.headers.get('ETag')),
                        body_chunks(url, response))

    def upload(self, local_path: str, url: str) -> None:
        raise NotImplementedError(f'{redact(url)}: http(s):// remotes are read-only.')

    def list(self, url: str) -> list[str]:
        raise NotImplementedError(f'{redact(url)}: http(s):// remotes cannot be listed.')
