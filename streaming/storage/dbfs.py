"""``dbfs:/PATH``: the Databricks File System, through the Databricks SDK.

``dbfs:/Volumes/CATALOG/SCHEMA/VOLUME/...`` (Unity Catalog volumes) goes through the Files API;
any other ``dbfs:/...`` path through the DBFS API. The workspace and credentials are the SDK's
(``DATABRICKS_HOST`` and ``DATABRICKS_TOKEN``, or a ``~/.databrickscfg`` profile chosen with
``DATABRICKS_CONFIG_PROFILE``). Downloads fetch whole files (the Files API has no ranged read);
the shared layer adds retries, the timeout, the atomic rename and checksums.
"""

from __future__ import annotations

import base64
import shutil
from typing import Any

from streaming.storage.backend import Backend
from streaming.storage.clients import ClientCache
from streaming.storage.errors import MissingDependencyError, TransientError
from streaming.storage.objects import ObjectInfo

__all__ = ['DBFSBackend', 'dbfs_path', 'is_volume']

# The DBFS API returns at most 1 MiB per read call.
_DBFS_READ = 1 << 20
_COPY = 1 << 24


def dbfs_path(url: str) -> str:
    """``dbfs:/a/b`` (or ``dbfs:///a/b``) -> ``/a/b``."""
    if not url.startswith('dbfs:'):
        raise ValueError(f'URL {url!r}: expected dbfs:/PATH.')
    path = url[len('dbfs:'):]
    if path.startswith('//'):
        path = '/' + path.lstrip('/')
    if not path.startswith('/'):
        raise ValueError(f'URL {url!r}: expected an absolute path, dbfs:/PATH.')
    return path


def is_volume(path: str) -> bool:
    """Whether a DBFS path lies in a Unity Catalog volume (served by the Files API)."""
    return path == '/Volumes' or path.startswith('/Volumes/')


def _translate(url: str, error: BaseException) -> BaseException:
    code = str(getattr(error, 'error_code', '') or '')
    name = type(error).__name__
    if code in ('NOT_FOUND', 'RESOURCE_DOES_NOT_EXIST') or name in ('NotFound',
                                                                    'ResourceDoesNotExist'):
        return FileNotFoundError(f'{url}: no such file in DBFS.')
    if code in ('PERMISSION_DENIED', 'UNAUTHENTICATED') or name in ('PermissionDenied',
                                                                    'Unauthenticated'):
        return PermissionError(f'{url}: access denied by Databricks ({error}).')
    if code == 'REQUEST_LIMIT_EXCEEDED' or name == 'TooManyRequests':
        return TransientError(f'{url}: Databricks request limit exceeded.', throttled=True)
    if isinstance(error, ValueError):  # The SDK's configuration errors.
        return PermissionError(f'{url}: Databricks is not configured ({error}); set '
                               f'DATABRICKS_HOST and DATABRICKS_TOKEN or a config profile.')
    return TransientError(f'{url}: {name}: {error}')


class DBFSBackend(Backend):
    """Databricks File System paths and Unity Catalog volumes."""

    scheme = 'dbfs'

    def __init__(self) -> None:
        self._clients: ClientCache[None, Any] = ClientCache(lambda _: self._make_client())

    @staticmethod
    def _make_client() -> Any:
        try:
            from databricks.sdk import WorkspaceClient
        except ImportError as error:
            raise MissingDependencyError(
                'dbfs:/ URLs need the Databricks SDK: pip install "shardflow[dbfs]"') from error
        return WorkspaceClient()

    def client(self) -> Any:
        """The SDK's ``WorkspaceClient``, one per process, built from the environment."""
        return self._clients.get(None)

    def _call(self, url: str, op: Any) -> Any:
        try:
            return op(self.client(), dbfs_path(url))
        except (MissingDependencyError, FileNotFoundError, PermissionError):
            raise
        except Exception as error:  # The SDK's error classes, translated to builtin types.
            raise _translate(url, error) from error

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        def get(workspace: Any, path: str) -> ObjectInfo:
            if is_volume(path):
                meta = workspace.files.get_metadata(path)
                return ObjectInfo(meta.content_length, meta.last_modified)
            status = workspace.dbfs.get_status(path)
            if status.is_dir:
                raise FileNotFoundError(f'{url} is a directory, not a file.')
            return ObjectInfo(status.file_size, str(status.modification_time))
        return self._call(url, get)

    def download(self, url: str, local_path: str, timeout: float | None = None) -> None:
        def fetch(workspace: Any, path: str) -> None:
            with open(local_path, 'wb') as out:
                if is_volume(path):
                    contents = workspace.files.download(path).contents
                    try:
                        shutil.copyfileobj(contents, out, _COPY)
                    finally:
                        contents.close()
                    return
                offset = 0
                while True:
                    chunk = workspace.dbfs.read(path, offset=offset, length=_DBFS_READ)
                    data = base64.b64decode(chunk.data or '')
                    if not data:
                        return
                    out.write(data)
                    offset += len(data)
        self._call(url, fetch)

    def upload(self, local_path: str, url: str) -> None:
        def put(workspace: Any, path: str) -> None:
            with open(local_path, 'rb') as f:
                if is_volume(path):
                    workspace.files.upload(path, f, overwrite=True)
                else:
                    workspace.dbfs.upload(path, f, overwrite=True)
        self._call(url, put)

    def list(self, url: str) -> list[str]:
        def walk(workspace: Any, path: str) -> list[str]:
            if is_volume(path):
                found: list[str] = []
                pending = [path]
                while pending:
                    for entry in workspace.files.list_directory_contents(pending.pop()):
                        (pending if entry.is_directory else found).append(entry.path)
                return found
            return [status.path for status in workspace.dbfs.list(path, recursive=True)
                    if not status.is_dir]
        return sorted('dbfs:' + path for path in self._call(url, walk))
