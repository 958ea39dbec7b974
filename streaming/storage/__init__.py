"""Where shards live: one small module per URL scheme, looked up through ``registry``.

``download_file`` and ``upload_file`` are the trustworthy transfers every backend shares;
``Backend`` is the base class of a backend (see ``docs/extending/backend.md``).
"""

from streaming.storage.backend import Backend
from streaming.storage.download import DownloadConfig, download_file, fetch_bytes
from streaming.storage.errors import (
                                      CorruptDownloadError,
                                      DiskFullError,
                                      DownloadError,
                                      MissingDependencyError,
                                      TransientError,
                                      UploadError,
)
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.registry import get_backend, is_remote_url, parse_url, register_backend
from streaming.storage.retry import RetryPolicy
from streaming.storage.upload import Uploader, upload_file
from streaming.storage.verify import hash_check

__all__ = ['Backend', 'CorruptDownloadError', 'DiskFullError', 'DownloadConfig', 'DownloadError',
           'MissingDependencyError', 'ObjectInfo', 'Response', 'RetryPolicy', 'TransientError',
           'UploadError', 'Uploader', 'download_file', 'fetch_bytes', 'get_backend',
           'hash_check', 'is_remote_url', 'parse_url', 'register_backend', 'upload_file']
