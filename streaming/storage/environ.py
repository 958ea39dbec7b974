"""Settings read from the environment on every request, computed once per environment.

The download layer decides its client, its tuning and its retry policy from ``STREAMING_*`` /
``AWS_*`` variables at each call, so that a change in the process is followed. Reading them
costs ~20-70 us a time (``os.environ`` decodes every name it iterates), a visible share of a
small shard's download (docs/benchmarks.md, issue 31). ``on_environ`` keeps the result for the
current environment: the cache key is the environment's raw content, compared as a whole, so
any change of any variable computes afresh.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Callable, TypeVar

__all__ = ['environ_key', 'on_environ']

R = TypeVar('R')
_KEPT = 16  # Results kept per function (arguments x environments); then all are dropped.


def environ_key() -> tuple:
    """The environment's content now, as a hashable value (raw bytes on POSIX: no decoding)."""
    raw = getattr(os.environ, '_data', None)
    return tuple(raw.items()) if isinstance(raw, dict) else tuple(os.environ.items())


def on_environ(function: Callable[..., R]) -> Callable[..., R]:
    """``function`` (of hashable arguments and the environment only), cached per environment.

    Errors are not cached: a bad value raises again at the next call.
    """
    results: dict[tuple, R] = {}
    lock = threading.Lock()

    @functools.wraps(function)
    def cached(*args: object) -> R:
        key = (args, environ_key())
        try:
            return results[key]
        except KeyError:
            pass
        result = function(*args)
        with lock:
            if len(results) >= _KEPT:
                results.clear()
            results[key] = result
        return result

    cached.uncached = function  # type: ignore[attr-defined]
    return cached
