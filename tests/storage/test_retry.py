"""The shared retry policy and the per-process client cache, on their own."""

from __future__ import annotations

import email.utils
import errno
import logging
import multiprocessing
import threading
import time

import pytest

from streaming.storage import DiskFullError, TransientError
from streaming.storage.clients import ClientCache
from streaming.storage.retry import (
    RetriesExhausted,
    RetryPolicy,
    call_with_retries,
    is_fatal,
    parse_retry_after,
    retry_after,
)


def test_retry_after_in_seconds_and_as_a_date() -> None:
    assert parse_retry_after('3') == 3.0
    assert parse_retry_after(' 1.5 ') == 1.5
    assert parse_retry_after(None) is None
    assert parse_retry_after('soon') is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= parse_retry_after(later) <= 31
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert parse_retry_after(past) == 0.0
    assert retry_after({'retry-after': '4'}) == retry_after({'Retry-After': '4'}) == 4.0
    assert retry_after({'RETRY-AFTER': '2'}) == 2.0
    assert retry_after(None) is None and retry_after({}) is None


@pytest.mark.parametrize('error,fatal', [
    (FileNotFoundError('x'), True), (PermissionError('x'), True), (ValueError('x'), True),
    (IsADirectoryError('x'), True), (DiskFullError(errno.ENOSPC, 'x'), True),
    (OSError(errno.ENOSPC, 'full'), True), (ImportError('x'), True),
    (NotImplementedError('x'), True), (TransientError('x'), False),
    (ConnectionResetError('x'), False), (TimeoutError('x'), False), (OSError('x'), False),
    (RuntimeError('x'), False)])
def test_fatal_errors_are_those_another_attempt_cannot_fix(error, fatal) -> None:
    assert is_fatal(error) is fatal


def test_delays_back_off_with_jitter_and_honour_retry_after() -> None:
    policy = RetryPolicy(backoff=1.0, backoff_max=5.0)
    for retry, (low, high) in enumerate([(0.5, 1), (1, 2), (2, 4), (2.5, 5), (2.5, 5)]):
        delays = {policy.delay(retry) for _ in range(50)}
        assert all(low <= d <= high for d in delays) and len(delays) > 1
    throttled = TransientError('slow down', throttled=True)
    assert all(1.0 <= policy.delay(0, throttled) <= 2.0 for _ in range(20))
    assert policy.delay(0, TransientError('x', retry_after=30.0)) == 30.0
    assert policy.delay(0, TransientError('x', retry_after=600.0)) == 60.0  # Capped.


def test_call_with_retries_retries_transient_errors_then_gives_up(caplog) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError('reset by peer')
        return 'done'

    caplog.set_level(logging.INFO, logger='streaming')
    policy = RetryPolicy(backoff=0.01, backoff_max=0.02)
    assert call_with_retries(flaky, retries=2, policy=policy, what='Thing') == 'done'
    assert 'Thing: attempt 1 of 3 failed: ConnectionResetError: reset by peer' in caplog.text
    assert 'succeeded on attempt 3 of 3' in caplog.text

    calls.clear()
    with pytest.raises(RetriesExhausted) as caught:
        call_with_retries(flaky, retries=1, policy=policy, what='Thing')
    assert caught.value.attempts == 2 and isinstance(caught.value.last, ConnectionResetError)


def test_call_with_retries_raises_fatal_errors_at_once() -> None:
    calls = []

    def missing() -> None:
        calls.append(1)
        raise FileNotFoundError('no such object')

    with pytest.raises(FileNotFoundError):
        call_with_retries(missing, retries=5, policy=RetryPolicy(), what='Thing')
    assert calls == [1]
    with pytest.raises(ValueError, match='retries'):
        call_with_retries(missing, retries=-1, policy=RetryPolicy(), what='Thing')


def test_client_cache_builds_one_client_per_key_under_threads() -> None:
    built = []

    def make(key: str) -> object:
        time.sleep(0.01)
        built.append(key)
        return object()

    cache = ClientCache(make)
    got = []
    threads = [threading.Thread(target=lambda k=k: got.append(cache.get(k)))
               for k in ['a', 'b'] * 8]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(built) == ['a', 'b']
    assert len({id(c) for c in got}) == 2


def _child(cache: ClientCache, parent_client_id: int, queue) -> None:
    queue.put(id(cache.get('k')) != parent_client_id)


def test_client_cache_starts_empty_in_a_forked_child() -> None:
    counter = []
    cache = ClientCache(lambda key: counter.append(key) or object())
    client = cache.get('k')
    context = multiprocessing.get_context('fork')
    queue = context.Queue()
    process = context.Process(target=_child, args=(cache, id(client), queue))
    process.start()
    fresh = queue.get(timeout=30)
    process.join(30)
    assert fresh is True  # The child built its own client.
    assert cache.get('k') is client  # The parent's is untouched.
