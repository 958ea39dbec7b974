"""Signed S3 GETs and HEADs over pooled ``http.client`` connections: downloads without boto3.

Importing boto3 and building its client costs most of a second of CPU, more on a busy machine
(measured in docs/storage/s3.md), before the first byte of a dataset can be requested; the
standard library's ``http.client`` and a SigV4 signature cost next to nothing. ``S3Backend``
sends its reads (``read``, ``stat``) this way when the whole configuration is explicit in the
environment, so that nothing boto3 would resolve differently is involved:

- credentials ``AWS_ACCESS_KEY_ID`` + ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``), which
  boto3's chain also takes first, or ``S3_UNSIGNED`` (anonymous);
- ``S3_ENDPOINT_URL`` (addressed path-style, as boto3 does for a custom endpoint), or AWS itself
  with ``AWS_DEFAULT_REGION`` set (virtual-hosted, as boto3);
- no AWS config file, no ``AWS_PROFILE``, no other ``AWS_*`` setting (endpoint overrides, FIPS,
  dual-stack, ...; ``AWS_CA_BUNDLE`` is honoured) and no proxy variable.

Anything else, ``STREAMING_S3_CLIENT=boto3``, or a redirect (a bucket in another region) goes
through boto3, as before. Like boto3's default (``when_supported``), a whole-object GET asks for
the object's checksum and checks a CRC32, SHA-1 or SHA-256 one
(``AWS_RESPONSE_CHECKSUM_VALIDATION=when_required`` turns that off); the CRC32 is ISA-L's
(``isal``, the ``fast-crc`` extra: about 4x zlib's speed, the same values) where it is
installed, zlib's otherwise. Connections are kept per
process (never shared across ``fork``) and per host; a kept connection the server has closed is
replaced once, before any byte of the answer.
"""

from __future__ import annotations

import base64
import encodings.idna  # noqa: F401 - socket.create_connection's first use, not a download's.
import hashlib
import hmac
import http.client
import os
import re
import socket
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import quote, urlsplit

from streaming.storage.environ import on_environ

try:  # The same CRC-32 as zlib's, with carry-less multiplication: ~4x faster here.
    from isal.isal_zlib import crc32 as _crc32
except ImportError:
    _crc32 = zlib.crc32

__all__ = ['CLIENT_ENV', 'LightS3', 'Redirected', 'light_settings', 'truthy']

CLIENT_ENV = 'STREAMING_S3_CLIENT'
EMPTY_SHA256 = hashlib.sha256(b'').hexdigest()
# AWS_* variables that change nothing this client does differently from boto3.
_NEUTRAL_AWS = {'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN',
                'AWS_SECURITY_TOKEN', 'AWS_DEFAULT_REGION', 'AWS_REGION', 'AWS_CONFIG_FILE',
                'AWS_SHARED_CREDENTIALS_FILE', 'AWS_EC2_METADATA_DISABLED',
                'AWS_RESPONSE_CHECKSUM_VALIDATION', 'AWS_REQUEST_CHECKSUM_CALCULATION',
                'AWS_MAX_ATTEMPTS', 'AWS_RETRY_MODE', 'AWS_CA_BUNDLE'}
_PROXIES = ('http_proxy', 'https_proxy', 'all_proxy')
_AWS_REGION = re.compile(r'^(us|eu|ap|ca|sa|me|af|il|mx)-[a-z]+-\d+$')
_VIRTUAL_BUCKET = re.compile(r'^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$')
_CHECKSUMS: dict[str, Callable[[], Any]] = {
    'crc32': lambda: _Crc32(), 'sha1': hashlib.sha1, 'sha256': hashlib.sha256}
MAX_IDLE = 64
# Bytes a read may find already out of the socket (the response's 8 KiB buffer, a TLS record
# OpenSSL holds): the low-water mark never asks the kernel for more than is surely to come.
LOW_WATER_MARGIN = 64 << 10
_LOW_WATER = sys.platform.startswith('linux') and hasattr(socket, 'SO_RCVLOWAT')


class Redirected(Exception):
    """The store answered with a redirect (e.g. a bucket in another region): use boto3."""


