"""Errors of the storage layer; each is also a builtin exception users already catch."""

from __future__ import annotations

from streaming.errors import ShardFileError, StreamingError

__all__ = ['DownloadError', 'CorruptDownloadError', 'DiskFullError', 'TransientError',
           'ChangedWhileReadError', 'UploadError', 'MissingCredentialsError',
           'MissingDependencyError', 'UnavailableSchemeError']


class DownloadError(StreamingError, RuntimeError):
    """A download failed on every attempt; the message names the URL and the last cause."""


class CorruptDownloadError(DownloadError, ShardFileError):
    """Every attempt delivered bytes of the wrong size or checksum."""


class DiskFullError(StreamingError, OSError):
    """The local disk has no room for a download; nothing partial is left behind."""


class MissingDependencyError(StreamingError, ImportError):
    """A URL scheme needs an optional SDK that is not installed."""


class UnavailableSchemeError(MissingDependencyError, ValueError):
    """A URL scheme with no backend here whose fsspec implementation is not installed.

    E.g. ``gcs://`` without gcsfs. Also the ``ValueError`` the reference raises for a scheme it
    does not know.
    """


class MissingCredentialsError(StreamingError, ValueError):
    """A URL's service has no credentials to use; raised at once, never retried.

    E.g. ``gs://`` with neither HMAC keys nor application default credentials. A
    ``ValueError``, as in the reference.
    """


class TransientError(StreamingError, IOError):
    """A failure worth retrying (throttling, a 5xx, a broken body); may carry Retry-After."""

    def __init__(self, message: str, retry_after: float | None = None,
                 throttled: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.throttled = throttled


class ChangedWhileReadError(TransientError):
    """A local file's size or modification time changed while it was being read.

    Retried: the next attempt reads (and checks) the new version as a whole.
    """


class UploadError(StreamingError, RuntimeError):
    """An upload failed on every attempt; the message names the URL and the last cause."""
