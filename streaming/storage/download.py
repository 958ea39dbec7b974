"""Trustworthy downloads, shared by every backend: ``download_file`` and ``fetch_bytes``.

``download_file`` turns a backend's raw, single-attempt ``read``/``stat`` into a download that

- is atomic: bytes go to a temporary file beside the destination (``streaming.fileio``) and
  are renamed into place only once complete and checked (``verify``);
- retries with the shared policy (``retry``): backoff with jitter, ``Retry-After`` honoured,
  wrong sizes and checksums fetched again; a throttling store's refusals use up no attempt:
  requests are paced node-wide (``pacing``) and a download fails on refusals alone only
  once the store has refused it for ``timeout`` seconds in a row;
- enforces ``timeout`` on every backend through the stall watchdog (``watchdog``);
- fetches large objects as parallel ranged GETs pinned to one ETag, resuming from a journal of
  finished parts (``ranged``);
- fails with one clear error naming the URL, the attempts and the last cause, and maps a full
  disk to ``DiskFullError`` without leaving anything partial behind.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import shutil
from dataclasses import dataclass, replace
from typing import Iterator

from streaming.fileio import create_temp, preallocate, remove_quietly
from streaming.storage.environ import on_environ
from streaming.storage.errors import CorruptDownloadError, DiskFullError, DownloadError
from streaming.storage.objects import ObjectInfo, ObjectStore
from streaming.storage.pacing import PACER
from streaming.storage.ranged import download_in_parts, read_range_into
from streaming.storage.registry import get_backend
from streaming.storage.retry import (
    DISK_ERRNOS,
    RetriesExhausted,
    RetryPolicy,
    call_with_retries,
    describe,
    is_fatal,
)
from streaming.storage.secrets import redact
from streaming.storage.verify import Check, WrongBytes, hash_check, publish_verified
from streaming.storage.watchdog import run_watched

__all__ = ['DownloadConfig', 'download_file', 'download_streamed', 'fetch_bytes', 'hash_check',
           'in_parts']

# Parts this thread's downloads of known size should be split into (``in_parts``).
_PARTS: contextvars.ContextVar[int] = contextvars.ContextVar('streaming_download_parts',
                                                             default=1)
MIN_PART = 512 << 10


@contextlib.contextmanager
def in_parts(parts: int) -> Iterator[None]:
    """Download files of known size as up to ``parts`` ranged GETs (this thread, this block).

    Parts are at least ``MIN_PART`` bytes; files above the ranged threshold keep their own
    split. Used by the node's download schedule at the end of an epoch: the last few shards, split,
    finish sooner than one capped connection each would allow.
    """
    token = _PARTS.set(max(1, int(parts)))
    try:
        yield
    finally:
        _PARTS.reset(token)


def _env_bytes(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    from streaming.util import bytes_to_int
    parsed = bytes_to_int(value)
    if parsed <= 0:
        raise ValueError(f'{name} must be a positive byte count, got {value!r}.')
    return parsed


@dataclass(frozen=True)
class DownloadConfig:
    """Tuning of the download layer; ``from_env`` reads the ``STREAMING_DOWNLOAD_*`` variables.

    ``part_size`` / ``concurrency``: ranged GETs for objects above ``ranged_threshold`` (default
    twice the part size). ``backoff`` / ``backoff_max``: the retry delays (see
    ``retry.RetryPolicy``). ``chunk_size`` is the read size and so the granularity of the
    progress watchdog. ``resume``: keep a journal so that a large download can resume.
    """

    part_size: int = 16 << 20
    concurrency: int = 8
    ranged_threshold: int | None = None
    backoff: float = 0.5
    backoff_max: float = 20.0
    chunk_size: int = 256 << 10
    resume: bool = True

    @property
    def threshold(self) -> int:
        return self.ranged_threshold if self.ranged_threshold is not None else 2 * self.part_size

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.backoff, self.backoff_max)

    @classmethod
    def from_env(cls) -> DownloadConfig:
        """The configuration the environment sets now (worked out once per environment)."""
        return _config_from_environ(cls)

    @classmethod
    def _read_environ(cls) -> DownloadConfig:
        default = cls()
        policy = RetryPolicy.from_env()
        threshold = os.environ.get('STREAMING_DOWNLOAD_RANGED_THRESHOLD')
        concurrency = os.environ.get('STREAMING_DOWNLOAD_CONCURRENCY')
        return cls(
            part_size=_env_bytes('STREAMING_DOWNLOAD_PART_SIZE', default.part_size),
            concurrency=int(float(concurrency)) if concurrency else default.concurrency,
            ranged_threshold=_env_bytes('STREAMING_DOWNLOAD_RANGED_THRESHOLD', 0)
            if threshold else None,
            backoff=policy.backoff,
            backoff_max=policy.backoff_max,
            resume=os.environ.get('STREAMING_DOWNLOAD_RESUME', '1') not in ('0', 'false'),
        )


@on_environ
def _config_from_environ(kind: type[DownloadConfig]) -> DownloadConfig:
    return kind._read_environ()


# ---- the three ways of one attempt ----------------------------------------------------------
def download_in_one_get(backend: ObjectStore, url: str, path: str, size: int | None,
                        timeout: float, check: Check | None) -> None:
    """One streamed GET into a temporary file beside ``path``, then check and rename."""
    fd, temp = create_temp(path)
    try:
        preallocate(fd, size)
        run_watched(read_range_into(backend, url, fd, 0, None, timeout, None), 'get', timeout,
                    inline=_inline(backend, url))
        os.close(fd)
        fd = -1
        publish_verified(temp, path, size, check)
        temp = ''  # Renamed into place: nothing left to remove.
    finally:
        if fd >= 0:
            os.close(fd)
        if temp:
            remove_quietly(temp)


def _inline(backend: ObjectStore, url: str) -> bool:
    """Whether a request for ``url`` can run in the calling thread (``Backend.stalls_time_out``)."""
    stalls_time_out = getattr(backend, 'stalls_time_out', None)
    return stalls_time_out is not None and stalls_time_out(url)


def download_with_backend(backend: ObjectStore, url: str, path: str, size: int | None,
                          timeout: float, check: Check | None) -> None:
    """A backend that only fetches whole files: its ``download`` into a temporary file."""
    fd, temp = create_temp(path)
    os.close(fd)
    try:
        run_watched(lambda task: backend.download(url, temp, timeout), 'download', timeout)
        publish_verified(temp, path, size, check)
    finally:
        remove_quietly(temp)


def _one_attempt(backend: ObjectStore, url: str, path: str, size: int | None, timeout: float,
                 check: Check | None, config: DownloadConfig, whole: bool,
                 one_get: bool = False) -> None:
    if whole:
        download_with_backend(backend, url, path, size, timeout, check)
        return
    if size is None and one_get:
        try:
            download_in_one_get(backend, url, path, size, timeout, check)
        except FileNotFoundError:
            # Missing: raise what the HEAD a stat-first download sends gets (the reference's
            # error names its HeadObject), unless the object appeared meanwhile.
            run_watched(lambda task: backend.stat(url, timeout=timeout), 'stat', timeout)
            raise
        return
    if size is not None and size <= config.threshold:
        download_in_one_get(backend, url, path, size, timeout, check)
        return
    if size is not None and not os.path.exists(f'{path}.partial.json'):
        # The size is known and there is nothing to resume: no HEAD; the parts' answers must
        # agree on the ETag and the size instead (download_in_parts checks).
        download_in_parts(backend, url, path, ObjectInfo(size, None), timeout, check,
                          part_size=config.part_size, concurrency=config.concurrency,
                          resume=config.resume)
        return
    info = run_watched(lambda task: backend.stat(url, timeout=timeout), 'stat', timeout)
    if size is not None and info.size is not None and info.size != size:
        raise WrongBytes(f'the remote object has {info.size} bytes, expected {size}')
    if info.size is None or info.size <= config.threshold:
        download_in_one_get(backend, url, path, info.size, timeout, check)
    else:
        download_in_parts(backend, url, path, info, timeout, check, part_size=config.part_size,
                          concurrency=config.concurrency, resume=config.resume)


# ---- entry points ---------------------------------------------------------------------------
def download_file(url: str, local_path: str, *, retries: int = 2, timeout: float = 60.0,
                  size: int | None = None, check: Check | None = None,
                  config: DownloadConfig | None = None, backend: ObjectStore | None = None,
                  one_get: bool = False) -> str:
    """Download ``url`` to ``local_path`` (atomically, verified); returns ``local_path``.

    ``retries`` extra attempts follow a failed one (a throttling store's refusal is not one);
    ``timeout`` is the longest any request may go without receiving data, and the longest the
    store may refuse every request; ``size``, when known, is the expected byte count;
    ``check(path)`` returns a description of what is wrong with a downloaded temporary file
    (e.g. a checksum mismatch, see ``hash_check``), or None, and a wrong file is downloaded
    again. ``one_get``: the object is known to be small (an index), so one GET without asking
    its size first (a round trip saved; a missing object still gets the HEAD, whose error is
    the one raised).

    Raises FileNotFoundError (no such object), PermissionError (access denied), DiskFullError,
    or, once every attempt has failed, DownloadError (CorruptDownloadError if the bytes kept
    arriving wrong), each naming the URL and the cause.
    """
    if retries < 0:
        raise ValueError(f'retries must be >= 0, got {retries}.')
    if timeout is None or timeout <= 0:
        raise ValueError(f'timeout must be > 0 seconds, got {timeout}.')
    backend = backend or get_backend(url)
    return _download(backend, url, local_path, retries, timeout, size, check, config,
                     not backend.streams, one_get)


def download_streamed(backend: ObjectStore, url: str, local_path: str, timeout: float,
                      retries: int = 2) -> str:
    """``download_file`` through ``backend.read`` even if the backend overrides ``download``."""
    if not backend.can_read:
        raise NotImplementedError(f'{type(backend).__name__} implements neither read() nor '
                                  f'download().')
    return _download(backend, url, local_path, retries, timeout, None, None, None, False)


def _download(backend: ObjectStore, url: str, local_path: str, retries: int, timeout: float,
              size: int | None, check: Check | None, config: DownloadConfig | None,
              whole: bool, one_get: bool = False) -> str:
    config = config or _split(DownloadConfig.from_env(), size)
    directory = os.path.dirname(local_path)
    if directory and not os.path.isdir(directory):  # One stat where it exists (most calls).
        os.makedirs(directory, exist_ok=True)

    def attempt() -> str:
        try:
            _one_attempt(backend, url, local_path, size, timeout, check, config, whole,
                         one_get)
        except OSError as error:
            if error.errno in DISK_ERRNOS and not isinstance(error, DiskFullError):
                raise _disk_full(error, local_path) from None
            if is_fatal(error):
                raise _with_url(error, url) from None
            raise
        return local_path

    try:
        return call_with_retries(attempt, retries=retries, policy=config.retry_policy,
                                 what=f'Download of {url}', explain=_explain, pacer=PACER,
                                 throttle_limit=timeout)
    except RetriesExhausted as failed:
        kind = CorruptDownloadError if isinstance(failed.last, WrongBytes) else DownloadError
        raise kind(f'Downloading {redact(url)} to {local_path} failed after {failed.attempts} '
                   f'attempt(s) in {failed.elapsed:.1f}s{failed.why}; last error: '
                   f'{_explain(failed.last)}') from failed.last


def _split(config: DownloadConfig, size: int | None) -> DownloadConfig:
    """``config``, or, under ``in_parts``, one that splits a ``size``-byte file into parts."""
    parts = min(_PARTS.get(), (size or 0) // MIN_PART)
    if parts <= 1 or size is None or size > config.threshold:  # Larger ones are split anyway.
        return config
    part = -(-size // parts)
    return replace(config, part_size=part, concurrency=parts, ranged_threshold=part)


def _explain(error: BaseException) -> str:
    return redact(str(error)) if isinstance(error, WrongBytes) else describe(error)


def _disk_full(error: OSError, path: str) -> DiskFullError:
    free = shutil.disk_usage(os.path.dirname(path) or '.').free
    return DiskFullError(error.errno or errno.ENOSPC,
                         f'No space left to download to {path} ({free} bytes free): '
                         f'{os.strerror(error.errno or errno.ENOSPC)}')


def _with_url(error: OSError, url: str) -> OSError:
    """``error`` with the URL in its message, keeping its type."""
    text = str(error.strerror or error)
    if redact(url) in text:
        return error
    return type(error)(error.errno, f'{redact(url)}: {redact(text)}') if error.errno else \
        type(error)(f'{redact(url)}: {redact(text)}')


def fetch_bytes(url: str, *, retries: int = 2, timeout: float = 60.0) -> bytes:
    """The content of a small object, downloaded through a temporary file."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix='streaming-fetch-') as scratch:
        path = download_file(url, os.path.join(scratch, 'object'), retries=retries,
                             timeout=timeout)
        with open(path, 'rb') as f:
            return f.read()