@dataclass(frozen=True)
class Settings:
    """Where requests go and how they are signed (``secret`` None: unsigned)."""

    https: bool
    host: str
    port: int
    aws: bool  # AWS itself (virtual-hosted buckets), else a custom endpoint (path-style).
    region: str
    access_key: str | None
    secret: str | None
    token: str | None
    checksums: bool

    def address(self, bucket: str, key: str) -> tuple[str, str]:
        """(Host header, path) of ``bucket/key``, as boto3 addresses it."""
        path = quote(key, safe='/~')
        default = 443 if self.https else 80
        host = self.host if self.port == default else f'{self.host}:{self.port}'
        if self.aws and _VIRTUAL_BUCKET.match(bucket):
            return f'{bucket}.{host}', f'/{path}'
        return host, f'/{quote(bucket, safe="")}/{path}'


def truthy(value: str | None) -> bool:
    """Whether an environment value means yes (``1``, ``true``, ``yes``, ``on``)."""
    return (value or '').strip().lower() in ('1', 'true', 'yes', 'on')


def light_settings(endpoint: str | None) -> Settings | None:
    """The settings for this client from the environment, or None where boto3 must decide.

    Worked out once per environment (``environ.on_environ``); whether an AWS config file
    exists is asked at every call.
    """
    config, settings = _settings_from_environ(endpoint)
    if settings is None or os.path.exists(config):
        return None
    return settings


@on_environ
def _settings_from_environ(endpoint: str | None) -> tuple[str, Settings | None]:
    """(The AWS config file boto3 would read, the settings if the variables allow them)."""
    env = os.environ
    config = env.get('AWS_CONFIG_FILE') or os.path.expanduser(os.path.join('~', '.aws',
                                                                           'config'))
    return config, _settings(env, endpoint)


def _settings(env: Mapping[str, str], endpoint: str | None) -> Settings | None:
    if env.get(CLIENT_ENV, 'auto').strip().lower() == 'boto3':
        return None
    if any(name.startswith('AWS_') and name not in _NEUTRAL_AWS for name in env):
        return None
    if any(env.get(name) or env.get(name.upper()) for name in _PROXIES):
        return None
    region = env.get('AWS_DEFAULT_REGION') or None
    if env.get('AWS_REGION') and env.get('AWS_REGION') != region:
        return None
    unsigned = truthy(env.get('S3_UNSIGNED'))
    key, secret = env.get('AWS_ACCESS_KEY_ID'), env.get('AWS_SECRET_ACCESS_KEY')
    if not unsigned and not (key and secret):
        return None  # boto3's chain may find credentials elsewhere (files, roles, SSO).
    token = env.get('AWS_SESSION_TOKEN') or env.get('AWS_SECURITY_TOKEN') or None
    checksums = env.get('AWS_RESPONSE_CHECKSUM_VALIDATION', '').strip().lower() != \
        'when_required'
    if endpoint:
        parts = urlsplit(endpoint)
        if parts.scheme not in ('http', 'https') or not parts.hostname or ':' in parts.hostname or \
                parts.path not in ('', '/') or parts.query or parts.username:
            return None
        https = parts.scheme == 'https'
        return Settings(https, parts.hostname, parts.port or (443 if https else 80), False,
                        region or 'us-east-1', None if unsigned else key,
                        None if unsigned else secret, None if unsigned else token, checksums)
    if region is None or not _AWS_REGION.match(region):
        return None  # boto3 finds the bucket's region by redirects; cn-/gov-/iso- partitions.
    host = 's3.amazonaws.com' if region == 'us-east-1' else f's3.{region}.amazonaws.com'
    return Settings(True, host, 443, True, region, None if unsigned else key,
                    None if unsigned else secret, None if unsigned else token, checksums)


