"""Fixtures for the storage tests: real servers on 127.0.0.1, fake credentials, fresh backends.

Each pytest-xdist worker starts its own servers on free ports (session scope); each test gets
its own bucket/container. Credentials are fakes set through monkeypatch; the user's real AWS,
GCP, Azure and OCI configuration is hidden so it can never be read.

An emulator that is not installed skips its tests, unless STREAMING_REQUIRE_EMULATORS=1 (set by
.ci/run), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import tempfile
import uuid

import pytest

from streaming.storage import registry
from streaming.storage.pacing import PACER
from tests.storage import servers

# Distinctive fake secrets: tests assert they never appear in messages, logs or reprs.
AWS_SECRET = 'fake-aws-secret-Qx7vZt93'
AZURITE_ACCOUNT = 'devstoreaccount1'
AZURITE_KEY = ('Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/'
               'KBHBeksoGMGw==')


def _require(what: str) -> None:
    if os.environ.get('STREAMING_REQUIRE_EMULATORS') == '1':
        pytest.fail(f'{what} is required (STREAMING_REQUIRE_EMULATORS=1) but not available.')
    pytest.skip(f'{what} is not available')


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No real credentials, fast backoff, and backends built afresh for each test."""
    for name in list(os.environ):
        if name.startswith(('AWS_', 'S3_', 'GCS_', 'AZURE_', 'OCI_', 'HF_', 'GOOGLE_',
                            'STORAGE_EMULATOR', 'MOSAICML_STREAMING_AWS', 'STREAMING_DOWNLOAD')):
            monkeypatch.delenv(name, raising=False)
    nowhere = str(tmp_path / 'no-such-config')
    monkeypatch.setenv('AWS_CONFIG_FILE', nowhere)
    monkeypatch.setenv('AWS_SHARED_CREDENTIALS_FILE', nowhere)
    monkeypatch.setenv('AWS_EC2_METADATA_DISABLED', 'true')
    monkeypatch.setenv('CLOUDSDK_CONFIG', nowhere)
    monkeypatch.setenv('HF_HOME', str(tmp_path / 'hf-home'))
    monkeypatch.setenv('STREAMING_DOWNLOAD_BACKOFF', '0.05')
    monkeypatch.setenv('STREAMING_DOWNLOAD_BACKOFF_MAX', '0.5')
    monkeypatch.setattr(registry, '_instances', {})
    PACER.reset()  # A throttled test's pacing must not slow the next test's downloads.


def new_name(prefix: str = 'test') -> str:
    return f'{prefix}-{uuid.uuid4().hex[:12]}'


# ---- S3 (moto) ------------------------------------------------------------------------------
@pytest.fixture(scope='session')
def moto():
    try:
        import moto.server  # noqa: F401
    except ImportError:
        _require('moto[server]')
    server = servers.moto_server()
    yield server
    server.stop()


def s3_env(monkeypatch, endpoint: str) -> None:
    monkeypatch.setenv('S3_ENDPOINT_URL', endpoint)
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'fake-key-id')
    monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', AWS_SECRET)
    monkeypatch.setenv('AWS_DEFAULT_REGION', 'us-east-1')


def s3_client(endpoint: str):
    import boto3
    return boto3.client('s3', endpoint_url=endpoint, aws_access_key_id='fake-key-id',
                        aws_secret_access_key=AWS_SECRET, region_name='us-east-1')


@pytest.fixture
def s3(moto, monkeypatch):
    """(client, bucket) with S3_ENDPOINT_URL pointing at moto and a fresh bucket."""
    s3_env(monkeypatch, moto.url)
    client = s3_client(moto.url)
    bucket = new_name('bucket')
    client.create_bucket(Bucket=bucket)
    return client, bucket


# ---- GCS (gcp-storage-emulator) ---------------------------------------------------------------
@pytest.fixture(scope='session')
def gcs_server():
    try:
        import gcp_storage_emulator  # noqa: F401
        import google.cloud.storage  # noqa: F401
    except ImportError:
        _require('gcp-storage-emulator and google-cloud-storage')
    server = servers.gcs_emulator()
    yield server
    server.stop()


@pytest.fixture
def gcs(gcs_server, monkeypatch):
    """(client, bucket) with STORAGE_EMULATOR_HOST set and a fresh bucket."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', gcs_server.url)
    client = storage.Client(project='emulator', credentials=AnonymousCredentials())
    bucket = new_name('bucket')
    client.create_bucket(bucket)
    return client, bucket


# ---- Azure (Azurite) --------------------------------------------------------------------------
@pytest.fixture(scope='session')
def azurite_server():
    try:
        import azure.storage.blob  # noqa: F401
    except ImportError:
        _require('azure-storage-blob')
    if servers.azurite_binary() is None:
        _require('Azurite (npm package azurite; .ci/run installs it)')
    with tempfile.TemporaryDirectory(prefix='azurite-') as workdir:
        server = servers.azurite(workdir)
        yield server
        server.stop()


@pytest.fixture
def azure(azurite_server, monkeypatch):
    """(service client, container) with the shared-key env pointing at Azurite."""
    from azure.storage.blob import BlobServiceClient
    endpoint = f'{azurite_server.url}/{AZURITE_ACCOUNT}'
    monkeypatch.setenv('AZURE_ACCOUNT_NAME', AZURITE_ACCOUNT)
    monkeypatch.setenv('AZURE_ACCOUNT_ACCESS_KEY', AZURITE_KEY)
    monkeypatch.setenv('AZURE_STORAGE_ENDPOINT', endpoint)
    client = BlobServiceClient(endpoint, credential={'account_name': AZURITE_ACCOUNT,
                                                     'account_key': AZURITE_KEY})
    container = new_name('container')
    client.create_container(container)
    return client, container


# ---- OCI (local fake) -------------------------------------------------------------------------
@pytest.fixture
def oci(tmp_path, monkeypatch):
    """A FakeOCI server, an oci config file with a fresh API key, and a bucket in namespace
    ``ns``. OCI has no emulator: the fake speaks the calls the backend makes."""
    try:
        import oci as oci_sdk  # noqa: F401
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError:
        _require('the oci SDK')
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = tmp_path / 'oci_api_key.pem'
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    config = tmp_path / 'oci_config'
    config.write_text('[DEFAULT]\n'
                      'user=ocid1.user.oc1..aaaafakeuser\n'
                      'fingerprint=12:34:56:78:9a:bc:de:f0:12:34:56:78:9a:bc:de:f0\n'
                      'tenancy=ocid1.tenancy.oc1..aaaafaketenancy\n'
                      'region=us-ashburn-1\n'
                      f'key_file={key_file}\n')
    server = servers.FakeOCI()
    bucket = new_name('bucket')
    server.buckets.add(bucket)
    monkeypatch.setenv('OCI_CONFIG_FILE', str(config))
    monkeypatch.setenv('OCI_SERVICE_ENDPOINT', server.url)
    yield server, bucket
    server.stop()
