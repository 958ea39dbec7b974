"""Secrets never leave: not in messages, chained causes and contexts, reprs or logs.

Each case fails a real operation against a closed local port (connection refused), with
credentials in the environment or inside the URL, then prints the whole traceback with
``traceback.format_exception`` (which walks ``__cause__`` and ``__context__``) and the logs.
"""

from __future__ import annotations

import logging
import os
import socket
import traceback
from typing import Any, Callable

import pytest

SECRET = 'Zq9SecretValue7Kx'  # Distinctive: any occurrence is a leak.


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _everything(error: BaseException) -> str:
    """The full traceback with chained exceptions, plus the reprs and args along the chain."""
    parts = traceback.format_exception(error)
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        parts += [repr(error), str(error.args)]
        parts += [f'{k}={v!r}' for k, v in vars(error).items()] if hasattr(error, '__dict__') \
            else []
        # The chain Python prints: the cause, else the context unless suppressed (from None).
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return '\n'.join(parts)


def _assert_no_secret(call: Callable[[], Any], caplog: Any) -> str:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(Exception) as info:
        call()
    text = _everything(info.value)
    assert SECRET not in text, text
    # Every log record at every level, the SDKs' DEBUG records (botocore quotes endpoint URLs)
    # included: streaming.storage.secrets.redact_sdk_logs redacts those as they are made.
    logged = '\n'.join(r.getMessage() for r in caplog.records)
    assert SECRET not in logged, logged
    return text


def _download(url: str) -> Callable[[], Any]:
    from streaming.storage import download_file

    def call() -> None:
        download_file(url, os.path.join(os.environ['SECRETS_TMP'], 'x'), retries=1, timeout=5)
    return call


@pytest.fixture(autouse=True)
def _env(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.setenv('SECRETS_TMP', str(tmp_path))
    monkeypatch.setenv('STREAMING_DOWNLOAD_BACKOFF', '0.01')


def test_http_password_in_url(closed_port: int, caplog: Any) -> None:
    text = _assert_no_secret(_download(f'http://user:{SECRET}@127.0.0.1:{closed_port}/d/x'),
                             caplog)
    assert f'127.0.0.1:{closed_port}' in text  # The URL is still named, minus the password.


def test_http_token_in_query(closed_port: int, caplog: Any) -> None:
    _assert_no_secret(_download(f'http://127.0.0.1:{closed_port}/x?sig={SECRET}&a=1'), caplog)
    _assert_no_secret(_download(f'http://127.0.0.1:{closed_port}/x?token={SECRET}'), caplog)


def test_http_authorization_header(closed_port: int, caplog: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv('STREAMING_HTTP_AUTHORIZATION', f'Bearer {SECRET}')
    _assert_no_secret(_download(f'http://127.0.0.1:{closed_port}/x'), caplog)


def _aws_env(monkeypatch: Any, endpoint: str) -> None:
    pytest.importorskip('boto3')
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'AKIDEXAMPLE')
    monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', SECRET)
    monkeypatch.setenv('AWS_DEFAULT_REGION', 'us-east-1')
    monkeypatch.setenv('S3_ENDPOINT_URL', endpoint)


def test_s3_endpoint_password_and_keys(closed_port: int, caplog: Any, monkeypatch: Any) -> None:
    _aws_env(monkeypatch, f'http://user:{SECRET}@127.0.0.1:{closed_port}')
    _assert_no_secret(_download('s3://bucket/key'), caplog)


def test_s3_secret_only_in_the_environment(closed_port: int, caplog: Any,
                                           monkeypatch: Any) -> None:
    _aws_env(monkeypatch, f'http://127.0.0.1:{closed_port}')
    _assert_no_secret(_download('s3://bucket/key'), caplog)


def test_gcs_hmac(closed_port: int, caplog: Any, monkeypatch: Any) -> None:
    pytest.importorskip('boto3')
    monkeypatch.setenv('GCS_KEY', 'GOOGEXAMPLE')
    monkeypatch.setenv('GCS_SECRET', SECRET)
    monkeypatch.setenv('GCS_HMAC_ENDPOINT_URL', f'http://u:{SECRET}@127.0.0.1:{closed_port}')
    _assert_no_secret(_download('gs://bucket/key'), caplog)


def test_azure_connection_string(closed_port: int, caplog: Any, monkeypatch: Any) -> None:
    pytest.importorskip('azure.storage.blob')
    key = SECRET * 3  # Account keys are base64; any text works for a refused connection.
    monkeypatch.setenv('AZURE_STORAGE_CONNECTION_STRING',
                       f'DefaultEndpointsProtocol=http;AccountName=devacct;AccountKey={key};'
                       f'BlobEndpoint=http://127.0.0.1:{closed_port}/devacct;')
    _assert_no_secret(_download('azure://container/key'), caplog)


def test_sftp_password_in_url(closed_port: int, caplog: Any) -> None:
    pytest.importorskip('paramiko')
    _assert_no_secret(_download(f'sftp://user:{SECRET}@127.0.0.1:{closed_port}/data/x'), caplog)


def test_streaming_dataset_remote_with_password(closed_port: int, caplog: Any,
                                                tmp_path: Any) -> None:
    from streaming import StreamingDataset
    remote = f'http://user:{SECRET}@127.0.0.1:{closed_port}/ds'
    _assert_no_secret(lambda: StreamingDataset(remote=remote, local=str(tmp_path / 'c'),
                                               batch_size=1, download_retry=0), caplog)


def test_uploader_to_s3_with_endpoint_password(closed_port: int, caplog: Any, monkeypatch: Any,
                                               tmp_path: Any) -> None:
    from streaming import MDSWriter
    _aws_env(monkeypatch, f'http://user:{SECRET}@127.0.0.1:{closed_port}')

    def write() -> None:
        with MDSWriter(out=(str(tmp_path / 'l'), 's3://bucket/out'), columns={'a': 'int'},
                       retry=0) as writer:
            writer.write({'a': 1})
    _assert_no_secret(write, caplog)


def test_reprs_hide_passwords() -> None:
    from streaming.dataset.stream import Stream
    from streaming.storage.upload import Uploader
    url = f'http://user:{SECRET}@example.invalid/ds'
    stream = Stream(remote=url, local='/tmp/never-used-secrets-test')
    assert SECRET not in repr(stream) and SECRET not in str(vars(stream).get('_given'))
    uploader = Uploader(('/tmp/never-used-secrets-upl', f's3://u:{SECRET}@bucket/x'))
    assert SECRET not in repr(uploader)
