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
(and one timeout) applies to every backend. Reads (``read``, ``stat``) skip boto3 where the
environment says everything explicitly (``streaming.storage.s3_light``: signed requests over
pooled ``http.client`` connections, sooner to the first byte: docs/storage/s3.md);
``STREAMING_S3_CLIENT=boto3`` keeps them on boto3. boto3 is imported only when a client is built.
"""

from __future__ import annotations

import http.client
import importlib.util
import os
import threading
from typing import Any, Iterator

from botocore.exceptions import BotoCoreError, ClientError

from streaming.storage import s3_light
from streaming.storage.backend import Backend
from streaming.storage.clients import ClientCache
from streaming.storage.errors import TransientError
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.registry import split_bucket_key
from streaming.storage.retry import THROTTLED_STATUSES, retry_after
from streaming.storage.secrets import redact
from streaming.storage.transport import CHUNK_SIZE, byte_range, object_size
from streaming.storage.watchdog import stalled

__all__ = ['S3Backend', 'S3NotFoundError']

if importlib.util.find_spec('boto3') is None:  # Imported when a client is built; required.
    raise ModuleNotFoundError("No module named 'boto3'", name='boto3')

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


def _transfer_error(url: str, error: str | Exception, timeout: float) -> Exception:
    """What a failed request or body read of the boto3-free path raises (retried)."""
    if isinstance(error, TimeoutError):
        return TimeoutError(f'{redact(url)}: {stalled(timeout)} (socket timeout)')
    if isinstance(error, Exception):
        error = f'{type(error).__name__}: {error}'
    return TransientError(f'{redact(url)}: {redact(error)}')


class S3Backend(Backend):
    """Objects in S3 or an S3-compatible store, one boto3 client per (process, timeout)."""

    scheme = 's3'
    service = 'S3'
    credentials_hint = ('check the AWS credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE / role) '
                        'and the bucket policy')

    def __init__(self) -> None:
        # Keyed by the endpoint too: a process that points S3_ENDPOINT_URL elsewhere gets a client
        # for the new endpoint, not the one built first.
        self._clients: ClientCache[tuple[float, bool, str | None], Any] = ClientCache(
            lambda key: self._make_client(*key[:2]))
        self._unsigned: bool | None = None
        # Boto3-free clients per settings (None: boto3 decides); a redirect turns one off.
        self._light: dict[s3_light.Settings, s3_light.LightS3 | None] = {}
        self._light_lock = threading.Lock()

    # ---- clients ----------------------------------------------------------------------------
    def endpoint_url(self) -> str | None:
        return os.environ.get('S3_ENDPOINT_URL') or None

    def session_kwargs(self) -> dict[str, Any]:
        """Explicit credentials for the boto3 session (none: boto3's default chain)."""
        return {}

    def bucket_key(self, url: str) -> tuple[str, str]:
        return split_bucket_key(url)

    def _client(self, timeout: float, upload: bool = False) -> Any:
        return self._clients.get((float(timeout), upload, self.endpoint_url()))

    def warm_up(self, timeout: float) -> None:
        light = self._light_client()
        if light is not None:
            light.warm_up()
        else:  # Building the client imports botocore's request machinery.
            self._client(timeout)

    def stalls_time_out(self, url: str) -> bool:
        # The boto3-free reads put the timeout on every socket operation; on a kept connection
        # there is no name lookup (not bounded by it) and no handshake.
        light = self._light_client()
        return light is not None and light.connected(*self.bucket_key(url))

    def _light_client(self) -> s3_light.LightS3 | None:
        """The boto3-free client for reads, or None (boto3 decides).

        Decided from the environment at each call (microseconds against a request's
        milliseconds), so a change of endpoint or credentials in this process is followed.
        """
        settings = s3_light.light_settings(self.endpoint_url()) \
            if type(self) is S3Backend else None
        if settings is None:
            return None
        light = self._light.get(settings, False)
        if light is False:
            with self._light_lock:
                light = self._light.setdefault(settings, s3_light.LightS3(settings))
        return light  # type: ignore[return-value]

    def _make_client(self, timeout: float, upload: bool) -> Any:
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config
        session = boto3.session.Session(**self.session_kwargs())
        if self._unsigned is None:
            self._unsigned = s3_light.truthy(os.environ.get('S3_UNSIGNED')) or \
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
        if isinstance(error, BotoCoreError):  # no answer: connection, endpoint, credentials...
            return TransientError(f'{redact(url)}: {type(error).__name__}: {redact(error)}')
        if not isinstance(error, ClientError):
            return error
        return self._translate_response(url, error.response, error.operation_name)

    def _translate_response(self, url: str, response: dict[str, Any],
                            operation: str | None) -> Exception:
        """The exception for an error answer (botocore's ``ClientError.response`` layout)."""
        meta = response.get('ResponseMetadata', {})
        status = str(meta.get('HTTPStatusCode', ''))
        code = str(response.get('Error', {}).get('Code', status))
        where = redact(url)
        if code in _MISSING or status == '404':
            return S3NotFoundError(f'{where}: no such object ({self.service} {code}).',
                                   response, operation)
        if code in _DENIED or status in ('401', '403'):
            return PermissionError(f'{where}: access denied ({self.service} {code}); '
                                   f'{self.credentials_hint}.')
        if code in ('PreconditionFailed', '412'):
            return TransientError(f'{where} changed during the download (ETag mismatch).')
        return TransientError(f'{where}: {self.service} answered {status} {code}',
                              retry_after=retry_after(meta.get('HTTPHeaders')),
                              throttled=code in _THROTTLED or
                              status in {str(s) for s in THROTTLED_STATUSES})

    # ---- reads without boto3 ----------------------------------------------------------------
    def _light_request(self, light: s3_light.LightS3, method: str, url: str,
                       headers: dict[str, str], timeout: float) -> Any:
        """One request through ``light``; (headers, response, release) of a 2xx answer."""
        bucket, key = self.bucket_key(url)
        try:
            status, answer, response, release = light.request(method, bucket, key, headers,
                                                              timeout)
        except (OSError, http.client.HTTPException) as error:
            raise _transfer_error(url, error, timeout) from None
        if 200 <= status < 300:
            return answer, response, release
        try:
            payload = response.read(64 << 10) if method != 'HEAD' else b''
        except (OSError, http.client.HTTPException):
            payload = b''
        release(False)
        if 300 <= status < 400:
            raise s3_light.Redirected(f'{status}')
        code, message = s3_light.error_code(status, payload)
        if code == 'AuthorizationHeaderMalformed' and 'region' in message:
            raise s3_light.Redirected(code)  # A bucket in another region: boto3 finds it.
        operation = 'HeadObject' if method == 'HEAD' else 'GetObject'
        raise self._translate_response(url, {
            'Error': {'Code': code, 'Message': message},
            'ResponseMetadata': {'HTTPStatusCode': status, 'HTTPHeaders': answer}}, operation)

    def _light_stat(self, light: s3_light.LightS3, url: str, timeout: float) -> ObjectInfo:
        bucket, _ = self.bucket_key(url)
        answer, _, release = self._light_request(light, 'HEAD', url, self._payer_header(bucket),
                                                 timeout)
        release(True)
        length = answer.get('content-length')
        return ObjectInfo(int(length) if length is not None else None, answer.get('etag'))

    def _light_read(self, light: s3_light.LightS3, url: str, start: int, end: int | None,
                    timeout: float, etag: str | None) -> Response:
        bucket, _ = self.bucket_key(url)
        headers = self._payer_header(bucket)
        ranged = bool(start or end is not None)
        if ranged:
            headers['Range'] = byte_range(start, end)
        elif light.settings.checksums:
            headers['x-amz-checksum-mode'] = 'ENABLED'
        if etag:
            headers['If-Match'] = etag
        answer, response, release = self._light_request(light, 'GET', url, headers, timeout)
        total = object_size(answer.get('content-range'), answer.get('content-length'), ranged)
        check = None if ranged else light.checker(answer)

        def fail(why: str | Exception) -> Exception:
            return _transfer_error(url, why, timeout)

        return Response(ObjectInfo(total, answer.get('etag')),
                        s3_light.body(response, release, CHUNK_SIZE, check, fail))

    def _payer_header(self, bucket: str) -> dict[str, str]:
        return {'x-amz-request-payer': 'requester'} if self._payer(bucket) else {}

    def _without_light(self, light: s3_light.LightS3) -> None:
        """A redirect: reads with ``light``'s settings go through boto3 from now on."""
        with self._light_lock:
            self._light[light.settings] = None

    # ---- operations -------------------------------------------------------------------------
    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        light = self._light_client()
        if light is not None:
            try:
                return self._light_stat(light, url, timeout)
            except s3_light.Redirected:
                self._without_light(light)
        bucket, key = self.bucket_key(url)
        try:
            head = self._client(timeout).head_object(Bucket=bucket, Key=key,
                                                     **self._payer(bucket))
        except Exception as error:
            raise self._translate(url, error) from None
        return ObjectInfo(int(head['ContentLength']), head.get('ETag'))

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        light = self._light_client()
        if light is not None:
            try:
                return self._light_read(light, url, start, end, timeout, etag)
            except s3_light.Redirected:
                self._without_light(light)
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
        from boto3.s3.transfer import TransferConfig
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
