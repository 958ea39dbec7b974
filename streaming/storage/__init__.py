"""Where shards live: one small module per URL scheme, looked up through ``registry``.

``download_file`` and ``upload_file`` are the trustworthy transfers every backend shares.
"""

from streaming.storage.download import DownloadConfig, download_file
from streaming.storage.errors import (
                                      CorruptDownloadError,
                                      DiskFullError,
                                      DownloadError,
                                      MissingDependencyError,
                                      UploadError,
)
from streaming.storage.registry import (
                                      Backend,
                                      ObjectInfo,
                                      Response,
                                      get_backend,
                                      parse_url,
                                      register_backend,
)
from streaming.storage.upload import Uploader, upload_file

__all__ = ['Backend', 'CorruptDownloadError', 'DiskFullError', 'DownloadConfig', 'DownloadError',
           'MissingDependencyError', 'ObjectInfo', 'Response', 'UploadError', 'Uploader',
           'download_file', 'get_backend', 'parse_url', 'register_backend', 'upload_file']
