"""A threaded WSGI server that keeps HTTP/1.1 connections open between requests, as S3 does.

werkzeug's development server (what ``moto.server`` runs on) answers every request with
``Connection: close``, so each GET through the emulated link paid a TCP handshake, a new server
thread and a teardown that a real object store does not make its clients pay. This server
keeps a connection for the next request when that is safe: the request had no body (GET, HEAD)
and the response said its length. Anything else, an HTTP/1.0 client, a client asking for
``Connection: close``, or ``IDLE_TIMEOUT`` seconds without a request, closes it.
"""

from __future__ import annotations

import socket
import socketserver
from typing import Callable
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

IDLE_TIMEOUT = 20.0  # Seconds a kept connection may wait for its next request.


class _ResponseHandler(ServerHandler):
    """wsgiref's handler, speaking HTTP/1.1; says ``Connection: close`` when it will close."""

    http_version = '1.1'

    def cleanup_headers(self) -> None:
        super().cleanup_headers()
        if 'Content-Length' not in self.headers:  # The body ends where the connection does.
            self.request_handler.close_connection = True
        if self.request_handler.close_connection:
            self.headers['Connection'] = 'close'


class _Handler(WSGIRequestHandler):
    protocol_version = 'HTTP/1.1'
    timeout = IDLE_TIMEOUT
    wbufsize = 1 << 16  # The status line and headers leave in one segment, not one per line.

    def setup(self) -> None:
        super().setup()
        # Small writes are not held back for an ACK (Nagle) on a connection kept for more.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle_expect_100(self) -> bool:
        answered = super().handle_expect_100()
        self.wfile.flush()  # The client waits for this answer before it sends the body.
        return answered

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            self.handle_one_request()

    def handle_one_request(self) -> None:
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except (TimeoutError, ConnectionError):
            self.close_connection = True
            return
        if not self.raw_requestline or len(self.raw_requestline) > 65536:
            self.close_connection = True
            return
        if not self.parse_request():  # It sent the error and set close_connection.
            return
        if self.headers.get('Content-Length', '0') != '0' or 'Transfer-Encoding' in self.headers:
            self.close_connection = True  # Whatever the app leaves unread must not be parsed.
        handler = _ResponseHandler(self.rfile, self.wfile, self.get_stderr(),
                                   self.get_environ(), multithread=True)
        handler.request_handler = self
        handler.run(self.server.get_app())
        self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        """Quiet, as the werkzeug server is under ``moto.server`` at WARNING."""


class _ThreadedServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 128


def make_server(host: str, port: int, app: Callable) -> WSGIServer:
    """A server for ``app`` on ``host:port``; call ``serve_forever()``."""
    server = _ThreadedServer((host, port), _Handler)
    server.set_app(app)
    return server
