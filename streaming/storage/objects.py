"""What a backend hands the transfer layer: object metadata, open bodies, and its interface.

The download layer is written against ``ObjectStore`` (an interface), not against the
``Backend`` base class, so the layers import in one direction only:
``objects`` <- ``registry`` <- download layer <- ``backend`` <- the backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol

__all__ = ['ObjectInfo', 'ObjectStore', 'Response']


@dataclass(frozen=True)
class ObjectInfo:
    """What a remote object is: its size in bytes and a version tag (ETag) when known."""

    size: int | None
    etag: str | None = None


@dataclass
class Response:
    """An open GET: what was returned and an iterator over the body's chunks."""

    info: ObjectInfo
    chunks: Iterator[bytes]

    def close(self) -> None:
        """Release the body (an open file, a connection) whether or not it was read."""
        close = getattr(self.chunks, 'close', None)
        if close is not None:
            close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ObjectStore(Protocol):
    """The operations the transfer layer uses (``streaming.storage.Backend`` implements them)."""

    scheme: str

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response: ...

    def stat(self, url: str, *, timeout: float) -> ObjectInfo: ...

    def upload(self, local_path: str, url: str) -> None: ...

    def list(self, url: str) -> list[str]: ...

    def download(self, url: str, local_path: str, timeout: float | None = None) -> None: ...

    @property
    def streams(self) -> bool:
        """Whether downloads go through ``read`` (else through ``download``)."""
        ...

    @property
    def can_read(self) -> bool:
        """Whether ``read`` is implemented."""
        ...
