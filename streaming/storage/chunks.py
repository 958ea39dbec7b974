"""Reading a byte range of an open file-like object in chunks (local, sftp and fsspec backends)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

__all__ = ['handle_chunks']

CHUNK = 1 << 20


def handle_chunks(handle: Any, start: int, end: int | None, errors: tuple[type, ...],
                  translate: Callable[[BaseException], BaseException]) -> Iterator[bytes]:
    """Bytes ``[start, end)`` of ``handle`` (already at ``start``), then close it.

    An error of a type in ``errors`` is raised as ``translate(error)``.
    """
    left = None if end is None else end - start
    try:
        while left is None or left > 0:
            data = handle.read(CHUNK if left is None else min(CHUNK, left))
            if not data:
                return
            if left is not None:
                left -= len(data)
            yield data
    except errors as error:
        raise translate(error) from error
    finally:
        handle.close()
