"""The scheme -> backend registry.

Backends are imported on first use of their scheme, so ``import streaming`` never imports a
cloud SDK. Third parties add schemes with ``register_backend`` or through the entry-point group
``streaming.backends`` (name = scheme, value = ``module:Class``).
"""

from __future__ import annotations

import importlib
import os
from typing import Callable
from urllib.parse import urlparse

__all__ = ['Backend', 'get_backend', 'parse_url', 'register_backend', 'is_remote_url']


class Backend:
    """An object store reached through URLs of one scheme.

    Subclasses implement ``upload`` and ``download``; both move whole files and must never leave a
    partial file at the destination.
    """

    scheme: str = ''

    def upload(self, local_path: str, url: str) -> None:
        raise NotImplementedError

    def download(self, url: str, local_path: str, timeout: float | None = None) -> None:
        raise NotImplementedError

    def list(self, url: str) -> list[str]:
        """URLs of the objects under ``url`` (a prefix)."""
        raise NotImplementedError


# Scheme -> (module, class, pip extra that provides its SDK). Filled in as backends land.
_BUILTIN: dict[str, tuple[str, str, str | None]] = {
    '': ('streaming.storage.local', 'LocalBackend', None),
    'file': ('streaming.storage.local', 'LocalBackend', None),
}
# Schemes users may know from the reference that have no backend here yet.
_PLANNED = {'s3': 's3', 'gs': 'gcs', 'azure': 'azure', 'azure-dl': 'azure', 'oci': 'oci',
            'hf': 'hf', 'http': 'http', 'https': 'http'}
_custom: dict[str, Callable[[], Backend]] = {}
_instances: dict[str, Backend] = {}


def register_backend(scheme: str, factory: Callable[[], Backend]) -> None:
    """Make URLs of ``scheme`` use the backend built by ``factory``."""
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


def get_backend(url: str) -> Backend:
    """The backend that serves ``url``, created once per scheme."""
    scheme, _ = parse_url(url)
    if scheme in _instances:
        return _instances[scheme]
    factory = _custom.get(scheme)
    if factory is None and scheme in _BUILTIN:
        module, name, extra = _BUILTIN[scheme]
        try:
            factory = getattr(importlib.import_module(module), name)
        except ImportError as error:
            raise ImportError(f'URL {url!r} needs an optional dependency ({error.name}); install '
                              f'it with: pip install "shardflow[{extra}]"') from error
    if factory is None:
        factory = _entry_point(scheme)
    if factory is None:
        if scheme in _PLANNED:
            raise NotImplementedError(f'URL {url!r}: the {scheme}:// backend is not available in '
                                      f'this version.')
        known = sorted({*_BUILTIN, *_custom} - {''})
        raise ValueError(f'URL {url!r} has unsupported scheme {scheme!r}; supported: plain paths '
                         f'and {known}.')
    backend = factory()
    _instances[scheme] = backend
    return backend
