"""Servers on 127.0.0.1 for the storage tests: emulators, the OCI fake and the fault proxy.

Every server listens on a free port on loopback and is stopped by the fixture that started it.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, unquote, urlparse

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f'server exited with status {proc.returncode} before listening')
        with contextlib.suppress(OSError), socket.create_connection(('127.0.0.1', port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f'nothing listened on 127.0.0.1:{port} within {timeout}s')


class Process:
    """A server subprocess on a free port, retried if the port was taken meanwhile."""

    def __init__(self, make_cmd: Callable[[int], list[str]], name: str,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        for _ in range(3):
            self.port = free_port()
            self.log = open(os.devnull, 'wb')  # noqa: SIM115 - closed in stop().
            self.proc = subprocess.Popen(make_cmd(self.port), stdout=self.log,
                                         stderr=subprocess.STDOUT, env={**os.environ,
                                                                        **(env or {})})
            try:
                wait_for_port(self.port, self.proc)
                return
            except RuntimeError:
                self.stop()
        raise RuntimeError(f'{name} did not start')

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.port}'

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def moto_server() -> Process:
    return Process(lambda port: [sys.executable, '-c', MOTO_SERVER_CODE, '-H', '127.0.0.1', '-p',
                                 str(port)], 'moto S3 server')


# moto's server as ``python -m moto.server`` runs it, less two costs that are moto's and not S3's
# (each took about a fifth of the server's CPU, the bottleneck of the many-file index benchmark
# and of the suite's S3 tests): werkzeug's log line per request (to /dev/null here), and the
# directory scan of moto's package that its dispatcher repeats for every request (its result is
# a list of module names, the same for the server's life, so it is listed once).
MOTO_SERVER_CODE = '; '.join([
    'import logging, sys',
    'logging.getLogger("werkzeug").setLevel(logging.WARNING)',
    'from moto import backends',
    'names = tuple(backends.list_of_moto_modules())',
    'backends.list_of_moto_modules = lambda: names',
    'from moto.server import main',
    'main(sys.argv[1:])'])


def gcs_emulator() -> Process:
    binary = str(Path(sys.executable).with_name('gcp-storage-emulator'))
    return Process(lambda port: [binary, 'start', '--host', '127.0.0.1', '--port', str(port),
                                 '--in-memory', '-q'], 'gcp-storage-emulator')


def azurite_binary() -> str | None:
    candidates = [os.environ.get('AZURITE_BLOB', ''),
                  str(REPO / 'node_modules/.bin/azurite-blob'),
                  os.path.expanduser('~/.cache/shardflow/azurite/node_modules/.bin/azurite-blob'),
                  shutil.which('azurite-blob') or '']
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def azurite(workdir: str) -> Process:
    binary = azurite_binary()
    assert binary is not None
    return Process(lambda port: [binary, '--blobHost', '127.0.0.1', '--blobPort', str(port),
                                 '--location', workdir, '--silent', '--skipApiVersionCheck',
                                 '--loose'], 'azurite')


# ---- a small HTTP server base ---------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Quiet(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args: object) -> None:
        pass

    def handle(self) -> None:
        with contextlib.suppress(ConnectionError, TimeoutError, OSError):
            super().handle()


class Threaded:
    """Runs an HTTP handler class on a free loopback port in a thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = _Server(('127.0.0.1', 0), handler)
        self.server.owner = self  # type: ignore[attr-defined]
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.port}'

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---- OCI Object Storage fake ----------------------------------------------------------------
class _OCIHandler(Quiet):
    """The five Object Storage calls the OCI backend makes: HEAD, GET (ranged, If-Match), PUT,
    and list (``GET /n/{ns}/b/{bucket}/o?prefix&start``). Requests must carry an OCI signature."""

    def _owner(self) -> FakeOCI:
        return self.server.owner  # type: ignore[attr-defined]

    def _parse(self) -> tuple[str, str, str | None, dict]:
        parsed = urlparse(self.path)
        parts = parsed.path.split('/', 6)  # '', 'n', ns, 'b', bucket, 'o', name
        name = unquote(parts[6]) if len(parts) > 6 else None
        return parts[2], parts[4], name, parse_qs(parsed.query)

    def _reply(self, status: int, body: bytes = b'', headers: dict | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)

    def _signed(self) -> bool:
        auth = self.headers.get('Authorization', '')
        ok = auth.startswith('Signature ') and 'keyId="' in auth and 'signature="' in auth
        self._owner().requests.append((self.command, self.path, ok))
        if not ok:
            self._reply(401, b'{"code": "NotAuthenticated"}')
        return ok

    def _error(self, status: int, code: str) -> None:
        self._reply(status, f'{{"code": "{code}", "message": "{code}"}}'.encode(),
                    {'Content-Type': 'application/json', 'opc-request-id': 'fake'})

    def do_HEAD(self) -> None:  # noqa: N802
        if not self._signed():
            return
        ns, bucket, name, _ = self._parse()
        data = self._owner().objects.get((ns, bucket, name))
        if data is None:
            return self._error(404, 'ObjectNotFound')
        self.send_response(200)
        self.send_header('Content-Length', str(len(data)))
        self.send_header('ETag', hashlib.md5(data).hexdigest())
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        if not self._signed():
            return
        ns, bucket, name, query = self._parse()
        owner = self._owner()
        if name is None:  # List objects.
            prefix = query.get('prefix', [''])[0]
            start = query.get('start', [''])[0]
            names = sorted(n for (s, b, n) in owner.objects if s == ns and b == bucket and
                           n.startswith(prefix) and n >= start)
            page, rest = names[:2], names[2:]  # Tiny pages, so pagination is exercised.
            body = {'objects': [{'name': n, 'size': len(owner.objects[(ns, bucket, n)])}
                                for n in page], 'nextStartWith': rest[0] if rest else None}
            import json
            return self._reply(200, json.dumps(body).encode(),
                               {'Content-Type': 'application/json'})
        data = owner.objects.get((ns, bucket, name))
        if data is None:
            return self._error(404, 'ObjectNotFound')
        etag = hashlib.md5(data).hexdigest()
        if self.headers.get('if-match') not in (None, etag):
            return self._error(412, 'IfMatchFailed')
        byte_range = self.headers.get('Range')
        if byte_range:
            first, _, last = byte_range.removeprefix('bytes=').partition('-')
            start, end = int(first), int(last) + 1 if last else len(data)
            return self._reply(206, data[start:end], {
                'ETag': etag, 'Content-Range': f'bytes {start}-{end - 1}/{len(data)}',
                'Content-Type': 'application/octet-stream'})
        self._reply(200, data, {'ETag': etag, 'Content-Type': 'application/octet-stream'})

    def do_PUT(self) -> None:  # noqa: N802
        length = int(self.headers.get('Content-Length') or 0)
        data = self.rfile.read(length)
        if not self._signed():
            return
        ns, bucket, name, _ = self._parse()
        if bucket not in self._owner().buckets:
            return self._error(404, 'BucketNotFound')
        self._owner().objects[(ns, bucket, name)] = data  # type: ignore[index]
        self._reply(200, b'', {'ETag': hashlib.md5(data).hexdigest()})


