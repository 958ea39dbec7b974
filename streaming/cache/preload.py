"""What the node's download threads will import, imported first by the thread building the dataset.

A DataLoader worker forked while another thread of its parent holds a module's import lock
deadlocks as soon as it imports that module itself: the child gets the lock held, and never the
thread that would release it. The node's schedule (``streaming.cache.prefetch``) starts its
threads when the dataset is built, before workers are forked, and its downloads use modules that
are imported on first use: ``numpy.random`` (the epoch's order), the codecs of compressed shards,
the checksum of ``validate_hash``, ``ctypes`` (``fileio.preallocate``), the storage SDK and what
its client imports when built. The dataset's constructor imports all of them
(``preload_for_downloads``) before any such thread exists, so those threads never do a first
import (tests/dataset/test_first_imports.py checks it with an audit hook).
"""

from __future__ import annotations

import importlib
import logging
from typing import Sequence

from streaming.cache.shard_cache import CachedStream

__all__ = ['preload_for_downloads']

logger = logging.getLogger(__name__)


def preload_for_downloads(streams: Sequence[CachedStream]) -> None:
    """Import the modules that downloading and preparing these streams' shards will use.

    A module that cannot be imported is left to the download, which reports it where it is
    needed (a missing codec or SDK is that shard's error, not the dataset's).
    """
    import numpy.random  # noqa: F401 - numpy imports it lazily, on first use.

    from streaming.fileio import load_preallocate
    from streaming.format.compression import import_installed_codecs
    from streaming.storage import get_backend
    import_installed_codecs()
    load_preallocate()  # Downloads reserve their files' blocks through ctypes.
    for stream in streams:
        if stream.validate_hash:
            _quietly(importlib.import_module,
                     'xxhash' if stream.validate_hash.startswith('xxh') else 'hashlib')
        if stream.has_remote:
            try:
                backend = get_backend(stream.remote)  # type: ignore[arg-type]
                warm_up = getattr(backend, 'warm_up', None)
                if warm_up is not None:
                    warm_up(float(stream.download_timeout or 60.0))
            except Exception as error:  # The first download says what is wrong, with context.
                logger.debug('Preloading the backend of %s failed: %s', stream.remote, error)


def _quietly(load: object, name: str) -> None:
    try:
        load(name)  # type: ignore[operator]
    except ImportError:
        pass
