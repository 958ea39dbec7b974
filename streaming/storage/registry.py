"""The scheme -> backend registry, and the ``Backend`` base class.

Backends are imported on first use of their scheme, so ``import streaming`` never imports a
cloud SDK. Third parties add schemes with ``register_backend`` or through the entry-point group
``streaming.backends`` (name = scheme, value = ``module:Class`` or any zero-argument factory).
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterator
from urllib.parse import urlparse

from streaming.storage.errors import MissingDependencyError

__all__ = ['Backend', 'ObjectInfo', 'Response', 'get_backend', 'is_remote_url', 'object_size',
           'parse_url', 'register_backend', 'split_bucket_key']


@dataclass(frozen=True)
class ObjectInfo:
    """What a remote object is: its size in bytes and a version tag (ETag) when known."""

    size: int | None
    etag: str | None = None


def object_size(content_range: str | None, content_length: str | None,
                ranged: bool) -> int | None:
    """The whole object's size from a GET's headers.

    It is the total after the slash in ``Content-Range``; a whole-object GET may give only
    ``Content-Length``. None when neither tells.
    """
    total = (content_range or '').rpartition('/')[2]
    if total.isdigit():
        return int(total)
    if not ranged and content_length:
        return int(content_length)
    return None


@dataclass
class Response:
    """An open GET: what was returned and an iterator over the body's chunks."""

    info: ObjectInfo
    chunks: Iterator[bytes]


class Backend:
    """An object store reached through URLs of one scheme.

    A backend implements the raw, single-attempt operations: ``read`` (a streamed, optionally
    ranged GET), ``stat``, ``upload`` and ``list``. Retries, timeouts, atomic writes, ranged
    parallel downloads, resume and checksum re-downloads are shared: ``download`` (below) and
    :func:`streaming.storage.download.download_file` build them on ``read`` and ``stat``.

    A backend that cannot stream may instead override ``download`` to fetch a whole file in one
    attempt; the shared layer then wraps that with the same retries, timeout and atomic rename.
    """

    scheme: str = ''

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        """GET bytes ``[start, end)`` of ``url`` (to the end if ``end`` is None).

        ``etag``, when given, must match or the call fails (the object changed). Raises
        FileNotFoundError for a missing object and PermissionError when access is denied.
        """
        raise NotImplementedError

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        """Size and ETag of ``url``; FileNotFoundError if missing."""
        raise NotImplementedError

    def upload(self, local_path: str, url: str) -> None:
        """Send one local file to ``url`` (a single attempt; callers retry)."""
        raise NotImplementedError

    def list(self, url: str) -> list[str]:
        """URLs of the objects under ``url`` (a prefix)."""
        raise NotImplementedError

    def download(self, url: str, local_path: str, timeout: float | None = None) -> None:
        """Fetch ``url`` to ``local_path`` atomically, with the default retries and timeout."""
        from streaming.storage.download import download_streamed
        download_streamed(self, url, local_path, timeout=60.0 if timeout is None else timeout)

    @property
    def streams(self) -> bool:
        """Whether downloads go through ``read`` (else through an overridden ``download``)."""
        return type(self).download is Backend.download and type(self).read is not Backend.read

    def __repr__(self) -> str:
        return f'{type(self).__name__}(scheme={self.scheme!r})'


def split_bucket_key(url: str) -> tuple[str, str]:
    """``scheme://bucket/key`` -> (bucket, key), with a clear error if the bucket is missing."""
    parsed = urlparse(url)
    if not parsed.netloc:
        raise ValueError(f'URL {url!r} names no bucket; expected {parsed.scheme}://BUCKET/PATH.')
    return parsed.netloc, parsed.path.lstrip('/')


