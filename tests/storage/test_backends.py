"""Every backend against its server: upload, list, single and ranged download, errors.

S3 runs against moto's server, GCS against gcp-storage-emulator, Azure (blob and Data Lake)
against Azurite, http(s) against moto's public path-style URLs, and OCI against tests/storage/
servers.FakeOCI: OCI has no emulator, so a small local HTTP server speaks the Object Storage
calls the backend makes (HEAD, ranged GET with If-Match, PUT, paginated list) and checks that
each request carries an OCI signature.
"""

from __future__ import annotations

import os

import pytest

from streaming.storage import DownloadConfig, download_file, get_backend, upload_file
from streaming.storage.errors import UploadError
from tests.storage.conftest import new_name

BACKENDS = ['file', 's3', 'gcs', 'azure', 'azure-dl', 'oci']


@pytest.fixture(params=BACKENDS)
def root(request, tmp_path) -> str:
    """A fresh, empty remote directory URL on one backend."""
    kind = request.param
    if kind == 'file':
        os.makedirs(tmp_path / 'remote')
        return f'file://{tmp_path}/remote/{new_name("d")}'
    if kind == 's3':
        _, bucket = request.getfixturevalue('s3')
        return f's3://{bucket}/data'
    if kind == 'gcs':
        _, bucket = request.getfixturevalue('gcs')
        return f'gs://{bucket}/data'
    if kind in ('azure', 'azure-dl'):
        _, container = request.getfixturevalue('azure')
        return f'{kind}://{container}/data'
    server, bucket = request.getfixturevalue('oci')
    return f'oci://{bucket}@ns/data'


def _put(tmp_path, root: str, name: str, data: bytes) -> str:
    path = tmp_path / f'src-{name.replace("/", "_")}'
    path.write_bytes(data)
    url = f'{root}/{name}'
    upload_file(str(path), url)
    return url


def test_round_trip_single_and_ranged(root, tmp_path) -> None:
    small = os.urandom(100_000)
    large = os.urandom(1_300_000)
    small_url = _put(tmp_path, root, 'a/small.bin', small)
    large_url = _put(tmp_path, root, 'a/large.bin', large)
    _put(tmp_path, root, 'b/other.bin', b'x')
    assert get_backend(root).list(f'{root}/a') == sorted([small_url, large_url])

    out = tmp_path / 'out'
    download_file(small_url, str(out / 'small'))
    assert (out / 'small').read_bytes() == small
    # 1.3 MB in 256 KiB parts, 3 at a time: six ranged GETs pinned to one ETag.
    config = DownloadConfig(part_size=256 << 10, concurrency=3)
    download_file(large_url, str(out / 'large'), config=config)
    assert (out / 'large').read_bytes() == large
    download_file(large_url, str(out / 'sized'), size=len(large), config=config)
    assert (out / 'sized').read_bytes() == large
    assert sorted(os.listdir(out)) == ['large', 'sized', 'small']


def test_missing_object_is_file_not_found_naming_url(root, tmp_path) -> None:
    url = f'{root}/no/such/object.bin'
    with pytest.raises(FileNotFoundError, match='object.bin'):
        download_file(url, str(tmp_path / 'out' / 'x'), retries=3)
    assert os.listdir(tmp_path / 'out') == []  # No partial or temporary file left.


def test_wrong_size_is_refetched_then_reported(root, tmp_path) -> None:
    from streaming.storage import CorruptDownloadError
    url = _put(tmp_path, root, 'f.bin', b'0123456789')
    with pytest.raises(CorruptDownloadError, match=r'after 2 attempt\(s\).*expected 11'):
        download_file(url, str(tmp_path / 'out' / 'f'), retries=1, size=11)
    assert os.listdir(tmp_path / 'out') == []


def test_upload_to_missing_bucket_fails_fast_naming_url(request, tmp_path) -> None:
    request.getfixturevalue('s3')
    src = tmp_path / 'f'
    src.write_bytes(b'data')
    url = f's3://{new_name("nobucket")}/f'
    with pytest.raises((FileNotFoundError, UploadError), match='nobucket'):
        upload_file(str(src), url, retries=1)


def test_oci_requests_are_signed_and_listing_paginates(oci, tmp_path) -> None:
    server, bucket = oci
    root = f'oci://{bucket}@ns/p'
    urls = [_put(tmp_path, root, f'{i}.bin', bytes([i]) * 10) for i in range(5)]
    assert get_backend(root).list(root) == urls  # Five objects over three pages of two.
    assert server.requests and all(signed for _, _, signed in server.requests)
    with pytest.raises(ValueError, match='oci://BUCKET@NAMESPACE/PATH'):
        download_file('oci://bucket-without-namespace/x', str(tmp_path / 'x'))


def test_http_reads_public_objects_with_ranges(s3, moto, tmp_path) -> None:
    client, bucket = s3
    data = os.urandom(700_000)
    client.put_object(Bucket=bucket, Key='pub/obj.bin', Body=data, ACL='public-read')
    url = f'{moto.url}/{bucket}/pub/obj.bin'
    download_file(url, str(tmp_path / 'one'))
    download_file(url, str(tmp_path / 'parts'), config=DownloadConfig(part_size=100_000))
    assert (tmp_path / 'one').read_bytes() == data == (tmp_path / 'parts').read_bytes()
    with pytest.raises(FileNotFoundError, match='missing.bin'):
        download_file(f'{moto.url}/{bucket}/missing.bin', str(tmp_path / 'm'))
    with pytest.raises(NotImplementedError, match='read-only'):
        upload_file(str(tmp_path / 'one'), url)


