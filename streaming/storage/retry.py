"""The one retry policy of the storage layer, shared by downloads and uploads.

- which errors are worth another attempt (``is_fatal`` says which are not);
- how long to wait before the next one (``RetryPolicy.delay``: exponential backoff with
  jitter, longer when throttled, never shorter than the server's ``Retry-After``);
- the loop itself (``call_with_retries``), which logs each failure and, once every attempt has
  failed, raises ``RetriesExhausted`` for the caller to turn into its own error. A throttling
  store's refusal is not a failed attempt: it is retried (paced by ``pacing``) until the store
  has refused for too long.
"""

from __future__ import annotations

import email.utils
import errno
import logging
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

from streaming.storage.errors import DiskFullError, TransientError
from streaming.storage.pacing import Pacer
from streaming.storage.secrets import redact, redact_sdk_logs, scrub_exception

__all__ = ['DISK_ERRNOS', 'THROTTLED_STATUSES', 'RetriesExhausted', 'RetryPolicy',
           'call_with_retries', 'describe', 'is_fatal', 'is_throttled', 'parse_retry_after',
           'retry_after']

logger = logging.getLogger(__name__)

T = TypeVar('T')

# errno values that mean the local disk is full: another attempt cannot help.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# HTTP statuses that mean "slow down" (the backoff doubles for them).
THROTTLED_STATUSES = frozenset({429, 503})
# Never wait longer than this for a Retry-After (unless backoff_max is longer still).
RETRY_AFTER_CAP = 60.0


def is_fatal(error: BaseException) -> bool:
    """Whether another attempt cannot fix ``error``.

    Missing objects, denied access, a full disk, a missing SDK, bad arguments and unsupported
    operations are fatal; a ``TransientError`` never is, and neither is anything else (network
    errors, timeouts, bodies of the wrong size).
    """
    if isinstance(error, TransientError):
        return False
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError, DiskFullError,
                          NotImplementedError, ImportError, ValueError, TypeError)):
        return True
    return isinstance(error, OSError) and error.errno in DISK_ERRNOS


def parse_retry_after(value: str | float | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or an HTTP date), or None."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return max(0.0, float(value))
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_after(headers: Mapping[str, Any] | None) -> float | None:
    """The ``Retry-After`` of a response's headers (any letter case), in seconds, or None."""
    if not headers:
        return None
    value = headers.get('Retry-After')
    if value is None:
        value = headers.get('retry-after')
    if value is None and isinstance(headers, dict):
        value = next((v for k, v in headers.items() if str(k).lower() == 'retry-after'), None)
    return parse_retry_after(value)


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        parsed = float(value)
    except ValueError:
        raise ValueError(f'{name} must be a number of seconds, got {value!r}.') from None
    if parsed < 0:
        raise ValueError(f'{name} must be >= 0 seconds, got {value!r}.')
    return parsed


