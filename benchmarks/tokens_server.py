"""A loopback object server for the token benchmarks: S3's GET/HEAD on files of a directory.

``/BUCKET/KEY`` serves ``root/KEY`` (any bucket), ranges at the cost of the range, with the
two limits object stores have: ``per_connection`` bytes/s on each response, and ``aggregate``
bytes/s shared by all responses (a token bucket). Requests are not authenticated, so boto3 (and
our S3 backend) talk to it with any credentials. Built on the storage tests' loopback server.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from urllib.parse import unquote, urlparse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.storage import servers  # noqa: E402

SLICE = 256 << 10


class Limits:
    """Per-connection and aggregate bandwidth caps (0: none)."""

    def __init__(self, per_connection: float, aggregate: float) -> None:
        self.per_connection, self.aggregate = per_connection, aggregate
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def take(self, size: int) -> None:
        """Wait for ``size`` bytes of the aggregate budget."""
        if not self.aggregate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + size / self.aggregate
        if start > now:
            time.sleep(start - now)


class _Handler(servers.Quiet):
    def _owner(self) -> ObjectServer:
        return self.server.owner  # type: ignore[attr-defined]

    def _path(self) -> str | None:
        parts = unquote(urlparse(self.path).path).lstrip('/').split('/', 1)
        if len(parts) < 2:
            return None
        root = self._owner().root
        path = os.path.realpath(os.path.join(root, parts[1]))
        return path if path.startswith(root) and os.path.isfile(path) else None

    def _missing(self) -> None:
        body = b'<?xml version="1.0"?><Error><Code>NoSuchKey</Code></Error>'
        self.send_response(404)
        self.send_header('Content-Type', 'application/xml')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)

    def _etag(self, path: str) -> str:
        stat = os.stat(path)
        return '"' + hashlib.md5(f'{stat.st_size}:{stat.st_mtime_ns}'.encode()).hexdigest() + '"'

    def do_HEAD(self) -> None:  # noqa: N802
        path = self._path()
        if path is None:
            return self._missing()
        self.send_response(200)
        self.send_header('Content-Length', str(os.path.getsize(path)))
        self.send_header('ETag', self._etag(path))
        self.send_header('Accept-Ranges', 'bytes')
        self.send_header('Last-Modified', self.date_time_string(int(os.path.getmtime(path))))
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        path = self._path()
        if path is None:
            return self._missing()
        size = os.path.getsize(path)
        start, end = 0, size
        spec = self.headers.get('Range')
        if spec:
            first, _, last = spec.removeprefix('bytes=').partition('-')
            start, end = int(first), min(size, int(last) + 1 if last else size)
            self.send_response(206)
            self.send_header('Content-Range', f'bytes {start}-{end - 1}/{size}')
        else:
            self.send_response(200)
        self.send_header('Content-Length', str(end - start))
        self.send_header('ETag', self._etag(path))
        self.send_header('Last-Modified', self.date_time_string(int(os.path.getmtime(path))))
        self.end_headers()
        limits = self._owner().limits
        began = time.monotonic()
        try:
            with open(path, 'rb') as f:
                for offset in range(start, end, SLICE):
                    n = min(SLICE, end - offset)
                    limits.take(n)
                    self.wfile.write(os.pread(f.fileno(), n, offset))
                    if limits.per_connection:
                        ahead = (offset - start + n) / limits.per_connection - \
                            (time.monotonic() - began)
                        if ahead > 0:
                            time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError):
            pass  # The client went away (e.g. a cancelled part).


class ObjectServer(servers.Threaded):
    """Serve ``root`` on a free loopback port until ``stop()``."""

    def __init__(self, root: str, per_connection: float = 0, aggregate: float = 0) -> None:
        self.root = os.path.realpath(root)
        self.limits = Limits(per_connection, aggregate)
        super().__init__(_Handler)


def main() -> None:
    """``python benchmarks/tokens_server.py ROOT PER_CONNECTION AGGREGATE``: prints the URL."""
    server = ObjectServer(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
    print(server.url, flush=True)
    try:
        sys.stdin.read()  # Until the parent closes our stdin.
    finally:
        server.stop()


if __name__ == '__main__':
    main()
