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
import functools
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
from benchmarks.store_limits import STYLES, StoreLimits

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
        self.throttled = 0  # Requests refused by the store's budget (store_limits).
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
            'bytes_out': self.bytes_out, 'bytes_in': self.bytes_in, 'throttled': self.throttled,
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
    """The asyncio reverse proxy: one instance per process, serving many connections.

    With ``nodes`` > 1 it listens on that many ports, one per emulated node, each with its own
    link bucket and counters (its stats are those of the port asked); ``limits``
    (``store_limits.StoreLimits``) refuse requests beyond the store's budget, for all nodes
    together, and ``bucket_rate`` caps the bytes/s the store sends to all of them.
    """

    def __init__(self, upstream: str, profile: Profile, nodes: int = 1,
                 limits: StoreLimits | None = None, bucket_rate: float | None = None) -> None:
        parsed = urlparse(upstream)
        self.host, self.port = parsed.hostname or '127.0.0.1', parsed.port or 80
        self.profile, self.limits = profile, limits
        burst = max(profile.link_rate * BURST, 2 * profile.chunk)
        self.links = [Bucket(profile.link_rate, burst) for _ in range(nodes)]
        self.store = None if bucket_rate is None else \
            Bucket(bucket_rate, max(bucket_rate * BURST, 2 * profile.chunk))
        self.node_counters = [Counters() for _ in range(nodes)]
        self.link, self.counters = self.links[0], self.node_counters[0]

    async def serve(self, port: int, ready: Any = None) -> None:
        servers = []
        for node in range(len(self.links)):
            handle = functools.partial(self.handle, node=node)
            servers.append(await asyncio.start_server(handle, '127.0.0.1', port if not node
                                                      else 0, limit=1 << 20, backlog=1024))
        if ready is not None:
            ready(*[server.sockets[0].getsockname()[1] for server in servers])
        await asyncio.gather(*(server.serve_forever() for server in servers))

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     node: int = 0) -> None:
        c = self.node_counters[node]
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
                keep, upstream = await self.exchange(head, reader, writer, conn, upstream,
                                                     node)
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
                       writer: asyncio.StreamWriter, conn: Bucket, upstream: Any,
                       node: int = 0) -> tuple:
        """One request and its response; (keep the client connection, upstream pair)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        first, headers = _parse_head(head)
        method, target = first.split(' ', 2)[:2]
        counters = self.node_counters[node]
        if target.startswith(CONTROL):
            await self.control(method, target, reader, headers, writer, counters)
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
        counters.bytes_in += len(body)
        counters.begin(method, _header(headers, 'range') is not None, start)
        sent, first_at = 0, start
        what = f'{method}{" range" if _header(headers, "range") else ""} {target}'
        if self.limits is not None and method in ('GET', 'HEAD') and \
                not self.limits.admit(target, start):
            counters.throttled += 1
            await asyncio.sleep(self.profile.ttfb)
            writer.write(self.limits.refusal(target))
            await writer.drain()
            counters.end(start, loop.time(), loop.time(), 0, f'THROTTLED {what}')
            return True, upstream
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
                                       if data else b'0\r\n\r\n', writer, conn, node)
            elif _header(out_headers, 'content-length') is not None:
                left = int(_header(out_headers, 'content-length') or 0)
                while left:
                    data = await up_reader.read(min(left, self.profile.chunk))
                    if not data:
                        raise ConnectionError('upstream closed mid-body')
                    left -= len(data)
                    sent += await self.send(data, writer, conn, node)
            else:  # Body until the server closes.
                while data := await up_reader.read(self.profile.chunk):
                    sent += await self.send(data, writer, conn, node)
                close_after = True
            if close_after:
                upstream[1].close()
                upstream = None
            keep = (_header(headers, 'connection') or '').lower() != 'close' and \
                not (close_after and _header(out_headers, 'content-length') is None)
            return keep, upstream
        finally:
            counters.end(start, first_at, loop.time(), sent, what)

    async def send(self, data: bytes, writer: asyncio.StreamWriter, conn: Bucket,
                   node: int = 0) -> int:
        """Write ``data`` to the client, paced by the connection's, the node's link's and the
        store's buckets."""
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        step = self.profile.chunk
        buckets = [conn, self.links[node]] + ([self.store] if self.store else [])
        for at in range(0, len(view), step):
            piece = view[at:at + step]
            for bucket in buckets:
                wait = bucket.delay(len(piece), loop.time())
                if wait > 0:
                    await asyncio.sleep(wait)
            writer.write(piece)
            await writer.drain()
            self.node_counters[node].bytes_out += len(piece)
        return len(data)

    async def control(self, method: str, target: str, reader: asyncio.StreamReader,
                      headers: list[tuple[str, str]], writer: asyncio.StreamWriter,
                      counters: Counters) -> None:
        length = int(_header(headers, 'content-length') or 0)
        if length:
            await reader.readexactly(length)
        if target.startswith(CONTROL + 'reset') and method == 'POST':
            counters.reset()
            payload: dict[str, Any] = {'reset': True}
        else:
            payload = counters.summary(records='records=1' in target)
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
    counters. With ``nodes`` > 1, ``endpoints[i]`` is node ``i``'s (its own link and counters:
    ``stats(node=i)``); ``limits`` is the store's request budget and ``bucket_rate`` its
    bytes/s for every node together (``Proxy``).
    """

    def __init__(self, upstream: str, profile: Profile, nodes: int = 1,
                 limits: StoreLimits | None = None, bucket_rate: float | None = None) -> None:
        self.upstream, self.profile = upstream, profile
        self.nodes, self.limits, self.bucket_rate = nodes, limits, bucket_rate
        self.endpoint = ''
        self.endpoints: list[str] = []
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> LinkEmulator:
        p = self.profile
        command = [sys.executable, '-m', 'benchmarks.linkemu', 'serve', '--upstream',
                   self.upstream, '--port', '0', '--ttfb', str(p.ttfb), '--conn-rate',
                   str(p.conn_rate), '--link-rate', str(p.link_rate), '--nodes', str(self.nodes)]
        if self.limits is not None:
            command += ['--allow-rps', str(self.limits.allow_rps), '--throttle-style',
                        self.limits.style]
            if self.limits.retry_after is not None:
                command += ['--retry-after', str(self.limits.retry_after)]
        if self.bucket_rate is not None:
            command += ['--bucket-rate', str(self.bucket_rate)]
        self._process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
        line = self._process.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith('LINKEMU_PORT '):
            self.close()
            raise RuntimeError(f'the link emulator did not start (said {line!r})')
        self.endpoints = [f'http://127.0.0.1:{int(port)}' for port in line.split()[1:]]
        self.endpoint = self.endpoints[0]
        return self

    def stats(self, records: bool = False, node: int = 0) -> dict[str, Any]:
        url = f'{self.endpoints[node]}{CONTROL}stats{"?records=1" if records else ""}'
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())

    def reset(self, node: int = 0) -> None:
        request = urllib.request.Request(f'{self.endpoints[node]}{CONTROL}reset', data=b'',
                                         method='POST')
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()


def serve(upstream: str, port: int, profile: Profile, nodes: int = 1,
          limits: StoreLimits | None = None, bucket_rate: float | None = None) -> None:
    """Run the proxy in this process until killed; prints ``LINKEMU_PORT <port>...`` (one per
    node) when ready."""
    def ready(*bound: int) -> None:
        print('LINKEMU_PORT ' + ' '.join(map(str, bound)), flush=True)

    asyncio.run(Proxy(upstream, profile, nodes, limits, bucket_rate).serve(port, ready))


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
    parser.add_argument('--nodes', type=int, default=1, help='serve: one port (link) per node')
    parser.add_argument('--allow-rps', type=float, help='serve: the store\'s requests/s per '
                        'prefix; more are refused (see --throttle-style)')
    parser.add_argument('--throttle-style', choices=STYLES, default='s3')
    parser.add_argument('--retry-after', type=float, help='serve: Retry-After of refusals')
    parser.add_argument('--bucket-rate', type=float, help='serve: the store\'s bytes/s to all '
                        'nodes together')
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
        limits = None if args.allow_rps is None else \
            StoreLimits(args.allow_rps, args.throttle_style, args.retry_after)
        serve(args.upstream, args.port, profile, args.nodes, limits, args.bucket_rate)
    elif args.self_check:
        from benchmarks.linkemu_check import report, self_check
        check = self_check(profile, args.seconds, args.connections, args.mode)
        print(json.dumps(check) if args.json else report(check))
    else:
        parser.error('give serve or --self-check')


if __name__ == '__main__':
    main()
