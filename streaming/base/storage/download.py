"""The reference's ``streaming.base.storage.download``: ``CloudDownloader.get(remote)``.

One class per scheme, all on ``streaming.storage.download_file`` (atomic, verified, retried).
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from streaming.base.constant import DEFAULT_TIMEOUT
from streaming.storage.download import download_file

__all__ = ['AlipanDownloader', 'AzureDataLakeDownloader', 'AzureDownloader', 'CloudDownloader',
           'DBFSDownloader', 'DatabricksUnityCatalogDownloader', 'GCSDownloader', 'HFDownloader',
           'LocalDownloader', 'OCIDownloader', 'S3Downloader', 'SFTPDownloader']


class CloudDownloader:
    """Downloads remote files of one scheme to local paths."""

    @classmethod
    def get(cls, remote_dir: str | None = None) -> CloudDownloader:
        """The downloader for ``remote_dir``'s scheme (``LocalDownloader`` for a path or None).

        Raises ValueError for a scheme no backend serves.
        """
        if remote_dir is None:
            return LocalDownloader()
        scheme = urlparse(remote_dir).scheme
        if scheme == 'dbfs' and remote_dir.startswith('dbfs:/Volumes'):
            return DatabricksUnityCatalogDownloader()
        downloader_cls = _DOWNLOADERS.get(scheme)
        if downloader_cls is None:
            from streaming.storage.registry import get_backend
            try:
                get_backend(remote_dir)
            except (ValueError, NotImplementedError) as error:
                raise ValueError(f'Unsupported remote path: {remote_dir} ({error})') from None
            downloader_cls = CloudDownloader
        return downloader_cls()

    @classmethod
    def direct_download(cls, remote: str | None, local: str,
                        timeout: float = DEFAULT_TIMEOUT) -> None:
        """Download ``remote`` to ``local`` with a downloader for its scheme."""
        cls.get(remote).download(remote, local, timeout)

    def download(self, remote: str | None, local: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Download ``remote`` to ``local`` (parent directories are made).

        A file already at ``local`` is kept. Raises FileNotFoundError if ``remote`` does not exist.
        """
        if os.path.exists(local):
            return
        if remote is None:
            raise ValueError(f'Cannot download {local}: no remote given.')
        os.makedirs(os.path.dirname(local) or '.', exist_ok=True)
        download_file(remote, local, retries=0, timeout=timeout)

    def clean_up(self) -> None:
        """Release clients (nothing to release: backends are shared per process)."""


class LocalDownloader(CloudDownloader):
    """Plain paths and ``file://`` URLs."""


class S3Downloader(CloudDownloader):
    """``s3://bucket/key``."""


class SFTPDownloader(CloudDownloader):
    """``sftp://[user[:password]@]host[:port]/path``."""


class GCSDownloader(CloudDownloader):
    """``gs://bucket/key``."""


class OCIDownloader(CloudDownloader):
    """``oci://bucket@namespace/key``."""


class AzureDownloader(CloudDownloader):
    """``azure://account/container/blob``."""


class AzureDataLakeDownloader(CloudDownloader):
    """``azure-dl://filesystem/path``."""


class HFDownloader(CloudDownloader):
    """``hf://datasets/org/repo/path``."""


class DatabricksUnityCatalogDownloader(CloudDownloader):
    """``dbfs:/Volumes/...``."""


class DBFSDownloader(CloudDownloader):
    """``dbfs:/...``."""


class AlipanDownloader(CloudDownloader):
    """``alipan:///path`` (no backend in this library: downloading raises)."""


_DOWNLOADERS: dict[str, type[CloudDownloader]] = {
    '': LocalDownloader, 'file': LocalDownloader, 's3': S3Downloader, 'sftp': SFTPDownloader,
    'gs': GCSDownloader, 'oci': OCIDownloader, 'azure': AzureDownloader,
    'azure-dl': AzureDataLakeDownloader, 'hf': HFDownloader, 'dbfs': DBFSDownloader,
    'alipan': AlipanDownloader,
}