@dataclass(frozen=True)
class RetryPolicy:
    """Delays between attempts: ``backoff`` seconds first, doubling up to ``backoff_max``.

    Each delay is scaled by a random factor in [0.5, 1] (jitter, so that many clients do not
    retry in step), doubled again when the server said it is throttling, and raised to the
    server's ``Retry-After`` when it sent one (capped at ``max(backoff_max, 60)`` seconds).
    """

    backoff: float = 0.5
    backoff_max: float = 20.0

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """``STREAMING_DOWNLOAD_BACKOFF`` and ``STREAMING_DOWNLOAD_BACKOFF_MAX`` (seconds)."""
        default = cls()
        return cls(backoff=_env_float('STREAMING_DOWNLOAD_BACKOFF', default.backoff),
                   backoff_max=_env_float('STREAMING_DOWNLOAD_BACKOFF_MAX', default.backoff_max))

    def delay(self, retry: int, error: BaseException | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first) after ``error``."""
        delay = min(self.backoff_max, self.backoff * 2**retry) * random.uniform(0.5, 1.0)
        if isinstance(error, TransientError) and error.throttled:
            delay = min(self.backoff_max, 2 * delay)
        wait = getattr(error, 'retry_after', None)
        if wait is not None:
            delay = max(delay, min(float(wait), max(self.backoff_max, RETRY_AFTER_CAP)))
        return delay


class RetriesExhausted(Exception):
    """Every attempt failed, or the store refused them for too long; ``last``: the last error."""

    def __init__(self, last: BaseException, attempts: int, elapsed: float,
                 throttled_for: float | None = None) -> None:
        super().__init__(f'{attempts} attempt(s) failed in {elapsed:.1f}s: {describe(last)}')
        self.last, self.attempts, self.elapsed = last, attempts, elapsed
        self.throttled_for = throttled_for  # Seconds of refusals in a row, if that ended it.

    @property
    def why(self) -> str:
        """`` (the store refused every request for 60.1s)`` when refusals ended it, else ''."""
        if self.throttled_for is None:
            return ''
        return f' (the store refused every request for {self.throttled_for:.1f}s)'


def describe(error: BaseException) -> str:
    """``Type: message`` of ``error``, with secrets redacted."""
    return redact(f'{type(error).__name__}: {str(error) or repr(error)}')


def is_throttled(error: BaseException) -> bool:
    """Whether ``error`` is the store asking to slow down (not a failure of the request)."""
    return isinstance(error, TransientError) and error.throttled


def call_with_retries(operation: Callable[[], T], *, retries: int, policy: RetryPolicy,
                      what: str, fatal: Callable[[BaseException], bool] = is_fatal,
                      explain: Callable[[BaseException], str] = describe,
                      pacer: Pacer | None = None, throttle_limit: float | None = None) -> T:
    """``operation()``, tried up to ``retries + 1`` times; its result.

    A fatal error (``fatal(error)``) propagates at once, unchanged. Other errors are logged
    (``what`` names the transfer; ``explain`` words the error) and retried after
    ``policy.delay``; when none is left, ``RetriesExhausted`` carries the last one.

    A refusal by a throttling store (``is_throttled``) is not a failed attempt: it is retried
    without using one up, for as long as the store has refused every attempt for less than
    ``throttle_limit`` seconds (None: retries only). With a ``pacer``, every attempt waits for
    its turn there first and reports whether the store refused it.
    """
    if retries < 0:
        raise ValueError(f'retries must be >= 0, got {retries}.')
    redact_sdk_logs()  # Before the first transfer: SDK DEBUG logs quote endpoint URLs.
    attempts = retries + 1
    started = time.monotonic()
    failures = throttles = 0
    refused_since: float | None = None  # Start of the current run of refusals.
    while True:
        if pacer is not None:
            pacer.wait_turn(None if refused_since is None or throttle_limit is None
                            else refused_since + throttle_limit)
        try:
            result = operation()
        except Exception as error:
            scrub_exception(error)  # SDK messages may quote endpoint URLs with passwords.
            if fatal(error):
                raise
            now = time.monotonic()
            if is_throttled(error) and throttle_limit is not None:
                if pacer is not None:
                    pacer.throttled()
                refused_since = now if refused_since is None else refused_since
                throttles += 1
                if now - refused_since < throttle_limit:
                    wait = min(policy.delay(min(throttles - 1, 2), error),
                               max(0.0, refused_since + throttle_limit - now))
                    logger.info('%s: throttled (%d so far): %s; retrying in %.2fs',
                                redact(what), throttles, explain(error), wait)
                    time.sleep(wait)
                    continue
                logger.warning('%s: the store refused every attempt for %.1fs: %s',
                               redact(what), now - refused_since, explain(error))
                raise RetriesExhausted(error, failures + throttles, now - started,
                                       throttled_for=now - refused_since) from error
            refused_since = None
            failures += 1
            if failures == attempts:
                logger.warning('%s: attempt %d of %d failed: %s', redact(what), failures,
                               attempts, explain(error))
                raise RetriesExhausted(error, failures + throttles, now - started) from error
            wait = policy.delay(failures - 1, error)
            logger.warning('%s: attempt %d of %d failed: %s; retrying in %.2fs', redact(what),
                           failures, attempts, explain(error), wait)
            time.sleep(wait)
            continue
        if pacer is not None:
            pacer.succeeded()
        if failures or throttles:
            logger.info('%s: succeeded on attempt %d of %d (after %d throttled).', redact(what),
                        failures + 1, attempts, throttles)
        return result