class FakeOCI(Threaded):
    """A stand-in for OCI Object Storage (OCI has no emulator)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], bytes] = {}
        self.buckets: set[str] = set()
        self.requests: list[tuple[str, str, bool]] = []
        super().__init__(_OCIHandler)


# ---- the fault-injecting proxy --------------------------------------------------------------
FAULTS = ('reset', '500', '503', '429', 'stall', 'truncate', 'flip')
_HOP = {'connection', 'keep-alive', 'transfer-encoding', 'content-length', 'proxy-connection'}


class _ProxyHandler(Quiet):
    def _owner(self) -> FaultProxy:
        return self.server.owner  # type: ignore[attr-defined]

    def _forward(self) -> None:
        owner = self._owner()
        body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
        fault = owner.decide(self.command, urlparse(self.path).path)
        if fault in ('500', '503', '429'):
            code = int(fault)
            payload = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>'
                       f'{ {500: "InternalError", 503: "SlowDown", 429: "TooManyRequests"}[code]}'
                       f'</Code><Message>injected</Message></Error>').encode()
            self.send_response(code)
            if code != 500:
                self.send_header('Retry-After', owner.retry_after)
            self.send_header('Content-Type', 'application/xml')
            self.send_header('Content-Length', str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        upstream = http.client.HTTPConnection('127.0.0.1', owner.upstream_port, timeout=60)
        try:
            upstream.request(self.command, self.path, body=body or None,
                             headers={k: v for k, v in self.headers.items()
                                      if k.lower() not in _HOP | {'expect'}})
            response = upstream.getresponse()
            data = response.read()
            headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP]
            length = response.getheader('Content-Length')
        finally:
            upstream.close()
        if self.command == 'HEAD' or not data:
            fault = None
        if fault == 'flip':
            flipped = bytearray(data)
            flipped[len(flipped) // 2] ^= 0xFF
            data = bytes(flipped)
        self.send_response(response.status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header('Content-Length', length if self.command == 'HEAD' and length
                         else str(len(data)))
        self.end_headers()
        if self.command == 'HEAD':
            return
        if fault in ('reset', 'stall', 'truncate'):
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            if fault == 'stall':
                owner.stopping.wait(owner.stall_seconds)
            elif fault == 'reset':
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack('ii', 1, 0))
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR) if fault != 'reset' else None
            return
        if not owner.rate:
            self.wfile.write(data)
            return
        # Per-connection bandwidth cap, as object stores have: 1 MiB slices on a schedule.
        started = time.monotonic()
        for offset in range(0, len(data), 1 << 20):
            self.wfile.write(data[offset:offset + (1 << 20)])
            ahead = (offset + (1 << 20)) / owner.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward  # noqa: N815


class FaultProxy(Threaded):
    """A reverse proxy in front of ``upstream_port`` that injects ``rule(method, path, n)``.

    ``n`` counts earlier requests with the same method and path. Faults: ``reset`` (half the
    body, then a TCP reset), ``500``/``503``/``429`` (503 and 429 with Retry-After: 0),
    ``stall`` (half the body, then silence for ``stall_seconds``), ``truncate`` (half the body,
    then a clean close, short of Content-Length) and ``flip`` (one byte inverted).
    """

    def __init__(self, upstream_port: int,
                 rule: Callable[[str, str, int], str | None] = lambda m, p, n: None,
                 stall_seconds: float = 10.0) -> None:
        self.upstream_port = upstream_port
        self.rule = rule
        self.stall_seconds = stall_seconds
        self.retry_after = '0'
        self.rate = 0.0  # Bytes per second per response body; 0 = unlimited.
        self.stopping = threading.Event()
        self.counts: dict[tuple[str, str], int] = {}
        self.injected: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        super().__init__(_ProxyHandler)

    def decide(self, method: str, path: str) -> str | None:
        with self._lock:
            n = self.counts.get((method, path), 0)
            self.counts[(method, path)] = n + 1
            fault = self.rule(method, path, n)
            if fault:
                self.injected.append((fault, method, path))
            return fault

    def stop(self) -> None:
        self.stopping.set()
        super().stop()
