"""GETs of big objects served straight from moto's store, a range at the cost of the range.

moto (5.x) answers every GET, ranged or not, by reading the whole object into memory and then
slicing it (``FakeKey.value``, ``S3Response._handle_range_header``): a 16 MB part of a 1 GiB
shard costs moto 1 GiB of reads and memory, so 24 parts in flight would need 24 GiB and the
emulated store, not the link, would set the pace. A real store reads only the range. For
objects of at least ``THRESHOLD`` bytes, ``serve`` answers a plain object GET (path style, no
query string) itself: ``os.pread`` from the file moto spooled the object to, in ``CHUNK``
slices, with the headers an S3 GET has (ETag, Last-Modified, Content-Length, Content-Range on a
206). Anything else (smaller objects, HEAD, listings, a range it cannot satisfy) goes to moto.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Iterator

THRESHOLD = 64 << 20
CHUNK = 1 << 20
_RANGE = re.compile(r'bytes=(\d*)-(\d*)$')


def _find_key(path: str) -> Any:
    """moto's key for ``/bucket/key`` (None if there is none)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    bucket_name, _, key_name = path.lstrip('/').partition('/')
    if not key_name:
        return None
    try:
        bucket = s3_backends[DEFAULT_ACCOUNT_ID]['aws'].buckets.get(bucket_name)
    except KeyError:
        return None
    return None if bucket is None else bucket.keys.get(key_name)


def _span(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single-range header, or None if moto should answer."""
    if header is None:
        return 0, size - 1
    match = _RANGE.match(header.strip())
    if not match or not (match.group(1) or match.group(2)):
        return None
    if match.group(1):
        first = int(match.group(1))
        last = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
    else:
        first, last = max(0, size - int(match.group(2))), size - 1
    return (first, last) if first <= last else None


def _chunks(fd: int, first: int, last: int) -> Iterator[bytes]:
    offset = first
    while offset <= last:
        data = os.pread(fd, min(CHUNK, last + 1 - offset), offset)
        if not data:
            return
        offset += len(data)
        yield data


def serve(environ: dict[str, Any], start_response: Callable) -> Iterator[bytes] | None:
    """The response to a GET of a big object, or None for moto to answer the request."""
    if environ.get('REQUEST_METHOD') != 'GET' or environ.get('QUERY_STRING'):
        return None
    key = _find_key(environ.get('PATH_INFO', ''))
    if key is None or key.size < THRESHOLD:
        return None
    size = key.size
    span = _span(environ.get('HTTP_RANGE'), size)
    if span is None:
        return None
    with key.lock:
        etag, fd = key.etag, key._value_buffer.fileno()  # Spooled to a file (above 5 MB).
    first, last = span
    headers = [('Content-Type', 'binary/octet-stream'), ('ETag', etag),
               ('Last-Modified', key.last_modified_RFC1123), ('Accept-Ranges', 'bytes'),
               ('Content-Length', str(last + 1 - first))]
    if 'HTTP_RANGE' in environ:
        headers.append(('Content-Range', f'bytes {first}-{last}/{size}'))
    start_response('206 Partial Content' if 'HTTP_RANGE' in environ else '200 OK', headers)
    return _chunks(fd, first, last)