def sign(settings: Settings, method: str, host: str, path: str, headers: dict[str, str],
         amz_date: str) -> dict[str, str]:
    """``headers`` with SigV4 (S3, empty payload) ones added: every header sent is signed."""
    if settings.secret is None:
        return headers
    signed = {**headers, 'host': host, 'x-amz-date': amz_date,
              'x-amz-content-sha256': EMPTY_SHA256}
    if settings.token:
        signed['x-amz-security-token'] = settings.token
    names = sorted(signed)
    canonical = '\n'.join([method, path, '', *(f'{n}:{" ".join(str(signed[n]).split())}'
                                               for n in names), '', ';'.join(names),
                           EMPTY_SHA256])
    day = amz_date[:8]
    scope = f'{day}/{settings.region}/s3/aws4_request'
    to_sign = '\n'.join(['AWS4-HMAC-SHA256', amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ('AWS4' + settings.secret).encode()
    for part in (day, settings.region, 's3', 'aws4_request'):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    signed['authorization'] = (f'AWS4-HMAC-SHA256 Credential={settings.access_key}/{scope}, '
                               f'SignedHeaders={";".join(names)}, Signature={signature}')
    del signed['host']
    return signed


class _Crc32:
    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = _crc32(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(4, 'big')


class _Pool:
    """Idle connections per host, for this process only (a forked child starts empty)."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._idle: dict[tuple[bool, str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def has_idle(self, where: tuple[bool, str, int]) -> bool:
        """Whether a kept connection to ``where`` is idle now (another thread may take it)."""
        return self._pid == os.getpid() and bool(self._idle.get(where))

    def take(self, where: tuple[bool, str, int]) -> http.client.HTTPConnection | None:
        if self._pid != os.getpid():
            self._idle, self._lock, self._pid = {}, threading.Lock(), os.getpid()
        with self._lock:
            idle = self._idle.get(where)
            return idle.pop() if idle else None

    def give(self, where: tuple[bool, str, int], connection: http.client.HTTPConnection) -> None:
        if self._pid != os.getpid():
            connection.close()
            return
        with self._lock:
            idle = self._idle.setdefault(where, [])
            if len(idle) < MAX_IDLE:
                idle.append(connection)
                return
        connection.close()


class LightS3:
    """GET and HEAD of S3 objects; answers are ``(status, headers, body iterator or None)``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._pool = _Pool()
        self._ssl: Any = None

    def warm_up(self) -> None:
        """Import and build what the first request would (in this thread, not a download's)."""
        if self.settings.https:
            self._ssl_context()

    def _ssl_context(self) -> Any:
        if self._ssl is None:
            import ssl
            bundle = os.environ.get('AWS_CA_BUNDLE')  # As botocore: that, or certifi's.
            if not bundle:
                try:
                    import certifi
                    bundle = certifi.where()
                except ImportError:
                    bundle = None
            self._ssl = ssl.create_default_context(cafile=bundle)
        return self._ssl

    def _connect(self, timeout: float, host: str | None = None) -> http.client.HTTPConnection:
        s = self.settings
        host = host or s.host
        if s.https:
            return http.client.HTTPSConnection(host, s.port, timeout=timeout,
                                               context=self._ssl_context())
        return http.client.HTTPConnection(host, s.port, timeout=timeout)

    def _where(self, host: str) -> tuple[bool, str, int]:
        """The pool's key of the server behind a Host header (a virtual bucket is its own)."""
        s = self.settings
        server = host.rpartition(':')[0] if host.endswith(f':{s.port}') else host
        return s.https, server, s.port

    def connected(self, bucket: str, key: str) -> bool:
        """Whether a kept connection to the server of ``bucket/key`` is idle now.

        A request on it needs no name lookup (which no socket timeout bounds) nor handshake.
        """
        return self._pool.has_idle(self._where(self.settings.address(bucket, key)[0]))

    def request(self, method: str, bucket: str, key: str, headers: dict[str, str],
                timeout: float) -> tuple[int, dict[str, str], http.client.HTTPResponse,
                                         Callable[[bool], None]]:
        """Send one request; (status, lower-cased headers, response, ``release(reusable)``)."""
        s = self.settings
        host, path = s.address(bucket, key)
        where = self._where(host)
        server = where[1]
        amz_date = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())
        sent = sign(s, method, host, path, {k.lower(): v for k, v in headers.items()},
                    amz_date)
        for attempt in (0, 1):
            connection = self._pool.take(where) if attempt == 0 else None
            reused = connection is not None
            if connection is None:
                connection = self._connect(min(timeout, 60.0), server)
            try:
                if connection.sock is not None:
                    connection.sock.settimeout(timeout)
                connection.request(method, path, headers={'Host': host, **sent,
                                                          'Accept-Encoding': 'identity'})
                sock = connection.sock  # ``getresponse`` drops it if the server closes after.
                if sock is not None:
                    sock.settimeout(timeout)
                response = connection.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    ConnectionAbortedError):
                connection.close()
                if reused:
                    continue  # The server closed a kept connection: once more, on a new one.
                raise
            except BaseException:
                connection.close()
                raise
            break

        def release(reusable: bool, connection: http.client.HTTPConnection = connection,
                    response: http.client.HTTPResponse = response) -> None:
            if reusable and not response.will_close:
                if not response.isclosed():
                    response.read()  # A HEAD's (empty) body: closes the response, not the socket.
                self._pool.give(where, connection)
            else:
                response.close()
                connection.close()

        response.light_socket = sock  # type: ignore[attr-defined] # For ``body``.
        answer = {name.lower(): value for name, value in response.getheaders()}
        return response.status, answer, response, release

    def checker(self, headers: dict[str, str]) -> tuple[Any, str] | None:
        """(A running digest, the expected base64 value) for a whole-object GET, or None."""
        if not self.settings.checksums:
            return None
        for name, make in _CHECKSUMS.items():
            expected = headers.get(f'x-amz-checksum-{name}')
            if expected and '-' not in expected:
                return make(), expected
        return None


def _set_low_water(sock: Any, nbytes: int) -> bool:
    """Have the kernel wake a read of ``sock`` only once ``nbytes`` are queued (Linux)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, nbytes)
    except (OSError, AttributeError, ValueError):
        return False
    return True


def body(response: http.client.HTTPResponse, release: Callable[[bool], None], chunk_size: int,
         check: tuple[Any, str] | None, fail: Callable[[str | Exception], Exception]
         ) -> Iterator[bytes]:
    """The response's body chunk by chunk; the connection is kept only if read to its end.

    A connection receives at a fraction of the link, so the kernel would wake a plain read for
    every few packets that arrive: a thread switch and a GIL hand-off each, most of the CPU a
    download costs. While at least two chunks (and ``LOW_WATER_MARGIN``) of the body are still
    to come, the socket's low-water mark (``SO_RCVLOWAT``) makes each read wait for a whole
    chunk; the last chunks are read as they come, so a read never waits for bytes that will
    not arrive, and the mark is put back before the connection serves another request.
    """
    done = False
    sock = getattr(response, 'light_socket', None) if _LOW_WATER else None
    raised = False
    try:
        while True:
            if sock is not None:
                left = response.length
                want = left is not None and left >= 2 * chunk_size + LOW_WATER_MARGIN
                if want != raised and _set_low_water(sock, chunk_size if want else 1):
                    raised = want
            try:
                data = response.read(chunk_size)
            except (OSError, http.client.HTTPException) as error:
                raise fail(error) from None
            if not data:
                if response.length:  # http.client ends a cut-off body quietly.
                    raise fail(http.client.IncompleteRead(b'', response.length))
                break
            if check is not None:
                check[0].update(data)
            yield data
        done = True
        if check is not None:
            got = base64.b64encode(check[0].digest()).decode()
            if got != check[1]:
                raise fail(f'checksum mismatch: expected {check[1]}, got {got}')
    finally:
        if raised and not _set_low_water(sock, 1):
            done = False  # Not put back: the connection must not serve another request.
        release(done)


def error_code(status: int, payload: bytes) -> tuple[str, str]:
    """(Code, Message) of an S3 error document, or the status when there is none (HEAD)."""
    text = payload.decode('utf-8', 'replace')
    code = re.search(r'<Code>([^<]*)</Code>', text)
    message = re.search(r'<Message>([^<]*)</Message>', text)
    return (code.group(1) if code else str(status),
            message.group(1) if message else http.client.responses.get(status, ''))

