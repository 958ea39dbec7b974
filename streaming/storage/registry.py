"""The scheme -> backend registry.

Backends are imported on first use of their scheme, so ``import streaming`` never imports a
cloud SDK. Third parties add schemes with ``register_backend`` or through the entry-point group
``streaming.backends`` (name = scheme, value = ``module:Class`` or any zero-argument factory).
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Callable
from urllib.parse import urlparse

from streaming.storage.errors import MissingDependencyError, UnavailableSchemeError
from streaming.storage.objects import ObjectInfo, ObjectStore, Response

__all__ = ['ObjectInfo', 'Response', 'get_backend', 'is_remote_url', 'join_url', 'parse_url',
           'register_backend', 'split_bucket_key']


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
# Any other scheme fsspec knows, when fsspec is installed: (module, class), imported by name
# like the built-ins, so that the registry imports no backend (and so no transfer code).
_FSSPEC_FALLBACK = ('streaming.storage.fsspec_backend', 'FsspecBackend')
_custom: dict[str, Callable[[], ObjectStore]] = {}
_instances: dict[str, ObjectStore] = {}
_lock = threading.Lock()


def register_backend(scheme: str, factory: Callable[[], ObjectStore] | None) -> None:
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


def join_url(root: str, *parts: str) -> str:
    """``root`` joined with the non-empty ``parts``: with ``/`` for a URL, as a path otherwise."""
    parts = tuple(p for p in parts if p)
    if is_remote_url(root):
        return '/'.join([root.rstrip('/'), *parts])
    return os.path.join(root, *parts)


def _entry_point(scheme: str) -> Callable[[], ObjectStore] | None:
    from importlib.metadata import entry_points
    for ep in entry_points(group='streaming.backends'):
        if ep.name == scheme:
            return ep.load()
    return None


def _builtin(scheme: str, url: str) -> Callable[[], ObjectStore]:
    module, name, extra = _BUILTIN[scheme]
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as error:
        missing = error.name or str(error)
        raise MissingDependencyError(
            f'URL {url!r} needs an optional dependency that is not installed ({missing}); '
            f'install it with: pip install "shardflow[{extra}]"') from error


def _fsspec_factory(scheme: str, url: str) -> Callable[[], ObjectStore] | None:
    """A backend over fsspec for a scheme it knows, if fsspec is installed (the fallback)."""
    try:
        import fsspec
    except ImportError:
        return None
    if scheme not in fsspec.available_protocols():
        return None
    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError as error:
        hint = ' (did you mean gs://?)' if scheme == 'gcs' else ''
        raise UnavailableSchemeError(
            f'URL {url!r} has scheme {scheme!r}{hint}, which has no backend here and whose fsspec '
            f'implementation is not installed ({error}); supported: plain paths and '
            f'{sorted({*_BUILTIN, *_custom} - {""})}.') from error
    module, name = _FSSPEC_FALLBACK
    backend_class = getattr(importlib.import_module(module), name)
    return lambda: backend_class(scheme)


def get_backend(url: str) -> ObjectStore:
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
            factory = _fsspec_factory(scheme, url)
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
