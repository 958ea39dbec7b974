"""``gs://bucket/key``: Google Cloud Storage.

Two ways in, chosen as the reference chooses:

- ``GCS_KEY`` and ``GCS_SECRET`` set: HMAC keys through GCS's S3-interoperable XML endpoint
  (``https://storage.googleapis.com``, or ``GCS_HMAC_ENDPOINT_URL``), with boto3;
- otherwise google-cloud-storage with application default credentials
  (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud, metadata server). ``STORAGE_EMULATOR_HOST`` points
  it at an emulator, as in Google's own client.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

import boto3
import google.auth
from botocore.config import Config
from google.api_core import exceptions
from google.auth.exceptions import DefaultCredentialsError
from google.cloud import storage

from streaming.storage.backend import Backend
from streaming.storage.clients import ClientCache
from streaming.storage.errors import MissingCredentialsError, TransientError
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.registry import split_bucket_key
from streaming.storage.retry import THROTTLED_STATUSES, retry_after
from streaming.storage.s3 import S3Backend
from streaming.storage.secrets import redact
from streaming.storage.transport import body_chunks, byte_range, object_size, status_error

__all__ = ['GCSBackend']


class _GCSHMAC(S3Backend):
    """GCS through its S3-compatible XML API, signed with HMAC keys."""

    scheme = 'gs'
    service = 'GCS'
    credentials_hint = 'check GCS_KEY / GCS_SECRET and the bucket permissions'

    def endpoint_url(self) -> str | None:
        return os.environ.get('GCS_HMAC_ENDPOINT_URL') or 'https://storage.googleapis.com'

    def _client(self, timeout: float, upload: bool = False) -> Any:
        # Keyed by the keys too: keys changed in the environment are used at once.
        key = (float(timeout), upload, self.endpoint_url(), os.environ.get('GCS_KEY'),
               os.environ.get('GCS_SECRET'))
        return self._clients.get(key)  # type: ignore[arg-type]

    def session_kwargs(self) -> dict[str, Any]:
        return {'aws_access_key_id': os.environ['GCS_KEY'],
                'aws_secret_access_key': os.environ['GCS_SECRET'], 'region_name': 'auto'}

    def _make_client(self, timeout: float, upload: bool) -> Any:
        config = Config(connect_timeout=min(timeout, 60.0),
                        read_timeout=max(timeout, 300.0) if upload else timeout,
                        retries={'total_max_attempts': 1, 'mode': 'standard'},
                        max_pool_connections=64, signature_version='s3v4',
                        # GCS rejects boto3's default streaming checksums.
                        request_checksum_calculation='when_required',
                        response_checksum_validation='when_required')
        return boto3.session.Session(**self.session_kwargs()).client(
            's3', endpoint_url=self.endpoint_url(), config=config)


class _GCSClient(Backend):
    """GCS through google-cloud-storage; bodies streamed from the JSON API's media endpoint."""

    scheme = 'gs'

    def __init__(self) -> None:
        self._clients: ClientCache[None, Any] = ClientCache(lambda _: self._make_client())

    @staticmethod
    def _make_client() -> Any:
        if os.environ.get('STORAGE_EMULATOR_HOST'):
            from google.auth.credentials import AnonymousCredentials
            return storage.Client(project='emulator', credentials=AnonymousCredentials())
        return storage.Client()

    def client(self) -> Any:
        return self._clients.get(None)

    def _translate(self, url: str, error: Exception) -> Exception:
        if isinstance(error, exceptions.NotFound):
            return FileNotFoundError(f'{redact(url)}: no such object (GCS 404).')
        if isinstance(error, (exceptions.Forbidden, exceptions.Unauthorized)):
            return PermissionError(f'{redact(url)}: access denied (GCS {error.code}); check the '
                                   f'application default credentials.')
        if isinstance(error, exceptions.GoogleAPICallError):
            code = int(error.code or 0)
            if code in (429, 408) or code >= 500:
                headers = getattr(getattr(error, 'response', None), 'headers', None)
                return TransientError(f'{redact(url)}: GCS answered {code}',
                                      retry_after=retry_after(headers),
                                      throttled=code in THROTTLED_STATUSES)
        return error

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        bucket, key = split_bucket_key(url)
        try:
            blob = self.client().bucket(bucket).get_blob(key, timeout=timeout, retry=None)
        except Exception as error:
            raise self._translate(url, error) from None
        if blob is None:
            raise FileNotFoundError(f'{redact(url)}: no such object (GCS 404).')
        return ObjectInfo(int(blob.size), str(blob.generation))

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        bucket, key = split_bucket_key(url)
        client = self.client()
        base = client._connection.API_BASE_URL.rstrip('/')
        media = f'{base}/download/storage/v1/b/{quote(bucket, safe="")}/o/' \
                f'{quote(key, safe="")}?alt=media'
        if etag:
            media += f'&ifGenerationMatch={etag}'
        headers = {'Accept-Encoding': 'gzip'}  # The stored bytes, never transcoded.
        ranged = bool(start or end is not None)
        if ranged:
            headers['Range'] = byte_range(start, end)
        try:
            response = client._http.get(media, headers=headers, stream=True,
                                        timeout=(min(timeout, 60.0), timeout))
        except Exception as error:
            raise TransientError(f'{redact(url)}: {redact(error)}') from None
        if response.status_code not in (200, 206) or (ranged and response.status_code != 206):
            response.close()
            raise status_error(url, response.status_code, response.headers, 'GCS')
        total = object_size(response.headers.get('Content-Range'),
                            response.headers.get('Content-Length'), ranged)
        generation = response.headers.get('x-goog-generation')
        return Response(ObjectInfo(total, generation), body_chunks(url, response))

    def upload(self, local_path: str, url: str) -> None:
        bucket, key = split_bucket_key(url)
        try:
            self.client().bucket(bucket).blob(key).upload_from_filename(
                local_path, timeout=300, retry=None)
        except Exception as error:
            raise self._translate(url, error) from None

    def list(self, url: str) -> list[str]:
        bucket, prefix = split_bucket_key(url)
        try:
            return sorted(f'gs://{bucket}/{blob.name}'
                          for blob in self.client().list_blobs(bucket, prefix=prefix))
        except Exception as error:
            raise self._translate(url, error) from None


