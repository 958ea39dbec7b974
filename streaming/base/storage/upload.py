"""The reference's ``streaming.base.storage.upload``: ``CloudUploader.get(out, ...)``.

One class per scheme, all on ``streaming.storage.upload.Uploader`` (so they share its retries,
atomicity and backends).
"""

from __future__ import annotations

import enum
import os
from urllib.parse import urlparse

from streaming.storage.secrets import redact
from streaming.storage.upload import Uploader

__all__ = ['AlipanUploader', 'AzureDataLakeUploader', 'AzureUploader', 'CloudUploader',
           'DBFSUploader', 'DatabricksUnityCatalogUploader', 'GCSUploader', 'HFUploader',
           'LocalUploader', 'OCIUploader', 'S3Uploader']


class CloudUploader(Uploader):
    """Writes files into ``out`` and sends them to its remote.

    ``out`` is a directory, a URL staged through a temp dir, or ``(local, remote)``;
    ``upload_file(basename)`` sends one file.
    """

    def __init__(self, out: str | tuple[str, str], keep_local: bool = False,
                 progress_bar: bool = False, retry: int = 2, exist_ok: bool = False) -> None:
        # ``exist_ok`` lets a non-empty local directory be used as it is, never emptied (the
        # writers' ``exist_ok`` is what clears an output directory, not the uploader).
        super().__init__(_checked_out(out), keep_local=keep_local, retry=retry,
                         exist_ok=exist_ok, keep_contents=exist_ok, progress_bar=progress_bar)
        self._delete_local_files = not keep_local

    @classmethod
    def get(cls, out: str | tuple[str, str], keep_local: bool = False,
            progress_bar: bool = False, retry: int = 2, exist_ok: bool = False) -> CloudUploader:
        """The uploader for ``out``'s remote scheme (``LocalUploader`` for a plain path)."""
        out = _checked_out(out)
        uploader_cls = _uploader_class(out if isinstance(out, str) else out[1])
        return uploader_cls(out, keep_local=keep_local, progress_bar=progress_bar, retry=retry,
                            exist_ok=exist_ok)

    def list_objects(self, prefix: str | None = None) -> list[str]:
        """Object names under ``remote/prefix``.

        Keys for object stores, paths for a plain directory (the local directory when there
        is no remote).
        """
        root = self.remote if self.remote is not None else self.local
        if self.backend is None or not _is_url(root):
            base = os.path.join(root, prefix or '')
            found = [os.path.join(dirpath, name) for dirpath, _, files in os.walk(root)
                     for name in files]
            return sorted(path for path in found if path.startswith(base))
        from streaming.storage.registry import get_backend
        url = root.rstrip('/') + '/' + (prefix or '')
        parsed = urlparse(root)
        head = f'{parsed.scheme}://{parsed.netloc}/'
        return [found[len(head):] if found.startswith(head) else found
                for found in get_backend(url).list(url)]

    def clear_local(self, local: str) -> None:
        """Delete the local file ``local`` unless created with ``keep_local=True``.

        As the reference: only a file is removed (a directory or a missing path is left alone).
        """
        if self._delete_local_files and os.path.isfile(local):
            os.remove(local)


def _checked_out(out: object) -> str | tuple[str, str]:
    """``out`` as given if it is a path or URL string or a (local, remote) pair of strings."""
    if isinstance(out, str) or (isinstance(out, (tuple, list)) and len(out) == 2 and
                                all(isinstance(part, str) for part in out)):
        return out if isinstance(out, str) else (out[0], out[1])
    raise ValueError(f'Invalid `out` argument {redact(repr(out))}: it must be a local directory or '
                     f'remote URL string, or a (local, remote) pair of strings.')


def _is_url(path: str) -> bool:
    return '://' in path or path.startswith('dbfs:')


class LocalUploader(CloudUploader):
    """Copies into another local directory (or only writes, with no remote)."""


class S3Uploader(CloudUploader):
    """``s3://bucket/path`` (and S3-compatible stores through ``S3_ENDPOINT_URL``)."""


class GCSAuthentication(enum.Enum):
    """How Google Cloud Storage is reached: HMAC keys or a service account."""

    HMAC = 1
    SERVICE_ACCOUNT = 2


class GCSUploader(CloudUploader):
    """``gs://bucket/path``."""


class OCIUploader(CloudUploader):
    """``oci://bucket@namespace/path``."""


class AzureUploader(CloudUploader):
    """``azure://container/path``."""


class AzureDataLakeUploader(CloudUploader):
    """``azure-dl://filesystem/path``."""


class HFUploader(CloudUploader):
    """``hf://datasets/org/repo/path``."""


class DatabricksUploader(CloudUploader):
    """Base of the Databricks uploaders."""


class DatabricksUnityCatalogUploader(DatabricksUploader):
    """``dbfs:/Volumes/...``."""


class DBFSUploader(DatabricksUploader):
    """``dbfs:/...`` outside Unity Catalog volumes."""


class AlipanUploader(CloudUploader):
    """``alipan://`` (no backend in this library: constructing one raises)."""


_UPLOADERS: dict[str, type[CloudUploader]] = {
    '': LocalUploader, 'file': LocalUploader, 's3': S3Uploader, 'gs': GCSUploader,
    'oci': OCIUploader, 'azure': AzureUploader, 'azure-dl': AzureDataLakeUploader,
    'hf': HFUploader, 'dbfs': DBFSUploader, 'alipan': AlipanUploader,
}


def _uploader_class(remote: str | None) -> type[CloudUploader]:
    if remote is None:
        return LocalUploader
    scheme = urlparse(remote).scheme
    if scheme == 'dbfs' and remote.startswith('dbfs:/Volumes'):
        return DatabricksUnityCatalogUploader
    # Any other scheme with a registered backend (sftp, fsspec's) uploads through it.
    return _UPLOADERS.get(scheme, CloudUploader)
