"""Small helpers with no dependencies beyond the standard library."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import random
import time
from typing import Any, Callable, Iterator, Sequence, TypeVar

__all__ = ['bytes_to_int', 'number_abbrev_to_int', 'get_list_arg', 'parse_quantity', 'retry',
           'gc_paused']

logger = logging.getLogger(__name__)

# Binary units: each step is a factor of 1024, 'b' is one byte.
_BYTE_UNITS = {unit: 1024**i for i, unit in
               enumerate(['b', 'kb', 'mb', 'gb', 'tb', 'pb', 'eb', 'zb', 'yb'])}
# Decimal abbreviations for counts: '100k' samples.
_COUNT_UNITS = {'k': 10**3, 'm': 10**6, 'b': 10**9, 't': 10**12}


def _parse_suffixed(text: str, units: dict[str, int], what: str) -> int:
    """Parse ``<number><unit>`` (unit optional, case-insensitive) into an int."""
    raw = text.strip().lower().replace('_', '')
    for unit in sorted(units, key=len, reverse=True):
        if raw.endswith(unit):
            number, scale = raw[:-len(unit)].strip(), units[unit]
            break
    else:
        number, scale = raw, 1
    try:
        value = float(number)
    except ValueError:
        allowed = ', '.join(units)
        raise ValueError(f'Cannot parse {what} {text!r}: expected a number with an optional unit '
                         f'({allowed}), for example "64mb" or "100k".') from None
    return int(value * scale)


def bytes_to_int(bytes_str: int | float | str) -> int:
    """Convert a byte count such as ``1024``, ``'100kb'`` or ``'1.5gb'`` (powers of 1024) to int."""
    if isinstance(bytes_str, (int, float)) and not isinstance(bytes_str, bool):
        return int(bytes_str)
    if not isinstance(bytes_str, str):
        raise TypeError(f'Expected a byte count as int or str, got {type(bytes_str).__name__}.')
    return _parse_suffixed(bytes_str, _BYTE_UNITS, 'byte count')


def number_abbrev_to_int(abbrev_str: int | float | str) -> int:
    """Convert a count such as ``'100k'``, ``'64M'`` or ``'1.5b'`` (powers of 1000) to int."""
    if isinstance(abbrev_str, (int, float)) and not isinstance(abbrev_str, bool):
        return int(abbrev_str)
    if not isinstance(abbrev_str, str):
        raise TypeError(f'Expected a count as int or str, got {type(abbrev_str).__name__}.')
    return _parse_suffixed(abbrev_str, _COUNT_UNITS, 'count')


def parse_quantity(name: str, value: int | float | str, parse: Callable[[Any], int],
                   minimum: int = 0) -> int:
    """Parse an argument such as ``cache_limit='10gb'`` with ``parse``; errors name ``name``."""
    try:
        number = parse(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f'{name}: {error}') from None
    if number < minimum:
        raise ValueError(f'{name} must be >= {minimum}, got {value!r}.')
    return number


def get_list_arg(text: str | None) -> list[str]:
    """Split a comma-separated command-line argument into a list (empty for None or '')."""
    return text.split(',') if text else []


T = TypeVar('T')


def retry(
    exc_class: type[BaseException] | Sequence[type[BaseException]] = Exception,
    clean_up_fn: Callable[[], Any] | None = None,
    num_attempts: int = 3,
    initial_backoff: float = 1.0,
    max_jitter: float = 0.5,
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorator: call the function up to ``num_attempts`` times, backing off exponentially.

    Between attempts it sleeps ``initial_backoff * 2**i`` seconds plus up to ``max_jitter``
    seconds of random jitter, and runs ``clean_up_fn`` if given. Usable bare (``@retry``) or
    with arguments (``@retry(OSError, num_attempts=5)``).
    """
    if callable(exc_class) and not isinstance(exc_class, type):
        # Used bare: @retry applied directly to the function.
        return retry()(exc_class)  # type: ignore[arg-type]
    if num_attempts < 1:
        raise ValueError(f'retry: num_attempts must be at least 1, got {num_attempts}.')
    catch = tuple(exc_class) if isinstance(exc_class, (list, tuple)) else exc_class

    def decorate(func: Callable[..., T]) -> Callable[..., T]:

        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> T:
            for attempt in range(num_attempts):
                try:
                    return func(*args, **kwargs)
                except catch as error:  # type: ignore[misc]
                    if attempt + 1 == num_attempts:
                        raise
                    delay = initial_backoff * 2**attempt + random.uniform(0, max_jitter)
                    logger.debug('Attempt %d of %s failed (%s); retrying in %.2fs.', attempt + 1,
                                 func.__name__, error, delay)
                    if clean_up_fn is not None:
                        clean_up_fn()
                    time.sleep(delay)
            raise AssertionError('unreachable')

        return wrapped

    return decorate


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector while building many objects that form no cycles.

    Parsing a 50k-shard ``index.json`` allocates about a million dicts, lists and strings; each
    700 allocations start a collection that walks the young objects, and the older ones again
    and again, which made the parse several times slower (docs/shuffling.md). Reference
    counting still frees everything at once; the collector's previous state is restored.
    Also a decorator: ``@gc_paused()``.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def sorted_unique(values: Any) -> Any:
    """The distinct values of a 1-D integer array, sorted (``np.unique(values)``).

    ``np.unique`` without ``return_index``/``return_inverse`` (and ``np.union1d``) first asks
    ``np.ma.is_masked``, which imports ``numpy.ma`` (measured in docs/shuffling.md; more on a
    busy machine, where bytecode is not cached) in every process that reaches it first: the
    cold path to the first sample and each forked DataLoader worker. This is the same
    sort-and-compare.
    """
    import numpy as np

    out = np.sort(np.asarray(values).ravel())
    if len(out) > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out
