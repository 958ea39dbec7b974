"""Keep the main process's freed batch memory for the next batch instead of faulting it anew.

The main process of a DataLoader copies each batch out of a worker's ring into new ``bytes``
objects (``streaming.dataset.handoff``) and the training loop frees them a step later. glibc's
``malloc`` gives memory freed at the top of its heap back to the kernel as soon as more than
``M_TRIM_THRESHOLD`` (128 KiB by default) is free there, and serves values over
``M_MMAP_THRESHOLD`` with a ``mmap`` of their own, unmapped at ``free``. With batches of
megabytes either way every batch lands on fresh pages: one page fault (and the kernel zeroing the
page) per 4 KiB copied, which costs several times the copy itself.

``keep_freed(nbytes, largest)`` raises both thresholds so that about ``nbytes`` of freed memory
stays in the heap and is reused by the next batch, and values up to ``largest`` come from the
heap. It is called in the main process when it maps a worker's ring (the ring's size, its slot
size); the thresholds only ever grow, capped at ``MAX_KEPT`` and glibc's 32 MiB. It changes a
process-wide ``malloc`` setting, so it stays out of the way when the user chose these settings
(``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``), off glibc, and
with ``STREAMING_KEEP_HEAP=0``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ['keep_freed', 'kept_bytes', 'MAX_KEPT']

MAX_KEPT = 512 << 20  # The most freed memory the heap keeps for reuse.
MAX_MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold (64-bit).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # From glibc's malloc.h.

_lock = threading.Lock()
_kept = 0  # The trim threshold set so far (0: untouched).
_largest = 0  # The mmap threshold set so far.
_mallopt: Any = None  # libc's mallopt, once found; False where there is none to use.


def _user_chose() -> bool:
    tunables = os.environ.get('GLIBC_TUNABLES', '')
    return (os.environ.get('STREAMING_KEEP_HEAP', '1') == '0' or
            'MALLOC_TRIM_THRESHOLD_' in os.environ or 'MALLOC_MMAP_THRESHOLD_' in os.environ or
            'malloc.trim_threshold' in tunables or 'malloc.mmap_threshold' in tunables)


def _find_mallopt() -> Any:
    global _mallopt
    if _mallopt is None:
        _mallopt = False
        try:
            glibc = os.confstr('CS_GNU_LIBC_VERSION')
        except (AttributeError, ValueError, OSError):
            glibc = None
        if glibc and not _user_chose():
            import ctypes
            try:
                _mallopt = ctypes.CDLL(None).mallopt
            except (OSError, AttributeError):
                _mallopt = False
    return _mallopt


def keep_freed(nbytes: int, largest: int) -> int:
    """Let the heap keep up to ``nbytes`` freed for reuse, and serve values up to ``largest``.

    Returns the amount now kept (0 where this process's ``malloc`` settings are left alone).
    """
    global _kept, _largest
    with _lock:
        mallopt = _find_mallopt()
        wanted = max(min(int(nbytes), MAX_KEPT), _kept)
        served = max(min(int(largest), MAX_MMAP_THRESHOLD, wanted), _largest)
        if not mallopt or (wanted, served) == (_kept, _largest):
            return _kept
        # Setting either fixes glibc's dynamic thresholds, so both are set, every time.
        if mallopt(_M_MMAP_THRESHOLD, served) and mallopt(_M_TRIM_THRESHOLD, wanted):
            _kept, _largest = wanted, served
        return _kept


def kept_bytes() -> int:
    """The freed memory this process's heap now keeps for reuse (0: settings untouched)."""
    return _kept