def _check_default_credentials() -> None:
    """Fail at once (a ValueError, as the reference) when there is no way to authenticate.

    An emulator (``STORAGE_EMULATOR_HOST``) needs none; otherwise google-auth must find
    application default credentials. Without this, every request would fail and be retried.
    """
    if os.environ.get('STORAGE_EMULATOR_HOST'):
        return
    try:
        google.auth.default()
    except DefaultCredentialsError as error:
        raise MissingCredentialsError(
            f'gs:// URLs need credentials: set GCS_KEY and GCS_SECRET (HMAC keys), or set up '
            f'application default credentials (GOOGLE_APPLICATION_CREDENTIALS, '
            f'`gcloud auth application-default login`, or a metadata server); google-auth '
            f'said: {error}') from None


# What google-auth's search for application default credentials depends on (besides files).
_ADC_ENVIRONMENT = ('STORAGE_EMULATOR_HOST', 'GOOGLE_APPLICATION_CREDENTIALS', 'CLOUDSDK_CONFIG',
                    'GOOGLE_CLOUD_PROJECT', 'NO_GCE_CHECK', 'GCE_METADATA_HOST',
                    'GCE_METADATA_IP')


def _hmac_keys_set() -> bool:
    return bool(os.environ.get('GCS_KEY') and os.environ.get('GCS_SECRET'))


class GCSBackend(Backend):
    """Dispatches to the HMAC (S3 API) or the google-cloud-storage path.

    Chosen from the environment at every operation, as the reference does: HMAC keys set or
    removed later in the process take effect at once, and with neither keys nor application
    default credentials the operation raises ``MissingCredentialsError`` (a ValueError).
    """

    scheme = 'gs'

    def __init__(self) -> None:
        self._hmac: _GCSHMAC | None = None
        self._google: _GCSClient | None = None
        self._credentials_found_for: tuple[str | None, ...] | None = None
        self.check_credentials()  # none at all: fail when the backend is made

    def check_credentials(self) -> None:
        self.impl  # noqa: B018 - choosing the path checks its credentials

    @property
    def impl(self) -> Backend:
        """The path the current environment chooses."""
        if _hmac_keys_set():
            if self._hmac is None:
                self._hmac = _GCSHMAC()
            return self._hmac
        environment = tuple(os.environ.get(name) for name in _ADC_ENVIRONMENT)
        if self._credentials_found_for != environment:  # google-auth's search is slow
            _check_default_credentials()
            self._credentials_found_for = environment
        if self._google is None:
            self._google = _GCSClient()
        return self._google

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        return self.impl.stat(url, timeout=timeout)

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        return self.impl.read(url, start, end, timeout=timeout, etag=etag)

    def upload(self, local_path: str, url: str) -> None:
        self.impl.upload(local_path, url)

    def list(self, url: str) -> list[str]:
        return self.impl.list(url)

    def __repr__(self) -> str:
        mode = 'hmac' if _hmac_keys_set() else 'google-cloud-storage'
        return f'GCSBackend(mode={mode!r})'
