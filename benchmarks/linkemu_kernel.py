"""A network link shaped by the kernel: moto in a network namespace behind a veth pair and tc.

The asyncio proxy of ``benchmarks.linkemu`` copies every byte in Python, on the same 2 cores as
moto and the readers under test, so it delivered only ~0.7 of a 96 MB/s link by itself. Here
the bytes never pass through user space on their way to the reader:

* moto runs in its own network namespace, reached over a veth pair (``10.213.x.2``);
* the namespace's egress (responses to the readers) is an ``htb`` tree: one class capped at the
  **link rate**, under it 1,024 leaf classes capped at the **per-connection rate**; a classic
  BPF filter puts each TCP connection in the leaf of its client port (ports are handed out in
  steps of two, so ``port / 2 mod 1024`` keeps concurrent connections apart);
* moto's server keeps **HTTP/1.1 connections open** between requests, as S3 does
  (``benchmarks.wsgi_keepalive``; werkzeug's own server closes each one: ``keep_alive=False``);
* the **time to first byte** is kept by moto's side: a thin WSGI layer holds a response until
  ``ttfb`` seconds after its request arrived (a sleeping thread, no CPU). This kernel has no
  ``netem``, and a real store's first-byte time is mostly its own latency anyway.

The same WSGI layer counts what the proxy counted (requests by method, ranged GETs, HEADs,
body bytes, transfers in flight) and serves them at ``GET /__linkemu__/stats``. A transfer ends
when its last byte is in the socket's send buffer, which is kept small (``tcp_wmem`` of the
namespace: ~20 ms of a connection's rate) so that this is close to when the reader has it.

Needs root (``CAP_NET_ADMIN``), ``ip`` and ``tc`` with ``htb`` and ``cls_bpf``;
``kernel_link_unavailable()`` says why not when they are missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from types import TracebackType
from typing import Any, Callable, Iterable

from benchmarks import moto_big
from benchmarks.linkemu import CONTROL, PROFILES, Counters, Profile
from benchmarks.s3 import MotoServer, ServerProcess, s3_client, upload_dir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKETS = 1024  # Leaf classes, one per connection (by client port).
# Classic BPF for cls_bpf on the veth's egress (data starts at the Ethernet header): TCP over
# IPv4 -> classid 1:(0x1000 + (dport >> 1) % 1024); anything else -> the default class.
CLASSIFIER = ('11,40 0 0 12,21 0 8 2048,48 0 0 23,21 0 6 6,177 0 0 14,72 0 0 16,116 0 0 1,'
              f'84 0 0 {BUCKETS - 1},68 0 0 {0x11000},22 0 0 0,6 0 0 0')


def _tc_rate(rate: float) -> str:
    return f'{min(max(int(rate * 8), 8000), 80 * 10**9)}bit'


def _run(args: list[str]) -> None:
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f'{" ".join(args)} failed: {done.stderr.strip()}')


def kernel_link_unavailable() -> str | None:
    """Why the kernel link cannot be set up here (None if it can): tries a throwaway namespace."""
    if os.geteuid() != 0:
        return 'not root (network namespaces and tc need CAP_NET_ADMIN)'
    for tool in ('ip', 'tc'):
        if shutil.which(tool) is None and not os.path.exists(f'/usr/sbin/{tool}'):
            return f'no `{tool}` command'
    try:
        with KernelLink(PROFILES['uncapped'], start_server=False):
            pass
    except (RuntimeError, OSError) as e:
        return str(e)
    return None


class KernelLink(ServerProcess):
    """``with KernelLink(profile, bucket) as link:`` moto in a namespace behind a shaped veth.

    ``link.endpoint`` is the URL for readers; ``stats()`` / ``reset()`` read and clear the
    counters; ``set_profile()`` changes rates and time to first byte in place (uploads go
    faster under ``uncapped``, which is what the link starts with unless told otherwise).
    """

    mode = 'kernel'

    def __init__(self, profile: Profile, bucket: str = 'bench', start_server: bool = True,
                 keep_alive: bool = True) -> None:
        self.profile, self.bucket, self.start_server = profile, bucket, start_server
        self.keep_alive = keep_alive
        pid = os.getpid()
        slot = (pid * 7 + int(time.time() * 1000)) % 16000
        self.netns = f'linkemu-{pid}-{slot}'
        self.host_if, self.ns_if = f'le{slot}h', f'le{slot}n'
        self.host_ip = f'10.213.{slot // 64}.{(slot % 64) * 4 + 1}'
        self.ns_ip = f'10.213.{slot // 64}.{(slot % 64) * 4 + 2}'
        self.port = 9000
        self.endpoint = f'http://{self.ns_ip}:{self.port}'
        self._process: subprocess.Popen | None = None
        self._created = False

    # ---- setup ----------------------------------------------------------------------------
    def _ns(self, *args: str) -> list[str]:
        return ['ip', 'netns', 'exec', self.netns, *args]

    def __enter__(self) -> KernelLink:
        try:
            _run(['ip', 'netns', 'add', self.netns])
            self._created = True
            _run(['ip', 'link', 'add', self.host_if, 'type', 'veth', 'peer', 'name',
                  self.ns_if])
            _run(['ip', 'link', 'set', self.ns_if, 'netns', self.netns])
            _run(['ip', 'addr', 'add', f'{self.host_ip}/30', 'dev', self.host_if])
            _run(['ip', 'link', 'set', self.host_if, 'up'])
            _run(self._ns('ip', 'addr', 'add', f'{self.ns_ip}/30', 'dev', self.ns_if))
            _run(self._ns('ip', 'link', 'set', self.ns_if, 'up'))
            _run(self._ns('ip', 'link', 'set', 'lo', 'up'))
            self._shape(self.profile, create=True)
            if self.start_server:
                self._start_moto()
        except BaseException:
            self.close()
            raise
        return self

    def _shape(self, profile: Profile, create: bool) -> None:
        """The htb tree (link class, per-connection leaves) and the send-buffer size."""
        verb = 'add' if create else 'change'
        dev = self.ns_if
        link, conn = _tc_rate(profile.link_rate), _tc_rate(profile.conn_rate)
        burst = max(int(profile.link_rate * 0.002), 256 << 10)
        cburst = max(int(profile.conn_rate * 0.002), 128 << 10)
        lines = []
        if create:
            lines.append(f'qdisc add dev {dev} root handle 1: htb default 2')
        lines.append(f'class {verb} dev {dev} parent 1: classid 1:1 htb rate {link} ceil {link} '
                     f'burst {burst} cburst {burst}')
        lines.append(f'class {verb} dev {dev} parent 1:1 classid 1:2 htb rate 1mbit ceil {link} '
                     f'burst {burst} cburst {burst} quantum 200000')
        # Leaves guarantee almost nothing and borrow up to their ceiling: the link class's
        # rate is then the one aggregate cap (guaranteed rates would bypass it).
        for i in range(BUCKETS):
            lines.append(f'class {verb} dev {dev} parent 1:1 classid 1:{0x1000 + i:x} htb '
                         f'rate 100kbit ceil {conn} burst {cburst} cburst {cburst} '
                         f'quantum 200000')
        if create:
            lines.append(f'filter add dev {dev} parent 1: prio 1 bpf bytecode "{CLASSIFIER}"')
        with tempfile.NamedTemporaryFile('w', suffix='.tc') as f:
            f.write('\n'.join(lines) + '\n')
            f.flush()
            _run(self._ns('tc', '-batch', f.name))
        wmem = min(max(256 << 10, int(profile.conn_rate * 0.02)), 16 << 20)
        _run(self._ns('sysctl', '-q', '-w', f'net.ipv4.tcp_wmem=4096 65536 {wmem}'))

    def _start_moto(self) -> None:
        self._process = subprocess.Popen(
            self._ns(sys.executable, '-m', 'benchmarks.linkemu_kernel', '--host', self.ns_ip,
                     '--port', str(self.port), '--ttfb', str(self.profile.ttfb),
                     *([] if self.keep_alive else ['--close-connections'])),
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((self.ns_ip, self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    raise RuntimeError('moto did not start in the link namespace') from None
                time.sleep(0.1)
        self.client().create_bucket(Bucket=self.bucket)

    def server_pids(self) -> list[int]:
        """The server side's processes (moto and its link layer), for CPU accounting."""
        return [self._process.pid] if self._process is not None else []

    def set_profile(self, profile: Profile) -> None:
        """New rates (tc classes changed in place) and time to first byte."""
        self._shape(profile, create=False)
        self._control('POST', f'ttfb?seconds={profile.ttfb}')
        self.profile = profile

    def close(self) -> None:
        """Stop moto (``ServerProcess.close``), then remove the namespace and its link."""
        super().close()
        if self._created:  # Deleting the namespace deletes the veth pair and its qdiscs.
            subprocess.run(['ip', 'netns', 'del', self.netns], capture_output=True)
            subprocess.run(['ip', 'link', 'del', self.host_if], capture_output=True)
            self._created = False

    # ---- use ------------------------------------------------------------------------------
    def client(self):  # noqa: ANN201 - boto3 clients have no importable type
        return s3_client(self.endpoint)

    def upload_dir(self, directory: str, prefix: str) -> int:
        """Upload every file of ``directory`` under ``prefix``; returns the bytes uploaded."""
        return upload_dir(self.client(), self.bucket, directory, prefix)

    def _control(self, method: str, what: str) -> dict[str, Any]:
        request = urllib.request.Request(f'{self.endpoint}{CONTROL}{what}',
                                         data=b'' if method == 'POST' else None, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def stats(self, records: bool = False) -> dict[str, Any]:
        return self._control('GET', 'stats' + ('?records=1' if records else ''))

    def reset(self) -> None:
        self._control('POST', 'reset')


# ---- moto's side: time to first byte and counters ------------------------------------------------
class _Tracked:
    """A response body that counts its bytes and ends its transfer when the server closes it."""

    def __init__(self, body: Iterable[bytes], layer: LinkLayer, start: float, what: str,
                 counts: bool) -> None:
        self.body, self.layer, self.start, self.what, self.counts = body, layer, start, what, counts
        self.first: float | None = None
        self.sent = 0

    def __iter__(self) -> Any:
        for chunk in self.body:
            if self.first is None:
                self.first = time.monotonic()
            if self.counts:
                self.sent += len(chunk)
            yield chunk

    def close(self) -> None:
        close = getattr(self.body, 'close', None)
        if close is not None:
            close()
        layer = self.layer
        with layer.lock:
            layer.counters.bytes_out += self.sent
            now = time.monotonic()
            layer.counters.end(self.start, self.first or now, now, self.sent, self.what)


class LinkLayer:
    """WSGI middleware around moto: holds each response until ``ttfb`` after its request."""

    def __init__(self, app: Callable, ttfb: float) -> None:
        self.app, self.ttfb = app, ttfb
        self.lock = threading.Lock()
        self.counters = Counters()

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Any:
        path = environ.get('PATH_INFO', '')
        if path.startswith(CONTROL):
            return self.control(environ, start_response)
        start = time.monotonic()
        method = environ['REQUEST_METHOD']
        ranged = 'HTTP_RANGE' in environ
        with self.lock:
            self.counters.begin(method, ranged, start)
            self.counters.bytes_in += int(environ.get('CONTENT_LENGTH') or 0)
        what = f'{method}{" range" if ranged else ""} {path}'
        try:  # Big objects: a range read at the cost of the range (see benchmarks.moto_big).
            body = moto_big.serve(environ, start_response) or self.app(environ, start_response)
        except BaseException:
            with self.lock:
                self.counters.end(start, start, time.monotonic(), 0, what)
            raise
        wait = start + self.ttfb - time.monotonic()
        if wait > 0:  # The server sends the status line with the first body chunk.
            time.sleep(wait)
        return _Tracked(body, self, start, what, method != 'HEAD')

    def control(self, environ: dict[str, Any], start_response: Callable) -> list[bytes]:
        path, query = environ.get('PATH_INFO', ''), environ.get('QUERY_STRING', '')
        method = environ['REQUEST_METHOD']
        with self.lock:
            if path.endswith('/reset') and method == 'POST':
                self.counters.reset()
                payload: dict[str, Any] = {'reset': True}
            elif path.endswith('/ttfb') and method == 'POST':
                self.ttfb = float(query.partition('seconds=')[2])
                payload = {'ttfb': self.ttfb}
            else:
                payload = self.counters.summary(records='records=1' in query)
                payload['ttfb'] = self.ttfb
        data = json.dumps(payload).encode()
        start_response('200 OK', [('Content-Type', 'application/json'),
                                  ('Content-Length', str(len(data)))])
        return [data]


def serve(host: str, port: int, ttfb: float, keep_alive: bool = True) -> None:
    """moto's S3 behind ``LinkLayer``, threaded, until killed (run inside the namespace).

    With ``keep_alive`` (the default) connections stay open between GETs as with a real store
    (``benchmarks.wsgi_keepalive``); without it, werkzeug's server closes every connection.
    """
    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    logging.getLogger('werkzeug').setLevel(logging.WARNING)
    app = LinkLayer(DomainDispatcherApplication(create_backend_app), ttfb)
    if keep_alive:
        from benchmarks.wsgi_keepalive import make_server as make_kept_server
        make_kept_server(host, port, app).serve_forever()
    else:
        from werkzeug.serving import make_server
        make_server(host, port, app, threaded=True).serve_forever()


def main(argv: list[str] | None = None) -> None:
    import argparse
    parser = argparse.ArgumentParser(description='moto behind the link layer (in a namespace)')
    parser.add_argument('--host', required=True)
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--ttfb', type=float, default=0.0)
    parser.add_argument('--close-connections', action='store_true',
                        help='close every connection after one request (werkzeug\'s server)')
    args = parser.parse_args(argv)
    serve(args.host, args.port, args.ttfb, keep_alive=not args.close_connections)


if __name__ == '__main__':
    main()


class ProxyLink:
    """The same interface over moto on loopback and the asyncio proxy (``benchmarks.linkemu``)."""

    mode = 'proxy'

    def __init__(self, profile: Profile, bucket: str = 'bench') -> None:
        self.profile, self.bucket = profile, bucket
        self.endpoint = ''
        self._s3: Any = None
        self._proxy: Any = None

    def __enter__(self) -> ProxyLink:
        self._s3 = MotoServer(self.bucket).__enter__()
        try:
            self.set_profile(self.profile)
        except BaseException:
            self.close()
            raise
        return self

    def set_profile(self, profile: Profile) -> None:
        """A fresh proxy process with the new profile."""
        from benchmarks.linkemu import LinkEmulator
        if self._proxy is not None:
            self._proxy.close()
        self._proxy = LinkEmulator(self._s3.endpoint, profile).__enter__()
        self.endpoint, self.profile = self._proxy.endpoint, profile

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        for server in (self._proxy, self._s3):
            if server is not None:
                server.close()
        self._proxy = self._s3 = None

    def client(self):  # noqa: ANN201 - boto3 clients have no importable type
        return self._s3.client()

    def server_pids(self) -> list[int]:
        """moto's process and the proxy's, for CPU accounting."""
        return [server._process.pid for server in (self._s3, self._proxy)
                if server is not None and server._process is not None]

    def upload_dir(self, directory: str, prefix: str) -> int:
        return self._s3.upload_dir(directory, prefix)

    def stats(self, records: bool = False) -> dict[str, Any]:
        return self._proxy.stats(records)

    def reset(self) -> None:
        self._proxy.reset()


def open_link(profile: Profile, bucket: str = 'bench', mode: str = 'auto',
              keep_alive: bool = True) -> KernelLink | ProxyLink:
    """A link of ``mode`` ('kernel', 'proxy', or 'auto': kernel when it can be set up, else the
    proxy, saying why on stderr). Use it with ``with``. ``keep_alive=False``: the kernel link's
    server closes every connection after one request (as before 2026-11-29; the proxy's moto
    always does)."""
    if mode == 'proxy':
        return ProxyLink(profile, bucket)
    reason = kernel_link_unavailable()
    if reason is None:
        return KernelLink(profile, bucket, keep_alive=keep_alive)
    if mode == 'kernel':
        raise RuntimeError(f'the kernel link cannot be set up: {reason}')
    print(f'[linkemu] kernel link unavailable ({reason}); using the user-space proxy',
          file=sys.stderr, flush=True)
    return ProxyLink(profile, bucket)