def test_gcs_hmac_keys_use_the_s3_interoperable_api(moto, monkeypatch, tmp_path) -> None:
    from tests.storage.conftest import s3_client
    bucket = new_name('hmac')
    s3_client(moto.url).create_bucket(Bucket=bucket)
    monkeypatch.setenv('GCS_KEY', 'GOOG1EFAKEKEY')
    monkeypatch.setenv('GCS_SECRET', 'fake-gcs-hmac-secret-77')
    monkeypatch.setenv('GCS_HMAC_ENDPOINT_URL', moto.url)
    backend = get_backend(f'gs://{bucket}/x')
    assert 'hmac' in repr(backend) and 'fake-gcs' not in repr(backend)
    url = _put(tmp_path, f'gs://{bucket}/d', 'f.bin', b'hello gcs')
    download_file(url, str(tmp_path / 'f'))
    assert (tmp_path / 'f').read_bytes() == b'hello gcs'
    assert s3_client(moto.url).get_object(Bucket=bucket, Key='d/f.bin')['Body'].read() == \
        b'hello gcs'


def test_azure_url_means_the_same_for_upload_and_download(azure, tmp_path) -> None:
    client, container = azure
    url = _put(tmp_path, f'azure://{container}/x', 'y.bin', b'same place')
    blob = client.get_blob_client(container, 'x/y.bin').download_blob().readall()
    assert blob == b'same place'  # Written where the URL says: container, then blob path.
    download_file(url, str(tmp_path / 'y'))
    assert (tmp_path / 'y').read_bytes() == b'same place'
    # The account-qualified form names the same blob.
    from streaming.storage.azure import AzureBackend
    assert AzureBackend().locate(f'azure://acct.blob.core.windows.net/{container}/x/y.bin')[1:] \
        == (container, 'x/y.bin')
    assert AzureBackend().locate(url)[1:] == (container, 'x/y.bin')


def test_s3_unsigned_requests_when_there_are_no_credentials(moto, monkeypatch, tmp_path) -> None:
    from tests.storage.conftest import s3_client
    bucket = new_name('public')
    client = s3_client(moto.url)
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key='k', Body=b'public bytes', ACL='public-read')
    monkeypatch.setenv('S3_ENDPOINT_URL', moto.url)
    monkeypatch.setenv('AWS_DEFAULT_REGION', 'us-east-1')
    backend = get_backend(f's3://{bucket}/k')
    download_file(f's3://{bucket}/k', str(tmp_path / 'k'))
    assert (tmp_path / 'k').read_bytes() == b'public bytes'
    assert backend._unsigned is True


def test_s3_canned_acl_and_requester_pays(s3, monkeypatch, tmp_path) -> None:
    client, bucket = s3
    monkeypatch.setenv('S3_CANNED_ACL', 'public-read')
    monkeypatch.setenv('MOSAICML_STREAMING_AWS_REQUESTER_PAYS', f'other,{bucket}')
    url = _put(tmp_path, f's3://{bucket}', 'acl.bin', b'acl')
    grants = client.get_object_acl(Bucket=bucket, Key='acl.bin')['Grants']
    assert any(g['Grantee'].get('URI', '').endswith('/AllUsers') and g['Permission'] == 'READ'
               for g in grants)
    from streaming.storage.s3 import S3Backend
    assert S3Backend()._payer(bucket) == {'RequestPayer': 'requester'}
    assert S3Backend()._payer('unlisted') == {}
    download_file(url, str(tmp_path / 'acl'))  # Requests with RequestPayer are accepted.
    assert (tmp_path / 'acl').read_bytes() == b'acl'


def test_hf_urls_resolve_through_the_hub_and_download_with_ranges(s3, moto, monkeypatch,
                                                                   tmp_path) -> None:
    """hf:// against a local stand-in for the Hub's ``resolve`` endpoint (there is no Hub
    emulator): it checks the token and redirects to the object in moto, as the Hub redirects to
    its CDN. Downloads then follow the shared HTTP path."""
    from http import HTTPStatus

    from tests.storage.servers import Quiet, Threaded
    client, bucket = s3
    data = os.urandom(500_000)
    client.put_object(Bucket=bucket, Key='lfs/blob', Body=data, ACL='public-read')
    seen = []

    class Hub(Quiet):
        def _answer(self) -> None:
            seen.append((self.command, self.path, self.headers.get('Authorization')))
            if self.path != '/datasets/org/name/resolve/v1.0/dir/shard.bin':
                self.send_response(HTTPStatus.NOT_FOUND)
            else:
                self.send_response(HTTPStatus.FOUND)
                self.send_header('Location', f'{moto.url}/{bucket}/lfs/blob')
            self.send_header('Content-Length', '0')
            self.end_headers()

        do_GET = do_HEAD = _answer  # noqa: N815

    hub = Threaded(Hub)
    try:
        monkeypatch.setenv('HF_ENDPOINT', hub.url)
        monkeypatch.setenv('HF_TOKEN', 'hf_testtoken_abc123')
        url = 'hf://datasets/org/name@v1.0/dir/shard.bin'
        download_file(url, str(tmp_path / 'one'))
        download_file(url, str(tmp_path / 'parts'), config=DownloadConfig(part_size=100_000))
        assert (tmp_path / 'one').read_bytes() == data == (tmp_path / 'parts').read_bytes()
        resolves = [auth for _, path, auth in seen if '/resolve/' in path]
        assert resolves and all(auth == 'Bearer hf_testtoken_abc123' for auth in resolves)
        with pytest.raises(FileNotFoundError, match='missing.bin'):
            download_file('hf://datasets/org/name/missing.bin', str(tmp_path / 'm'))
    finally:
        hub.stop()
