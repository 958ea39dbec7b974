"""The emulated link's keep-alive server (benchmarks/wsgi_keepalive.py) and the server-side CPU
accounting of link_bench (benchmarks/server_cpu.py): real sockets on loopback, a real child."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading
from typing import Any, Iterator

import pytest

from benchmarks.server_cpu import ServerCpu, link_share_cap
from benchmarks.wsgi_keepalive import make_server


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    body = environ['wsgi.input'].read(int(environ.get('CONTENT_LENGTH') or 0))
    path = environ['PATH_INFO']
    if path == '/unsized':  # No Content-Length: the body ends where the connection does.
        start_response('200 OK', [('Content-Type', 'application/octet-stream')])
        return [b'a' * 1000, b'b' * 1000]
    payload = path.encode() + b':' + body
    start_response('200 OK', [('Content-Length', str(len(payload)))])
    return [payload]


@pytest.fixture
def server() -> Iterator[int]:
    httpd = make_server('127.0.0.1', 0, _app)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join(30)


def _get(connection: http.client.HTTPConnection, path: str, **kwargs: Any
         ) -> tuple[bytes, http.client.HTTPResponse]:
    connection.request(kwargs.pop('method', 'GET'), path, **kwargs)
    response = connection.getresponse()
    return response.read(), response


def test_gets_share_one_connection(server: int) -> None:
    connection = http.client.HTTPConnection('127.0.0.1', server, timeout=30)
    body, response = _get(connection, '/one')
    first_socket = connection.sock
    assert (body, response.will_close) == (b'/one:', False)
    body, response = _get(connection, '/two')
    assert (body, response.will_close) == (b'/two:', False)
    assert connection.sock is first_socket  # The same TCP connection served both.
    connection.close()


def test_a_request_with_a_body_closes_its_connection(server: int) -> None:
    connection = http.client.HTTPConnection('127.0.0.1', server, timeout=30)
    body, response = _get(connection, '/put', method='PUT', body=b'xyz')
    assert (body, response.will_close) == (b'/put:xyz', True)
    body, response = _get(connection, '/after')  # http.client reconnects on its own.
    assert (body, response.will_close) == (b'/after:', False)
    connection.close()


def test_a_response_without_a_length_ends_with_its_connection(server: int) -> None:
    connection = http.client.HTTPConnection('127.0.0.1', server, timeout=30)
    body, response = _get(connection, '/unsized')
    assert body == b'a' * 1000 + b'b' * 1000
    assert response.will_close
    connection.close()


def test_a_client_asking_to_close_gets_its_connection_closed(server: int) -> None:
    connection = http.client.HTTPConnection('127.0.0.1', server, timeout=30)
    body, response = _get(connection, '/bye', headers={'Connection': 'close'})
    assert (body, response.will_close) == (b'/bye:', True)
    connection.close()


SPIN = ('import time\nprint("ready", flush=True)\nif input() == "spin":\n'
        '    end = time.process_time() + 0.5\n'
        '    while time.process_time() < end: pass\nprint("done", flush=True)\n')


def test_server_cpu_counts_a_busy_child_and_not_an_idle_one() -> None:
    busy, idle = (subprocess.Popen([sys.executable, '-c', SPIN], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE) for _ in range(2))
    try:
        for child in (busy, idle):  # Both started: their start-up is not counted.
            assert child.stdout is not None and child.stdout.readline() == b'ready\n'
        with ServerCpu([busy.pid]) as cpu_busy, ServerCpu([idle.pid]) as cpu_idle:
            busy.stdin.write(b'spin\n')  # type: ignore[union-attr]
            busy.stdin.flush()  # type: ignore[union-attr]
            assert busy.stdout.readline() == b'done\n'  # type: ignore[union-attr]
        assert cpu_busy.server_s >= 0.4
        assert cpu_idle.server_s < 0.2
        assert cpu_busy.result(1e9)['server_cpu_s_per_gb'] == pytest.approx(cpu_busy.server_s)
    finally:
        for child in (busy, idle):
            child.communicate(b'\n', timeout=60)


def test_link_share_cap_is_the_cores_over_the_cost_at_most_the_link() -> None:
    assert link_share_cap(0.0, 96e6, cores=2) == 1.0
    assert link_share_cap(10.0, 96e6, cores=2) == 1.0  # 200 MB/s of CPU > the link.
    assert link_share_cap(40.0, 96e6, cores=2) == pytest.approx(50e6 / 96e6)
    assert link_share_cap(40.0, 96e6, cores=1) == pytest.approx(25e6 / 96e6)


def test_a_client_expecting_100_continue_gets_it_before_sending_its_body(server: int) -> None:
    with socket.create_connection(('127.0.0.1', server), timeout=30) as sock:
        sock.sendall(b'PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n'
                     b'Expect: 100-continue\r\n\r\n')
        interim = b''
        while b'\r\n\r\n' not in interim:  # Within the timeout, or the test fails.
            interim += sock.recv(1024)
        assert interim.startswith(b'HTTP/1.1 100')
        sock.sendall(b'abc')
        answer = b''
        while not answer.endswith(b'/up:abc'):
            data = sock.recv(1024)
            assert data, answer
            answer += data
        assert answer.startswith(b'HTTP/1.1 200')
