"""A tiny S3 stub on loopback for ``benchmarks.transport_bench``'s behaviour probes.

Path-style GETs of ``/BUCKET/KEY``; what a key's first segment asks for:

- ``throttle/...``: the first two requests answer ``503 SlowDown`` with ``Retry-After: 1``, the
  next ones the object (64 KiB);
- ``reset/...``: every request gets the headers of a 1 MiB object, half the body, then a TCP
  reset (``SO_LINGER`` 0);
- anything else: the object (64 KiB), ranges honoured.

It counts requests per key and records the access key of each request's SigV4
``Authorization`` (``None`` when unsigned), which is how the probes see which credential chain a
client followed. The stub does not check signatures: moto's and the real stores' checks are not
what is probed here.
"""

from __future__ import annotations

import hashlib
import re
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

SMALL = bytes(range(256)) * 256  # 64 KiB
BIG = 1 << 20
SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')
_CREDENTIAL = re.compile(r'Credential=([^/,\s]+)/')


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(head=True)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(head=False)

    def _answer(self, head: bool) -> None:
        key = self.path.split('?')[0].split('/', 2)[-1]
        seen = self.server.record(key, self.headers.get('Authorization'))
        kind = key.split('/')[0]
        if kind == 'throttle' and seen <= 2:
            self.send_response(503)
            self.send_header('Retry-After', '1')
            self.send_header('Content-Type', 'application/xml')
            self.send_header('Content-Length', str(len(SLOWDOWN)))
            self.end_headers()
            if not head:
                self.wfile.write(SLOWDOWN)
            return
        body = bytes(BIG) if kind == 'reset' else SMALL
        status, start, end = 200, 0, len(body)
        match = re.fullmatch(r'bytes=(\d+)-(\d*)', self.headers.get('Range', ''))
        if match:
            status, start = 206, int(match.group(1))
            end = min(int(match.group(2)) + 1, len(body)) if match.group(2) else len(body)
        self.send_response(status)
        self.send_header('Content-Length', str(end - start))
        self.send_header('ETag', f'"{hashlib.md5(body).hexdigest()}"')
        self.send_header('Last-Modified', 'Sat, 01 Nov 2025 00:00:00 GMT')
        if status == 206:
            self.send_header('Content-Range', f'bytes {start}-{end - 1}/{len(body)}')
        self.end_headers()
        if head:
            return
        if kind == 'reset':
            self.wfile.write(body[start:start + (end - start) // 2])
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack('ii', 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        self.wfile.write(body[start:end])


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(('127.0.0.1', 0), _Handler)
        self.lock = threading.Lock()
        self.seen: dict[str, list[str | None]] = {}

    def record(self, key: str, authorization: str | None) -> int:
        """Note one request for ``key``; how many it has had, this one included."""
        match = _CREDENTIAL.search(authorization or '')
        with self.lock:
            self.seen.setdefault(key, []).append(match.group(1) if match else None)
            return len(self.seen[key])


class StubS3:
    """``with StubS3('bucket') as stub:`` ``stub.endpoint``; ``requests(key)``, ``access_keys``."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self._server = _Server()
        self.endpoint = f'http://127.0.0.1:{self._server.server_address[1]}'
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> StubS3:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()

    def requests(self, key: str) -> int:
        """How many requests ``key`` received."""
        with self._server.lock:
            return len(self._server.seen.get(key, []))

    def access_keys(self, key: str) -> list[str | None]:
        """The distinct access keys ``key``'s requests were signed with (None: unsigned)."""
        with self._server.lock:
            return list(dict.fromkeys(self._server.seen.get(key, [])))
