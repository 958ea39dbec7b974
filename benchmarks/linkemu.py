"""A network link on loopback: a reverse HTTP proxy in front of an S3 server (moto).

Real object stores answer a GET after 20-100 ms, carry 10-90 MB/s on one connection, and share
the node's link among all its downloads. This proxy imposes the same three things on traffic to
a local S3 server, so remote benchmarks measure concurrency and timing rather than loopback
copies:

* **time to first byte**: a response's first byte leaves ``ttfb`` seconds after its request
  arrived (or later, if the server itself is slower);
* **per-connection rate**: one token bucket per client connection;
* **link rate**: one token bucket shared by every connection.

Clients point ``S3_ENDPOINT_URL`` (or their SDK's endpoint) at ``LinkEmulator.endpoint``. The
proxy keeps one upstream connection per client connection and passes requests and responses
through unchanged (uploads are not throttled). It counts what crosses it: requests by method
(GET, ranged GET, HEAD, ...), body bytes, connections, and transfers in flight (max and
time-weighted mean over the busy span), readable as JSON at ``GET /__linkemu__/stats`` and reset
by ``POST /__linkemu__/reset`` (``LinkEmulator.stats()`` / ``.reset()``).

The proxy is one asyncio process: on 2 cores it is itself the first bottleneck (~0.7 of a
96 MB/s link). ``benchmarks.linkemu_kernel`` shapes the same profiles in the kernel (moto in a
network namespace, htb on its veth) and is what ``--self-check`` and ``link_bench`` use when it
can be set up (``--mode``). ``--self-check`` starts moto and the link and prints what the link
really delivers, with one and with many connections::

    .venv/bin/python -m benchmarks.linkemu --self-check --profile same-region [--mode proxy]
    .venv/bin/python -m benchmarks.linkemu serve --upstream http://127.0.0.1:PORT --port 8123
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, replace
from typing import Any
from urllib.parse import urlparse

from benchmarks.s3 import ServerProcess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTROL = '/__linkemu__/'
# Seconds of rate a bucket may send at once: absorbs late wake-ups of a loaded machine without
# raising the long-run rate above the cap.
BURST = 0.05  # Not a valid S3 bucket name: never collides with a real request.


@dataclass(frozen=True)
class Profile:
    """A link: seconds to first byte, bytes/s per connection, bytes/s for the whole link."""

    ttfb: float
    conn_rate: float
    link_rate: float

    @property
    def chunk(self) -> int:
        """Bytes sent per step: ~10 ms of one connection's rate, 16 KiB to 1 MiB."""
        return int(min(max(self.conn_rate / 100, 16 << 10), 1 << 20))


PROFILES = {
    'same-region': Profile(0.040, 12e6, 96e6),
    'cross-region': Profile(0.100, 8e6, 200e6),
    'big-node': Profile(0.020, 80e6, 1e9),
    # No latency, no caps: the proxy's counting only, for the CPU ceiling of a case.
    'uncapped': Profile(0.0, 1e12, 1e12),
}


