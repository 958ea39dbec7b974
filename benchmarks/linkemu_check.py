"""The link emulator's self-check: what the link really delivers, with one and many connections.

Run through ``python -m benchmarks.linkemu --self-check [--profile NAME]``; see ``linkemu``.
"""

from __future__ import annotations

import http.client
import math
import os
import statistics
import threading
import time
from dataclasses import asdict
from typing import Any
from urllib.parse import urlparse

from benchmarks.linkemu import Profile

__all__ = ['delivered_rates', 'report', 'self_check', 'timed_get', 'parallel_gets']


def timed_get(endpoint: str, path: str, out: dict[str, Any]) -> None:
    """GET ``path`` on a connection of its own; records request, first-byte and end times."""
    parsed = urlparse(endpoint)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
    buffer = bytearray(1 << 20)
    try:
        out['start'] = time.perf_counter()
        conn.request('GET', path)
        response = conn.getresponse()
        out['first'] = time.perf_counter()
        total = 0
        while count := response.readinto(buffer):
            total += count
        out['end'], out['bytes'], out['status'] = time.perf_counter(), total, response.status
    finally:
        conn.close()


def _probe(link: Any) -> dict[str, Any]:
    """A HEAD and a ranged GET of the small object: the counters as they stand then."""
    parsed = urlparse(link.endpoint)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    try:
        conn.request('HEAD', '/linkemu/small')
        conn.getresponse().read()
        conn.request('GET', '/linkemu/small', headers={'Range': 'bytes=0-99'})
        body = conn.getresponse().read()
    finally:
        conn.close()
    if len(body) != 100:
        raise RuntimeError(f'a ranged GET through the link returned {len(body)} bytes, not 100')
    return link.stats()


def parallel_gets(endpoint: str, path: str, count: int) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in range(count)]
    threads = [threading.Thread(target=timed_get, args=(endpoint, path, out)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for out in results:
        if out.get('status') != 200:
            raise RuntimeError(f'a self-check GET failed: {out}')
    return results


def delivered_rates(link: Any, profile: Profile, bucket: str = 'linkemu', seconds: float = 2.0,
                    connections: int | None = None) -> dict[str, Any]:
    """What ``link`` (set to ``profile``) carries now: one connection's MB/s, then the aggregate
    and per-connection MB/s of many connections at once (about ``seconds`` each; the objects
    are put into ``bucket`` first)."""
    many = connections or max(2, 2 * math.ceil(profile.link_rate / profile.conn_rate))
    many = min(many, 64)
    one_size = int(min(profile.conn_rate * seconds, 256e6))
    many_size = int(min(profile.link_rate * seconds / many, 256e6))
    client = link.client()
    for key, size in (('linkemu-one', one_size), ('linkemu-many', many_size)):
        client.put_object(Bucket=bucket, Key=key, Body=os.urandom(size), ACL='public-read')
    link.reset()  # The kernel link counts the uploads above (the proxy does not see them).
    one = parallel_gets(link.endpoint, f'/{bucket}/linkemu-one', 1)[0]
    one_stats = link.stats()
    link.reset()
    results = parallel_gets(link.endpoint, f'/{bucket}/linkemu-many', many)
    many_stats = link.stats()
    first = min(r['first'] for r in results)
    end = max(r['end'] for r in results)
    return {
        'one_connection_mb_per_s': one['bytes'] / (one['end'] - one['first']) / 1e6,
        'one_connection_stats': one_stats,
        'connections': many,
        'aggregate_mb_per_s': sum(r['bytes'] for r in results) / (end - first) / 1e6,
        'per_connection_mb_per_s_median': statistics.median(
            r['bytes'] / (r['end'] - r['first']) / 1e6 for r in results),
        'many_connections_stats': many_stats,
    }


def self_check(profile: Profile, seconds: float = 2.0, connections: int | None = None,
               mode: str = 'auto') -> dict[str, Any]:
    """Start moto behind a link of ``mode`` (see ``linkemu_kernel.open_link``); measure TTFB,
    one connection's and many connections' MB/s."""
    from benchmarks.linkemu_kernel import open_link
    with open_link(profile, 'linkemu', mode) as link:
        client = link.client()
        client.put_object(Bucket='linkemu', Key='small', Body=b'x' * 1024, ACL='public-read')
        link_mode = link.mode
        link.reset()
        ttfbs = []
        for _ in range(5):
            out: dict[str, Any] = {}
            timed_get(link.endpoint, '/linkemu/small', out)
            ttfbs.append(out['first'] - out['start'])
        probe_stats = _probe(link)
        rates = delivered_rates(link, profile, 'linkemu', seconds, connections)
    return {
        'profile': asdict(profile),
        'mode': link_mode,
        'ttfb_s': statistics.median(ttfbs),
        **rates,
        'probe_stats': probe_stats,
        'load': round(os.getloadavg()[0], 1),
    }


def report(check: dict[str, Any]) -> str:
    p = check['profile']
    many = check['many_connections_stats']
    return '\n'.join([
        f'{check.get("mode", "proxy")} link, profile: ttfb {p["ttfb"] * 1e3:.0f} ms, '
        f'{p["conn_rate"] / 1e6:.0f} MB/s per connection, '
        f'{p["link_rate"] / 1e6:.0f} MB/s link',
        f'time to first byte (median of 5):   {check["ttfb_s"] * 1e3:7.1f} ms',
        f'one connection:                     {check["one_connection_mb_per_s"]:7.1f} MB/s '
        f'({check["one_connection_mb_per_s"] * 1e6 / p["conn_rate"]:.2f} of the cap)',
        f'{check["connections"]:3d} connections, aggregate:        '
        f'{check["aggregate_mb_per_s"]:7.1f} MB/s '
        f'({check["aggregate_mb_per_s"] * 1e6 / p["link_rate"]:.2f} of the link), '
        f'{check["per_connection_mb_per_s_median"]:.1f} MB/s per connection (median)',
        f'counted: {many["requests"]} requests, {many["bytes_out"] / 1e6:.1f} MB out, '
        f'in flight max {many["max_in_flight"]} / mean {many["mean_in_flight"]:.1f}',
    ])
