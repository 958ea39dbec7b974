"""S3 reads without boto3 (``streaming.storage.s3_light``): when they are used, and that they sign,
address, check and fail as boto3 would."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from streaming.storage import s3_light
from streaming.storage.download import download_file
from streaming.storage.errors import TransientError
from streaming.storage.registry import get_backend

SECRET = 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY'


def _env(monkeypatch, **values: str) -> None:
    for name, value in values.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize('endpoint,region,bucket', [
    ('http://127.0.0.1:9000', None, 'my-bucket'),
    ('https://acc.r2.cloudflarestorage.com', 'auto', 'my.bucket'),
    (None, 'eu-west-1', 'my-bucket'),
    (None, 'us-east-1', 'my.dotted.bucket'),
])
def test_signature_and_address_are_botocores(monkeypatch, endpoint, region, bucket) -> None:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    _env(monkeypatch, AWS_ACCESS_KEY_ID='AKIDEXAMPLE', AWS_SECRET_ACCESS_KEY=SECRET,
         AWS_SESSION_TOKEN='token')
    if region:
        monkeypatch.setenv('AWS_DEFAULT_REGION', region)
    settings = s3_light.light_settings(endpoint)  # R2's region is "auto".
    assert settings is not None
    key = 'a b/c+d~\u00e9.bin'
    host, path = settings.address(bucket, key)
    scheme = 'https' if settings.https else 'http'
    # The URL boto3 itself would request.
    import boto3
    client = boto3.client('s3', endpoint_url=endpoint, region_name=settings.region)
    expected = client.generate_presigned_url('get_object', Params={'Bucket': bucket, 'Key': key})
    if endpoint is None and settings.region != 'us-east-1' and '.' not in bucket:
        expected = expected.replace('.s3.amazonaws.com', f'.s3.{settings.region}.amazonaws.com')
    assert expected.split('?')[0] == f'{scheme}://{host}{path}'
    request = AWSRequest(method='GET', url=f'{scheme}://{host}{path}',
                         headers={'Range': 'bytes=0-9', 'x-amz-request-payer': 'requester',
                                  'X-Amz-Content-SHA256': s3_light.EMPTY_SHA256})
    S3SigV4Auth(Credentials('AKIDEXAMPLE', SECRET, 'token'), 's3',
                settings.region).add_auth(request)
    mine = s3_light.sign(settings, 'GET', host, path,
                         {'range': 'bytes=0-9', 'x-amz-request-payer': 'requester'},
                         request.headers['X-Amz-Date'])
    assert mine['authorization'] == request.headers['Authorization']


@pytest.mark.parametrize('change,light', [
    ({}, True),
    ({'S3_UNSIGNED': '1', 'AWS_ACCESS_KEY_ID': '', 'AWS_SECRET_ACCESS_KEY': ''}, True),
    ({'AWS_ACCESS_KEY_ID': '', 'AWS_SECRET_ACCESS_KEY': ''}, False),  # boto3's chain decides.
    ({'AWS_PROFILE': 'other'}, False),
    ({'AWS_ENDPOINT_URL_S3': 'http://elsewhere'}, False),
    ({'AWS_USE_FIPS_ENDPOINT': 'true'}, False),
    ({'HTTPS_PROXY': 'http://proxy:3128'}, False),
    ({'STREAMING_S3_CLIENT': 'boto3'}, False),
    ({'AWS_REGION': 'eu-west-1'}, False),  # Disagrees with AWS_DEFAULT_REGION.
    ({'config': '[default]\nregion = eu-west-1\n'}, False),
])
def test_used_only_when_the_environment_says_everything(monkeypatch, tmp_path, change,
                                                         light) -> None:
    _env(monkeypatch, AWS_ACCESS_KEY_ID='id', AWS_SECRET_ACCESS_KEY=SECRET,
         AWS_DEFAULT_REGION='us-east-1')
    for name, value in change.items():
        if name == 'config':
            (tmp_path / 'config').write_text(value)
            monkeypatch.setenv('AWS_CONFIG_FILE', str(tmp_path / 'config'))
        elif value:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
    assert (s3_light.light_settings('http://127.0.0.1:9000') is not None) == light


def test_aws_without_a_region_is_left_to_boto3(monkeypatch) -> None:
    _env(monkeypatch, AWS_ACCESS_KEY_ID='id', AWS_SECRET_ACCESS_KEY=SECRET)
    assert s3_light.light_settings(None) is None
    monkeypatch.setenv('AWS_DEFAULT_REGION', 'cn-north-1')  # Another partition.
    assert s3_light.light_settings(None) is None


class _Body:
    length = None  # http.client's bytes still expected (None: not told).

    def __init__(self, data: bytes, fail_after: int | None = None) -> None:
        self.data, self.fail_after = io.BytesIO(data), fail_after

    def read(self, n: int) -> bytes:
        if self.fail_after is not None and self.data.tell() >= self.fail_after:
            raise ConnectionResetError('reset by peer')
        return self.data.read(n)


def test_body_checks_the_checksum_and_keeps_the_connection_only_when_read_whole() -> None:
    import base64
    import zlib
    data = os.urandom(100_000)
    released = []
    good = base64.b64encode(zlib.crc32(data).to_bytes(4, 'big')).decode()
    light = s3_light.LightS3(s3_light.Settings(False, 'h', 80, False, 'us-east-1', None, None,
                                               None, True))
    check = light.checker({'x-amz-checksum-crc32': good})
    assert b''.join(s3_light.body(_Body(data), released.append, 4096, check,
                                  TransientError)) == data
    assert released == [True]
    check = light.checker({'x-amz-checksum-crc32': good})
    with pytest.raises(TransientError, match='checksum mismatch'):
        b''.join(s3_light.body(_Body(data[::-1]), released.append, 4096, check,
                               lambda why: TransientError(str(why))))
    assert released[-1] is True  # Read to its end: the connection can serve another request.
    with pytest.raises(TransientError, match='reset by peer'):
        b''.join(s3_light.body(_Body(data, fail_after=8192), released.append, 4096, None,
                               lambda why: TransientError(str(why))))
    assert released[-1] is False
    assert light.checker({'x-amz-checksum-crc32': 'abc-3'}) is None  # Composite: not checked.


def test_the_crc32_in_use_agrees_with_zlib_across_chunk_boundaries() -> None:
    import importlib.util
    import zlib
    data = os.urandom(1_000_003)
    crc = s3_light._Crc32()
    for start in range(0, len(data), 65_537):  # Odd chunk sizes: the running value carries.
        crc.update(memoryview(data)[start:start + 65_537])
    assert crc.digest() == zlib.crc32(data).to_bytes(4, 'big')
    if importlib.util.find_spec('isal') is not None:  # The fast-crc extra is used when present.
        from isal.isal_zlib import crc32
        assert s3_light._crc32 is crc32


def test_reads_from_moto_without_importing_boto3(s3, moto, tmp_path) -> None:
    client, bucket = s3
    data = os.urandom(300_000)
    client.put_object(Bucket=bucket, Key='d/obj.bin', Body=data)
    code = (
        'import json, sys\n'
        'from streaming.storage.download import download_file\n'
        'from streaming.storage.registry import get_backend\n'
        f'url = "s3://{bucket}/d/obj.bin"\n'
        'download_file(url, sys.argv[1])\n'
        'download_file(url, sys.argv[1] + ".2", size=300_000)\n'
        'backend = get_backend(url)\n'
        'part = b"".join(backend.read(url, 10, 20, timeout=10).chunks)\n'
        'missing = []\n'
        'for call in (lambda u: download_file(u, sys.argv[1] + ".3"),\n'
        '             lambda u: backend.read(u, timeout=10)):\n'
        '    try:\n'
        f'        call("s3://{bucket}/d/missing.bin")\n'
        '    except FileNotFoundError as e:\n'
        '        missing.append([type(e).__name__, e.response["Error"]["Code"],\n'
        '                        e.operation_name])\n'
        'print(json.dumps({"boto3": "boto3" in sys.modules, "part": part.hex(),\n'
        '                  "missing": missing}))\n')
    out = subprocess.run([sys.executable, '-c', code, str(tmp_path / 'obj')], env=os.environ,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result['boto3'] is False
    assert bytes.fromhex(result['part']) == data[10:20]
    assert result['missing'] == [['S3NotFoundError', '404', 'HeadObject'],  # As boto3's.
                                 ['S3NotFoundError', 'NoSuchKey', 'GetObject']]
    assert (tmp_path / 'obj').read_bytes() == data == (tmp_path / 'obj.2').read_bytes()


def test_boto3_setting_keeps_reads_on_boto3(s3, monkeypatch, tmp_path) -> None:
    client, bucket = s3
    client.put_object(Bucket=bucket, Key='k', Body=b'abc')
    monkeypatch.setenv('STREAMING_S3_CLIENT', 'boto3')
    download_file(f's3://{bucket}/k', str(tmp_path / 'k'))
    assert (tmp_path / 'k').read_bytes() == b'abc'
    assert get_backend(f's3://{bucket}/k')._light_client() is None


@pytest.mark.parametrize('client_setting', ['auto', 'boto3'])
def test_a_changed_endpoint_is_followed_in_the_same_process(s3, monkeypatch, tmp_path,
                                                            client_setting) -> None:
    """The backend is built once per process; reads go where S3_ENDPOINT_URL says now, not
    where it pointed when the first client was built (either client)."""
    import socket
    client, bucket = s3
    client.put_object(Bucket=bucket, Key='k', Body=b'abc')
    monkeypatch.setenv('STREAMING_S3_CLIENT', client_setting)
    url = f's3://{bucket}/k'
    download_file(url, str(tmp_path / 'a'))
    with socket.socket() as spare:  # A port with nobody listening.
        spare.bind(('127.0.0.1', 0))
        dead = f'http://127.0.0.1:{spare.getsockname()[1]}'
    real = os.environ['S3_ENDPOINT_URL']
    monkeypatch.setenv('S3_ENDPOINT_URL', dead)
    with pytest.raises(Exception, match='refused|Could not connect|failed'):
        download_file(url, str(tmp_path / 'b'), retries=0)
    assert not (tmp_path / 'b').exists()
    monkeypatch.setenv('S3_ENDPOINT_URL', real)
    download_file(url, str(tmp_path / 'c'))
    assert (tmp_path / 'a').read_bytes() == (tmp_path / 'c').read_bytes() == b'abc'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def _light_to(handler: type[_Handler]) -> Iterator[s3_light.LightS3]:
    """A ``LightS3`` whose requests go to a local HTTP/1.1 server answering with ``handler``."""
    server = ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield s3_light.LightS3(s3_light.Settings(False, '127.0.0.1', server.server_port, False,
                                                 'us-east-1', None, None, None, False))
    finally:
        server.shutdown()


@pytest.mark.parametrize('closes', [False, True])
def test_connections_are_kept_and_a_closed_one_is_replaced(closes) -> None:
    """HTTP/1.1 keep-alive: one connection serves both requests; a kept connection the server
    closed without saying so is replaced once, transparently."""
    connections = []

    class Handler(_Handler):
        def setup(self) -> None:
            connections.append(1)
            super().setup()

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header('Content-Length', '5')
            self.end_headers()
            self.wfile.write(b'hello')
            self.close_connection = closes  # Without "Connection: close".

    with _light_to(Handler) as light:
        for _ in range(2):
            status, _, response, release = light.request('GET', 'b', 'k', {}, 5.0)
            assert status == 200
            assert b''.join(s3_light.body(response, release, 4096, None,
                                          TransientError)) == b'hello'
        assert len(connections) == (2 if closes else 1)


@pytest.mark.skipif(not s3_light._LOW_WATER, reason='SO_RCVLOWAT is used on Linux only')
@pytest.mark.parametrize('closes', [False, True])
def test_a_body_read_with_a_low_water_mark_never_waits_for_bytes_that_do_not_come(closes):
    """Bodies around the size where the mark is raised arrive whole and on time, sent in pieces
    smaller than a chunk with pauses between them; the mark is a chunk while the body is long
    and back at 1 when the connection is returned, so its next answer's headers are read."""
    import socket
    import time
    chunk = 64 << 10
    edge = 2 * chunk + s3_light.LOW_WATER_MARGIN
    sizes = [10, chunk, edge - 1, edge, edge + 1, edge + chunk - 3, 5 * chunk + 7]
    payloads = {str(n): os.urandom(n) for n in sizes}

    class Handler(_Handler):
        def do_GET(self) -> None:  # noqa: N802
            data = payloads[self.path.rsplit('/', 1)[1]]
            self.send_response(200)
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            for at in range(0, len(data), 20_000):  # Pieces, each below a chunk, then a pause.
                self.wfile.write(data[at:at + 20_000])
                self.wfile.flush()
                time.sleep(0.002)
            self.close_connection = closes

    with _light_to(Handler) as light:
        for name, data in payloads.items():
            began = time.monotonic()
            status, _, response, release = light.request('GET', 'b', name, {}, 30.0)
            assert status == 200
            sock = response.light_socket
            marks, got = [], []
            for piece in s3_light.body(response, release, chunk, None, TransientError):
                got.append(piece)
                if sock.fileno() >= 0:
                    marks.append(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))
            assert b''.join(got) == data
            # A read that waited would time out (30 s); the margin is for a loaded machine.
            assert time.monotonic() - began < 20
            if len(data) >= edge:
                assert marks[0] == chunk  # Raised while two chunks and the margin were to come.
            assert not marks or marks[-1] == 1
            if not closes:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1  # Put back.