class Bucket:
    """A token bucket kept as the time its queue drains; ``burst`` bytes may go at once."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.slack = rate, burst / rate
        self.free_at = 0.0

    def delay(self, nbytes: int, now: float) -> float:
        """Reserve ``nbytes``; seconds to wait before sending them."""
        self.free_at = max(self.free_at, now) + nbytes / self.rate
        return max(0.0, self.free_at - now - self.slack)


class Counters:
    """What crossed the proxy since the last reset."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests: dict[str, int] = {}
        self.bytes_out = self.bytes_in = 0
        self.connections = self.open_connections = self.max_connections = 0
        self.in_flight = self.max_in_flight = 0
        self.area = 0.0  # Integral of transfers in flight over time.
        self.changed_at = self.first_start = self.last_end = None  # type: float | None
        self.first_request_wall: float | None = None
        self.records: list[tuple[float, float, float, int, str]] = []

    def _tick(self, now: float) -> None:
        if self.changed_at is not None:
            self.area += self.in_flight * (now - self.changed_at)
        self.changed_at = now

    def begin(self, method: str, ranged: bool, now: float) -> None:
        key = 'GET_RANGE' if method == 'GET' and ranged else method
        self.requests[key] = self.requests.get(key, 0) + 1
        self._tick(now)
        if self.first_start is None:
            self.first_start, self.first_request_wall = now, time.time()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def end(self, start: float, first: float, now: float, nbytes: int, what: str) -> None:
        self._tick(now)
        self.in_flight -= 1
        self.last_end = now
        self.records.append((start, first, now, nbytes, what))

    def summary(self, records: bool = False) -> dict[str, Any]:
        now = time.monotonic()
        span = 0.0
        area = self.area + (self.in_flight * (now - self.changed_at) if self.changed_at else 0)
        if self.first_start is not None:
            span = (now if self.in_flight else (self.last_end or now)) - self.first_start
        gets = [r for r in self.records if r[4].startswith('GET')]
        out = {
            'requests': dict(self.requests),
            'get_requests': self.requests.get('GET', 0) + self.requests.get('GET_RANGE', 0),
            'head_requests': self.requests.get('HEAD', 0),
            'bytes_out': self.bytes_out, 'bytes_in': self.bytes_in,
            'connections': self.connections, 'max_connections': self.max_connections,
            'max_in_flight': self.max_in_flight,
            'mean_in_flight': area / span if span > 0 else 0.0,
            'busy_span_s': span,
            'first_request_wall': self.first_request_wall,
            'median_ttfb_s': statistics.median(r[1] - r[0] for r in gets) if gets else None,
        }
        if records:
            base = self.first_start or 0.0
            out['records'] = [(a - base, b - base, c - base, n, w)
                              for a, b, c, n, w in self.records]
        return out


