"""Small helpers: human-readable sizes and counts, list arguments, retry, pausing the GC."""

from __future__ import annotations

import gc
import time

import pytest

from streaming.util import bytes_to_int, gc_paused, get_list_arg, number_abbrev_to_int, retry


@pytest.mark.parametrize('text,value', [
    ('100kb', 100 * 1024),
    ('100KB', 100 * 1024),
    (' 100 kb ', 100 * 1024),
    ('1.5gb', int(1.5 * 1024**3)),
    ('64mb', 64 * 1024**2),
    ('2tb', 2 * 1024**4),
    ('1pb', 1024**5),
    ('1yb', 1024**8),
    ('1b', 1),
    ('512b', 512),
    ('1024', 1024),
    ('0.5kb', 512),
    (100, 100),
    (0, 0),
    (1 << 26, 1 << 26),
    (12.0, 12),
])
def test_bytes_to_int(text: int | float | str, value: int) -> None:
    result = bytes_to_int(text)
    assert result == value
    assert type(result) is int


@pytest.mark.parametrize('text', ['', 'kb', 'abc', '10xb', '1.2.3mb', 'mb10'])
def test_bytes_to_int_rejects(text: str) -> None:
    with pytest.raises(ValueError, match='byte'):
        bytes_to_int(text)


@pytest.mark.parametrize('text,value', [
    ('100k', 100_000),
    ('100K', 100_000),
    ('64M', 64_000_000),
    ('64m', 64_000_000),
    ('1b', 1_000_000_000),
    ('77b', 77_000_000_000),
    ('2t', 2 * 10**12),
    ('1.5k', 1500),
    ('1234', 1234),
    (5, 5),
    (2.0, 2),
])
def test_number_abbrev_to_int(text: int | float | str, value: int) -> None:
    result = number_abbrev_to_int(text)
    assert result == value
    assert type(result) is int


@pytest.mark.parametrize('text', ['', 'k', 'lots', '10x', '1kb'])
def test_number_abbrev_to_int_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        number_abbrev_to_int(text)


def test_non_string_inputs_are_type_errors() -> None:
    with pytest.raises(TypeError):
        bytes_to_int(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        number_abbrev_to_int([1])  # type: ignore[arg-type]


def test_get_list_arg() -> None:
    assert get_list_arg('a,b,c') == ['a', 'b', 'c']
    assert get_list_arg('sha1') == ['sha1']
    assert get_list_arg('') == []
    assert get_list_arg(None) == []
    assert get_list_arg('a,,b') == ['a', '', 'b']


def _flaky(failures: int, error: type[BaseException] = OSError) -> tuple[list[int], object]:
    calls: list[int] = []

    def func(x: int) -> int:
        calls.append(x)
        if len(calls) <= failures:
            raise error(f'attempt {len(calls)}')
        return x * 2
    return calls, func


def test_retry_until_success() -> None:
    calls, func = _flaky(2)
    wrapped = retry(OSError, num_attempts=3, initial_backoff=0.001, max_jitter=0.001)(func)
    assert wrapped(21) == 42
    assert calls == [21, 21, 21]


def test_retry_gives_up_after_num_attempts() -> None:
    calls, func = _flaky(10)
    wrapped = retry(OSError, num_attempts=4, initial_backoff=0.001, max_jitter=0)(func)
    with pytest.raises(OSError, match='attempt 4'):
        wrapped(1)
    assert len(calls) == 4


def test_retry_only_catches_the_given_classes() -> None:
    calls, func = _flaky(1, KeyError)
    wrapped = retry([OSError, ValueError], num_attempts=5, initial_backoff=0.001)(func)
    with pytest.raises(KeyError):
        wrapped(1)
    assert len(calls) == 1
    calls, func = _flaky(2, ValueError)
    wrapped = retry([OSError, ValueError], num_attempts=5, initial_backoff=0.001,
                    max_jitter=0)(func)
    assert wrapped(3) == 6 and len(calls) == 3


def test_retry_bare_decorator_and_metadata() -> None:
    @retry
    def answer() -> int:
        """Docs."""
        return 42
    assert answer() == 42
    assert answer.__name__ == 'answer' and answer.__doc__ == 'Docs.'


def test_retry_backs_off_exponentially() -> None:
    calls, func = _flaky(3)
    wrapped = retry(OSError, num_attempts=4, initial_backoff=0.02, max_jitter=0)(func)
    start = time.monotonic()
    assert wrapped(1) == 2
    # Sleeps 0.02 + 0.04 + 0.08 seconds between the four attempts.
    assert time.monotonic() - start >= 0.14


def test_retry_clean_up_runs_between_attempts() -> None:
    cleaned: list[int] = []
    calls, func = _flaky(2)
    wrapped = retry(OSError, clean_up_fn=lambda: cleaned.append(len(calls)), num_attempts=3,
                    initial_backoff=0.001, max_jitter=0)(func)
    assert wrapped(5) == 10
    assert cleaned == [1, 2]


def test_retry_rejects_zero_attempts() -> None:
    with pytest.raises(ValueError, match='num_attempts'):
        retry(OSError, num_attempts=0)


def test_gc_paused_restores_the_collector_state() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError):
        with gc_paused():
            raise ValueError('inside')
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # A caller that turned it off keeps it off.
    finally:
        gc.enable()