def test_a_get_on_a_kept_connection_runs_unwatched_and_a_stall_still_times_out(monkeypatch,
                                                                              tmp_path) -> None:
    """The boto3-free GET carries the timeout on every socket operation, so on a kept
    connection (no name lookup, no handshake) the download runs it in the calling thread,
    without the watchdog's thread. A body that stops half-way still fails as a stall does
    under the watchdog: a TimeoutError saying no data came for the timeout, within a few
    timeouts, and nothing left behind."""
    import re
    import time

    from streaming.storage import watchdog
    from streaming.storage.errors import DownloadError
    body = os.urandom(100_000)
    release = threading.Event()

    class Handler(_Handler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            if self.path.endswith('/stall'):
                self.wfile.write(body[:50_000])
                self.wfile.flush()
                release.wait(60)
                self.close_connection = True
                return
            self.wfile.write(body)

    server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    submitted = []
    real_submit = watchdog._submit
    monkeypatch.setattr(watchdog, '_submit', lambda job: (submitted.append(1), real_submit(job)))
    _env(monkeypatch, AWS_ACCESS_KEY_ID='id', AWS_SECRET_ACCESS_KEY=SECRET,
         S3_ENDPOINT_URL=f'http://127.0.0.1:{server.server_port}',
         AWS_CONFIG_FILE=str(tmp_path / 'no-config'))
    out = tmp_path / 'out'
    try:
        for name in ('first', 'second'):
            download_file('s3://b/ok', str(out / name), size=len(body), timeout=30.0)
            assert (out / name).read_bytes() == body
        # The first GET opened the connection under the watchdog; the second reused it, unwatched.
        assert len(submitted) == 1
        started = time.monotonic()
        with pytest.raises(DownloadError) as caught:
            download_file('s3://b/stall', str(out / 'stalled'), size=len(body), retries=0,
                          timeout=1.0)
        assert len(submitted) == 1  # Unwatched too: the socket's timeout ended it.
        assert re.search(r's3://b/stall.*no data received for 1s', str(caught.value))
        assert isinstance(caught.value.__cause__, TimeoutError)
        assert time.monotonic() - started < 15  # One timeout; the margin is for a loaded machine.
        assert sorted(os.listdir(out)) == ['first', 'second']
    finally:
        release.set()
        server.shutdown()