# ---- the proxy -------------------------------------------------------------------------------
def _parse_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode('latin-1').split('\r\n')
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(':')
            headers.append((name.strip(), value.strip()))
    return lines[0], headers


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    name = name.lower()
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _head_bytes(first: str, headers: list[tuple[str, str]]) -> bytes:
    return (first + '\r\n' + ''.join(f'{k}: {v}\r\n' for k, v in headers) + '\r\n').encode(
        'latin-1')


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body, de-chunked."""
    parts = []
    while True:
        size = int((await reader.readuntil(b'\r\n')).split(b';')[0], 16)
        if size == 0:
            while (await reader.readuntil(b'\r\n')) != b'\r\n':
                pass
            return b''.join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


class Proxy:
    """The asyncio reverse proxy: one instance per process, serving many connections."""

    def __init__(self, upstream: str, profile: Profile) -> None:
        parsed = urlparse(upstream)
        self.host, self.port = parsed.hostname or '127.0.0.1', parsed.port or 80
        self.profile = profile
        self.link = Bucket(profile.link_rate, max(profile.link_rate * BURST, 2 * profile.chunk))
        self.counters = Counters()

    async def serve(self, port: int, ready: Any = None) -> None:
        server = await asyncio.start_server(self.handle, '127.0.0.1', port, limit=1 << 20,
                                            backlog=1024)
        if ready is not None:
            ready(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        c = self.counters
        c.connections += 1
        c.open_connections += 1
        c.max_connections = max(c.max_connections, c.open_connections)
        writer.transport.set_write_buffer_limits(high=self.profile.chunk)
        rate = self.profile.conn_rate
        conn = Bucket(rate, max(rate * BURST, self.profile.chunk))
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b'\r\n\r\n')
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                keep, upstream = await self.exchange(head, reader, writer, conn, upstream)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        finally:
            c.open_connections -= 1
            for w in (writer, upstream[1] if upstream else None):
                if w is not None:
                    w.close()

    async def exchange(self, head: bytes, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, conn: Bucket, upstream: Any) -> tuple:
        """One request and its response; (keep the client connection, upstream pair)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        first, headers = _parse_head(head)
        method, target = first.split(' ', 2)[:2]
        if target.startswith(CONTROL):
            await self.control(method, target, reader, headers, writer)
            return True, upstream
        if (_header(headers, 'expect') or '').lower() == '100-continue':
            headers = [(k, v) for k, v in headers if k.lower() != 'expect']
            writer.write(b'HTTP/1.1 100 Continue\r\n\r\n')
        body = b''
        if (_header(headers, 'transfer-encoding') or '').lower() == 'chunked':
            body = await _read_chunked(reader)
            headers = [(k, v) for k, v in headers if k.lower() != 'transfer-encoding']
            headers.append(('Content-Length', str(len(body))))
        elif _header(headers, 'content-length'):
            body = await reader.readexactly(int(_header(headers, 'content-length') or 0))
        self.counters.bytes_in += len(body)
        self.counters.begin(method, _header(headers, 'range') is not None, start)
        sent, first_at = 0, start
        what = f'{method}{" range" if _header(headers, "range") else ""} {target}'
        try:
            up_head = None
            for attempt in range(2):  # A kept-alive upstream connection may have closed.
                if upstream is None:
                    upstream = await asyncio.open_connection(self.host, self.port,
                                                             limit=1 << 20)
                try:
                    upstream[1].write(_head_bytes(first, headers) + body)
                    await upstream[1].drain()
                    up_head = await upstream[0].readuntil(b'\r\n\r\n')
                    break
                except (ConnectionError, asyncio.IncompleteReadError):
                    upstream[1].close()
                    upstream = None
                    if attempt:
                        raise
            status_line, out_headers = _parse_head(up_head)  # type: ignore[arg-type]
            status = int(status_line.split(' ', 2)[1])
            delay = start + self.profile.ttfb - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            first_at = loop.time()
            writer.write(up_head)  # type: ignore[arg-type]
            up_reader = upstream[0]
            close_after = (_header(out_headers, 'connection') or '').lower() == 'close'
            if method == 'HEAD' or status in (204, 304) or 100 <= status < 200:
                await writer.drain()
            elif (_header(out_headers, 'transfer-encoding') or '').lower() == 'chunked':
                data = await _read_chunked(up_reader)
                sent = await self.send(b'%x\r\n' % len(data) + data + b'\r\n0\r\n\r\n'
                                       if data else b'0\r\n\r\n', writer, conn)
            elif _header(out_headers, 'content-length') is not None:
                left = int(_header(out_headers, 'content-length') or 0)
                while left:
                    data = await up_reader.read(min(left, self.profile.chunk))
                    if not data:
                        raise ConnectionError('upstream closed mid-body')
                    left -= len(data)
                    sent += await self.send(data, writer, conn)
            else:  # Body until the server closes.
                while data := await up_reader.read(self.profile.chunk):
                    sent += await self.send(data, writer, conn)
                close_after = True
            if close_after:
                upstream[1].close()
                upstream = None
            keep = (_header(headers, 'connection') or '').lower() != 'close' and \
                not (close_after and _header(out_headers, 'content-length') is None)
            return keep, upstream
        finally:
            self.counters.end(start, first_at, loop.time(), sent, what)

    async def send(self, data: bytes, writer: asyncio.StreamWriter, conn: Bucket) -> int:
        """Write ``data`` to the client, paced by the connection's and the link's buckets."""
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        step = self.profile.chunk
        for at in range(0, len(view), step):
            piece = view[at:at + step]
            wait = conn.delay(len(piece), loop.time())
            if wait > 0:
                await asyncio.sleep(wait)
            wait = self.link.delay(len(piece), loop.time())
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(piece)
            await writer.drain()
            self.counters.bytes_out += len(piece)
        return len(data)

    async def control(self, method: str, target: str, reader: asyncio.StreamReader,
                      headers: list[tuple[str, str]], writer: asyncio.StreamWriter) -> None:
        length = int(_header(headers, 'content-length') or 0)
        if length:
            await reader.readexactly(length)
        if target.startswith(CONTROL + 'reset') and method == 'POST':
            self.counters.reset()
            payload: dict[str, Any] = {'reset': True}
        else:
            payload = self.counters.summary(records='records=1' in target)
            payload['profile'] = asdict(self.profile)
        data = json.dumps(payload).encode()
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
                     b'Content-Length: %d\r\n\r\n' % len(data) + data)
        await writer.drain()


