"""``s3://bucket/key`` through boto3: AWS S3 and every S3-compatible store.

Environment (as the reference's):

- ``S3_ENDPOINT_URL``: another S3-compatible store (Cloudflare R2, Backblaze B2, MinIO,
  CoreWeave, ...);
- ``MOSAICML_STREAMING_AWS_REQUESTER_PAYS``: comma-separated buckets whose requests are billed
  to the requester;
- ``S3_CANNED_ACL``: canned ACL applied on upload (e.g. ``bucket-owner-full-control``);
- credentials from boto3's usual chain (``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, instance roles,
  ...). With no credentials at all, or ``S3_UNSIGNED=1``, requests are unsigned (public buckets).

boto3's own retries are off: the shared download layer and the uploader retry, so one policy
(and one timeout) applies to every backend.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import boto3
from boto3.s3.transfer import TransferConfig
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from streaming.storage.backend import Backend
from streaming.storage.clients import ClientCache
from streaming.storage.errors import TransientError
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.registry import split_bucket_key
from streaming.storage.retry import THROTTLED_STATUSES, retry_after
from streaming.storage.secrets import redact
from streaming.storage.transport import CHUNK_SIZE, byte_range, object_size

__all__ = ['S3Backend', 'S3NotFoundError']

_MISSING = {'404', 'NoSuchKey', 'NotFound', 'NoSuchBucket'}
_DENIED = {'403', '401', 'AccessDenied', 'InvalidAccessKeyId', 'SignatureDoesNotMatch',
           'AllAccessDisabled', 'ExpiredToken', 'InvalidToken'}
_THROTTLED = {'429', '503', 'SlowDown', 'Throttling', 'ThrottlingException', 'RequestLimitExceeded',
              'TooManyRequests', 'ServiceUnavailable'}


class S3NotFoundError(FileNotFoundError, ClientError):
    """A missing object or bucket: a ``FileNotFoundError`` and botocore's ``ClientError``.

    ``FileNotFoundError`` is what every backend raises; ``ClientError`` (with its ``response``
    and ``operation_name``) is what the reference raises.

    Defined here, not in ``streaming.storage.errors``, so that ``import streaming`` never
    imports botocore.
    """

    def __init__(self, message: str, error_response: dict | None = None,
                 operation_name: str | None = None) -> None:
        FileNotFoundError.__init__(self, message)
        self.response = error_response or {'Error': {'Code': '404', 'Message': 'Not Found'}}
        self.operation_name = operation_name

    __str__ = Exception.__str__  # The message, not OSError's "[Errno ...]" form.

    def __reduce__(self) -> tuple:
        return type(self), (self.args[0], self.response, self.operation_name)


def _truthy(value: str | None) -> bool:
    return (value or '').strip().lower() in ('1', 'true', 'yes', 'on')


class S3Backend(Backend):
    """Objects in S3 or an S3-compatible store, one boto3 client per (process, timeout)."""

    scheme = 's3'
    service = 'S3'
    credentials_hint = ('check the AWS credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE / role) '
                        'and the bucket policy')

    def __init__(self) -> None:
        self._clients: ClientCache[tuple[float, bool], Any] = ClientCache(
            lambda key: self._make_client(*key))
        self._unsigned: bool | None = None

    # ---- clients ----------------------------------------------------------------------------
    def endpoint_url(self) -> str | None:
        return os.environ.get('S3_ENDPOINT_URL') or None

    def session_kwargs(self) -> dict[str, Any]:
        """Explicit credentials for the boto3 session (none: boto3's default chain)."""
        return {}

    def bucket_key(self, url: str) -> tuple[str, str]:
        return split_bucket_key(url)

    def _client(self, timeout: float, upload: bool = False) -> Any:
        return self._clients.get((float(timeout), upload))

    def warm_up(self, timeout: float) -> None:
        self._client(timeout)  # Building the client imports botocore's request machinery.

    def _make_client(self, timeout: float, upload: bool) -> Any:
        session = boto3.session.Session(**self.session_kwargs())
        if self._unsigned is None:
            self._unsigned = _truthy(os.environ.get('S3_UNSIGNED')) or \
                session.get_credentials() is None
        config = Config(connect_timeout=min(timeout, 60.0),
                        read_timeout=max(timeout, 300.0) if upload else timeout,
                        retries={'total_max_attempts': 1, 'mode': 'standard'},
                        max_pool_connections=64, tcp_keepalive=True,
                        signature_version=UNSIGNED if self._unsigned else None)
        return session.client('s3', endpoint_url=self.endpoint_url(), config=config)

    def _payer(self, bucket: str) -> dict[str, str]:
        buckets = os.environ.get('MOSAICML_STREAMING_AWS_REQUESTER_PAYS', '')
        return {'RequestPayer': 'requester'} if bucket in {
            b.strip() for b in buckets.split(',') if b.strip()} else {}

    # ---- errors -----------------------------------------------------------------------------
    def _translate(self, url: str, error: Exception) -> Exception:
        if not isinstance(error, ClientError):
            return error
        meta = error.response.get('ResponseMetadata', {})
        status = str(meta.get('HTTPStatusCode', ''))
        code = str(error.response.get('Error', {}).get('Code', status))
        where = redact(url)
        if code in _MISSING or status == '404':
            return S3NotFoundError(f'{where}: no such object ({self.service} {code}).',
                                   error.response, error.operation_name)
        if code in _DENIED or status in ('401', '403'):
            return PermissionError(f'{where}: access denied ({self.service} {code}); '
                                   f'{self.credentials_hint}.')
        if code in ('PreconditionFailed', '412'):
            return TransientError(f'{where} changed during the download (ETag mismatch).')
        return TransientError(f'{where}: {self.service} answered {status} {code}',
                              retry_after=retry_after(meta.get('HTTPHeaders')),
                              throttled=code in _THROTTLED or
                              status in {str(s) for s in THROTTLED_STATUSES})

    # ---- operations -------------------------------------------------------------------------
    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        bucket, key = self.bucket_key(url)
        try:
            head = self._client(timeout).head_object(Bucket=bucket, Key=key,
                                                     **self._payer(bucket))
        except Exception as error:
            raise self._translate(url, error) from None
        return ObjectInfo(int(head['ContentLength']), head.get('ETag'))

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        bucket, key = self.bucket_key(url)
        kwargs: dict[str, Any] = {'Bucket': bucket, 'Key': key, **self._payer(bucket)}
        if start or end is not None:
            kwargs['Range'] = byte_range(start, end)
        if etag:
            kwargs['IfMatch'] = etag
        try:
            response = self._client(timeout).get_object(**kwargs)
        except Exception as error:
            raise self._translate(url, error) from None
        body = response['Body']
        length = response.get('ContentLength')
        total = object_size(response.get('ContentRange'),
                            None if length is None else str(length), False)
        info = ObjectInfo(total, response.get('ETag'))
        return Response(info, self._chunks(url, body))

    def _chunks(self, url: str, body: Any) -> Iterator[bytes]:
        try:
            while True:
                try:
                    data = body.read(CHUNK_SIZE)
                except Exception as error:
                    raise self._translate(url, error) from error
                if not data:
                    return
                yield data
        finally:
            body.close()

    def upload(self, local_path: str, url: str) -> None:
        bucket, key = self.bucket_key(url)
        extra: dict[str, Any] = dict(self._payer(bucket))
        acl = os.environ.get('S3_CANNED_ACL')
        if acl:
            extra['ACL'] = acl
        config = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=16 << 20,
                                max_concurrency=4)
        try:
            self._client(60.0, upload=True).upload_file(local_path, bucket, key,
                                                        ExtraArgs=extra or None, Config=config)
        except Exception as error:
            # boto3's S3UploadFailedError wraps the ClientError that says what happened.
            cause: BaseException | None = error
            while cause is not None and not isinstance(cause, ClientError):
                cause = cause.__cause__ or cause.__context__
            raise self._translate(url, cause or error) from None  # type: ignore[arg-type]

    def list_info(self, url: str) -> list[tuple[str, ObjectInfo]]:
        """Every object under the prefix ``url`` with its size and ETag, from the listing."""
        bucket, prefix = self.bucket_key(url)
        paginator = self._client(60.0).get_paginator('list_objects_v2')
        found = []
        try:
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix, **self._payer(bucket)):
                found.extend((f'{self.scheme}://{bucket}/{o["Key"]}',
                              ObjectInfo(int(o['Size']), o.get('ETag')))
                             for o in page.get('Contents', []))
        except Exception as error:
            raise self._translate(url, error) from None
        return sorted(found)

    def list(self, url: str) -> list[str]:
        return [found for found, _ in self.list_info(url)]
