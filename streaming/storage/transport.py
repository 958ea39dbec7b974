"""HTTP details every backend shares: ranges, sizes, statuses and streamed bodies.

Pure functions over header mappings and response objects; nothing here imports an HTTP
library, so any backend can use them whatever its SDK (urllib3, requests, a vendored copy).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from streaming.storage.errors import TransientError
from streaming.storage.retry import THROTTLED_STATUSES, retry_after
from streaming.storage.secrets import redact

__all__ = ['CHUNK_SIZE', 'body_chunks', 'byte_range', 'object_size', 'status_error']

# Read size of streamed bodies: also the granularity of the download watchdog's progress.
CHUNK_SIZE = 256 << 10


def byte_range(start: int, end: int | None) -> str:
    """The ``Range`` header value for bytes ``[start, end)`` (to the end if ``end`` is None)."""
    return f'bytes={start}-{"" if end is None else end - 1}'


def object_size(content_range: str | None, content_length: str | None,
                ranged: bool) -> int | None:
    """The whole object's size from a GET's headers.

    It is the total after the slash in ``Content-Range``; a whole-object GET may give only
    ``Content-Length``. None when neither tells.
    """
    total = (content_range or '').rpartition('/')[2]
    if total.isdigit():
        return int(total)
    if not ranged and content_length:
        return int(content_length)
    return None


def status_error(url: str, status: int, headers: Mapping[str, Any] | None,
                 service: str = 'HTTP') -> Exception:
    """The exception for an unsuccessful HTTP status: missing, denied, or worth retrying.

    404/410 -> FileNotFoundError, 401/403 -> PermissionError, 412 (the object changed), 408,
    425, 429 and 5xx -> TransientError (with the ``Retry-After``, throttled for 429/503), any
    other -> ValueError. Each message names the URL (redacted) and the service.
    """
    where = redact(url)
    if status in (404, 410):
        return FileNotFoundError(f'{where}: no such object ({service} {status}).')
    if status in (401, 403):
        return PermissionError(f'{where}: access denied ({service} {status}); check the '
                               f'credentials.')
    if status == 412:
        return TransientError(f'{where} changed during the download ({service} 412).')
    if status in (408, 425, 429) or status >= 500:
        return TransientError(f'{where}: {service} answered {status}',
                              retry_after=retry_after(headers),
                              throttled=status in THROTTLED_STATUSES)
    return ValueError(f'{where}: unexpected {service} status {status}.')


def body_chunks(url: str, response: Any, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """The body of a streamed response, chunk by chunk, closed however the iteration ends.

    ``response`` is a requests-style response (its ``.raw`` is a urllib3 response) or a urllib3
    response itself. The stored bytes are returned, never decoded. A failure mid-body is a
    ``TransientError`` naming the URL (secrets redacted), so the download layer retries it.
    """
    raw = getattr(response, 'raw', None) or response
    try:
        yield from raw.stream(chunk_size, decode_content=False)
    except Exception as error:
        raise TransientError(f'{redact(url)}: {redact(error)}') from None
    finally:
        release = getattr(response, 'release_conn', None)
        if release is not None:
            release()
        else:
            response.close()