# ---- the process wrapper -----------------------------------------------------------------------
def profile_from_args(name: str | None, ttfb: float | None = None, conn_rate: float | None = None,
                      link_rate: float | None = None) -> Profile:
    """A named profile with any of its three values replaced."""
    profile = PROFILES[name or 'same-region']
    changes = {k: v for k, v in (('ttfb', ttfb), ('conn_rate', conn_rate),
                                 ('link_rate', link_rate)) if v is not None}
    return replace(profile, **changes)


class LinkEmulator(ServerProcess):
    """``with LinkEmulator(upstream, profile) as link:`` the proxy in its own process.

    ``link.endpoint`` is the URL for clients; ``stats()`` and ``reset()`` read and clear its
    counters.
    """

    def __init__(self, upstream: str, profile: Profile) -> None:
        self.upstream, self.profile = upstream, profile
        self.endpoint = ''
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> LinkEmulator:
        p = self.profile
        self._process = subprocess.Popen(
            [sys.executable, '-m', 'benchmarks.linkemu', 'serve', '--upstream', self.upstream,
             '--port', '0', '--ttfb', str(p.ttfb), '--conn-rate', str(p.conn_rate),
             '--link-rate', str(p.link_rate)],
            cwd=REPO, stdout=subprocess.PIPE, text=True)
        line = self._process.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith('LINKEMU_PORT '):
            self.close()
            raise RuntimeError(f'the link emulator did not start (said {line!r})')
        self.endpoint = f'http://127.0.0.1:{int(line.split()[1])}'
        return self

    def stats(self, records: bool = False) -> dict[str, Any]:
        url = f'{self.endpoint}{CONTROL}stats{"?records=1" if records else ""}'
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())

    def reset(self) -> None:
        request = urllib.request.Request(f'{self.endpoint}{CONTROL}reset', data=b'',
                                         method='POST')
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()


def serve(upstream: str, port: int, profile: Profile) -> None:
    """Run the proxy in this process until killed; prints ``LINKEMU_PORT <port>`` when ready."""
    def ready(bound: int) -> None:
        print(f'LINKEMU_PORT {bound}', flush=True)

    asyncio.run(Proxy(upstream, profile).serve(port, ready))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('command', nargs='?', choices=['serve'], help='run the proxy')
    parser.add_argument('--self-check', action='store_true')
    parser.add_argument('--profile', choices=sorted(PROFILES), default='same-region')
    parser.add_argument('--upstream', help='the S3 server to proxy (serve)')
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--ttfb', type=float, help='seconds; overrides the profile')
    parser.add_argument('--conn-rate', type=float, help='bytes/s; overrides the profile')
    parser.add_argument('--link-rate', type=float, help='bytes/s; overrides the profile')
    parser.add_argument('--seconds', type=float, default=2.0, help='self-check transfer length')
    parser.add_argument('--connections', type=int, help='self-check parallel connections')
    parser.add_argument('--json', action='store_true', help='self-check: print JSON')
    parser.add_argument('--mode', choices=['auto', 'kernel', 'proxy'], default='auto',
                        help='self-check: the kernel link (netns + tc, benchmarks.linkemu_kernel),'
                             ' this proxy, or the kernel one when it can be set up')
    args = parser.parse_args(argv)
    profile = profile_from_args(args.profile, args.ttfb, args.conn_rate, args.link_rate)
    if args.command == 'serve':
        if not args.upstream:
            parser.error('serve needs --upstream')
        serve(args.upstream, args.port, profile)
    elif args.self_check:
        from benchmarks.linkemu_check import report, self_check
        check = self_check(profile, args.seconds, args.connections, args.mode)
        print(json.dumps(check) if args.json else report(check))
    else:
        parser.error('give serve or --self-check')


if __name__ == '__main__':
    main()