# Scheme -> (module, class, pip extra that provides its SDK).
_BUILTIN: dict[str, tuple[str, str, str | None]] = {
    '': ('streaming.storage.local', 'LocalBackend', None),
    'file': ('streaming.storage.local', 'LocalBackend', None),
    's3': ('streaming.storage.s3', 'S3Backend', 's3'),
    'gs': ('streaming.storage.gcs', 'GCSBackend', 'gcs'),
    'azure': ('streaming.storage.azure', 'AzureBackend', 'azure'),
    'azure-dl': ('streaming.storage.azure', 'AzureDataLakeBackend', 'azure'),
    'oci': ('streaming.storage.oci', 'OCIBackend', 'oci'),
    'hf': ('streaming.storage.hf', 'HFBackend', 'hf'),
    'http': ('streaming.storage.http', 'HTTPBackend', 'http'),
    'https': ('streaming.storage.http', 'HTTPBackend', 'http'),
    'sftp': ('streaming.storage.sftp', 'SFTPBackend', 'sftp'),
    'dbfs': ('streaming.storage.dbfs', 'DBFSBackend', 'dbfs'),
}
# Schemes users may know from the reference that have no backend here.
_PLANNED = {'alipan': None}
_custom: dict[str, Callable[[], Backend]] = {}
_instances: dict[str, Backend] = {}
_lock = threading.Lock()


def register_backend(scheme: str, factory: Callable[[], Backend] | None) -> None:
    """Make URLs of ``scheme`` use the backend built by ``factory`` (overrides built-ins).

    ``None`` removes a registration.
    """
    with _lock:
        if factory is None:
            _custom.pop(scheme, None)
        else:
            _custom[scheme] = factory
        _instances.pop(scheme, None)


def parse_url(url: str) -> tuple[str, str]:
    """Split a URL into (scheme, rest); a plain path has scheme ''."""
    if os.name == 'nt' and len(url) > 1 and url[1] == ':':
        return '', url  # A Windows drive letter, not a scheme.
    scheme = urlparse(url).scheme
    return scheme, url


def is_remote_url(url: str) -> bool:
    """Whether ``url`` names a location other than a plain local path."""
    return parse_url(url)[0] != ''


def _entry_point(scheme: str) -> Callable[[], Backend] | None:
    from importlib.metadata import entry_points
    for ep in entry_points(group='streaming.backends'):
        if ep.name == scheme:
            return ep.load()
    return None


def _builtin(scheme: str, url: str) -> Callable[[], Backend]:
    module, name, extra = _BUILTIN[scheme]
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as error:
        missing = error.name or str(error)
        raise MissingDependencyError(
            f'URL {url!r} needs an optional dependency that is not installed ({missing}); '
            f'install it with: pip install "shardflow[{extra}]"') from error


def _fsspec_factory(scheme: str) -> Callable[[], Backend] | None:
    """A backend over fsspec for a scheme it knows, if fsspec is installed (the fallback)."""
    try:
        import fsspec
    except ImportError:
        return None
    if scheme not in fsspec.available_protocols():
        return None
    from streaming.storage.fsspec_backend import FsspecBackend
    return lambda: FsspecBackend(scheme)


def get_backend(url: str) -> Backend:
    """The backend that serves ``url``, created once per scheme (per process)."""
    scheme, _ = parse_url(url)
    backend = _instances.get(scheme)
    if backend is not None:
        return backend
    with _lock:
        if scheme in _instances:
            return _instances[scheme]
        factory = _custom.get(scheme)
        if factory is None:
            factory = _entry_point(scheme) if scheme not in _BUILTIN else None
        if factory is None and scheme in _BUILTIN:
            factory = _builtin(scheme, url)
        if factory is None and scheme not in _PLANNED:
            factory = _fsspec_factory(scheme)
        if factory is None:
            known = sorted({*_BUILTIN, *_custom} - {''})
            if scheme in _PLANNED:
                raise NotImplementedError(f'URL {url!r}: the {scheme}:// backend is not '
                                          f'available; supported schemes: {known}, or add one '
                                          f'through the streaming.backends entry points.')
            raise ValueError(f'URL {url!r} has unsupported scheme {scheme!r}; supported: plain '
                             f'paths and {known}.')
        backend = factory()
        _instances[scheme] = backend
        return backend
