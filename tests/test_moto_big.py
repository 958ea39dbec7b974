"""benchmarks/moto_big.py answers GETs of big objects with the bytes and headers moto would."""

import os

import pytest

pytest.importorskip('moto')

from benchmarks import moto_big  # noqa: E402


def _get(path: str, header: str | None = None) -> tuple[str, dict, bytes] | None:
    environ = {'REQUEST_METHOD': 'GET', 'PATH_INFO': path, 'QUERY_STRING': ''}
    if header is not None:
        environ['HTTP_RANGE'] = header
    seen: dict = {}

    def start_response(status: str, headers: list) -> None:
        seen['status'], seen['headers'] = status, dict(headers)

    body = moto_big.serve(environ, start_response)
    if body is None:
        return None
    return seen['status'], seen['headers'], b''.join(body)


def test_ranges_come_from_the_spooled_object(monkeypatch):
    import boto3
    from moto import mock_aws
    monkeypatch.setattr(moto_big, 'THRESHOLD', 6 << 20)
    monkeypatch.setattr(moto_big, 'CHUNK', 1 << 18)
    data = os.urandom((6 << 20) + 12345)
    with mock_aws():
        client = boto3.client('s3', region_name='us-east-1')
        client.create_bucket(Bucket='bkt')
        client.put_object(Bucket='bkt', Key='dir/big.bin', Body=data)
        client.put_object(Bucket='bkt', Key='small.bin', Body=b'x' * 100)
        etag = client.head_object(Bucket='bkt', Key='dir/big.bin')['ETag']
        status, headers, body = _get('/bkt/dir/big.bin')
        assert (status, body, headers['ETag']) == ('200 OK', data, etag)
        assert headers['Content-Length'] == str(len(data))
        status, headers, body = _get('/bkt/dir/big.bin', 'bytes=1000-2999999')
        assert status.startswith('206') and body == data[1000:3_000_000]
        assert headers['Content-Range'] == f'bytes 1000-2999999/{len(data)}'
        assert _get('/bkt/dir/big.bin', 'bytes=6000000-')[2] == data[6_000_000:]
        assert _get('/bkt/dir/big.bin', 'bytes=-10')[2] == data[-10:]
        assert _get('/bkt/dir/big.bin', 'bytes=5-99999999')[2] == data[5:]
        # moto answers the rest: small objects, missing keys, ranges it cannot satisfy.
        assert _get('/bkt/small.bin') is None
        assert _get('/bkt/nothing') is None and _get('/nobucket/x') is None
        assert _get('/bkt/dir/big.bin', f'bytes={len(data)}-') is None
        assert _get('/bkt/dir/big.bin', 'bytes=0-1,5-6') is None
