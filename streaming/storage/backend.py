"""``Backend``: the base class of every storage backend (one per URL scheme).

A backend implements the raw, single-attempt operations (``read``, ``stat``, ``upload``,
``list``); the shared transfer layer adds retries, timeouts, atomic writes, ranged parallel
downloads, resume and checks. See ``docs/extending/backend.md`` for a worked example.
"""

from __future__ import annotations

from streaming.storage.download import download_streamed
from streaming.storage.objects import ObjectInfo, Response

__all__ = ['Backend', 'ObjectInfo', 'Response']


class Backend:
    """An object store reached through URLs of one scheme.

    Implement ``read`` (a streamed, optionally ranged GET), ``stat``, ``upload`` and ``list``.
    :func:`streaming.storage.download_file` builds trustworthy downloads on ``read`` and
    ``stat``; ``download`` (below) is the same, with the default retries.

    A backend that cannot stream may instead override ``download`` to fetch a whole file in one
    attempt; the shared layer then wraps that with the same retries, timeout and atomic rename.
    """

    scheme: str = ''

    def check_credentials(self) -> None:
        """Raise ``MissingCredentialsError`` now if the environment gives no way to authenticate.

        An uploader calls it when it is made, as the reference checks on creation. No request
        is made. Default: nothing to check.
        """

    def warm_up(self, timeout: float) -> None:
        """Import (and build, per process) what a first request with ``timeout`` needs.

        No request is made. The thread building a dataset calls it so that download threads
        never import a module for the first time (see ``streaming.cache.preload``).
        """

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        """GET bytes ``[start, end)`` of ``url`` (to the end if ``end`` is None).

        ``etag``, when given, must match or the call fails (the object changed). Raises
        FileNotFoundError for a missing object and PermissionError when access is denied.
        """
        raise NotImplementedError(f'{type(self).__name__} does not implement read().')

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        """Size and ETag of ``url``; FileNotFoundError if missing."""
        raise NotImplementedError(f'{type(self).__name__} does not implement stat().')

    def upload(self, local_path: str, url: str) -> None:
        """Send one local file to ``url`` (a single attempt; callers retry)."""
        raise NotImplementedError(f'{type(self).__name__} does not implement upload().')

    def list(self, url: str) -> list[str]:
        """URLs of the objects under ``url`` (a prefix)."""
        raise NotImplementedError(f'{type(self).__name__} does not implement list().')

    def download(self, url: str, local_path: str, timeout: float | None = None) -> None:
        """Fetch ``url`` to ``local_path`` atomically, with the default retries and timeout."""
        download_streamed(self, url, local_path, timeout=60.0 if timeout is None else timeout)

    def stalls_time_out(self, url: str) -> bool:
        """Whether a request for ``url`` would now end by itself after ``timeout`` s without data.

        True where every operation of its socket carries the timeout: the request then runs in
        the caller's thread, with no watchdog thread (``watchdog.run_watched(inline=True)``).
        """
        return False

    @property
    def can_read(self) -> bool:
        """Whether this backend implements ``read``."""
        return type(self).read is not Backend.read

    @property
    def streams(self) -> bool:
        """Whether downloads go through ``read`` (else through an overridden ``download``)."""
        return type(self).download is Backend.download and self.can_read

    def __repr__(self) -> str:
        return f'{type(self).__name__}(scheme={self.scheme!r})'
