"""Checksums stored in ``index.json``: hashlib's fixed-length algorithms and xxhash's."""

from __future__ import annotations

import hashlib
from typing import Any, Callable

__all__ = ['get_hash', 'get_hashes', 'is_hash', 'validate_hashes']

_XXHASH_ALGOS = ('xxh32', 'xxh64', 'xxh128', 'xxh3_64', 'xxh3_128')


def _hashlib_algos() -> set[str]:
    # shake_* need an output length, so they cannot be used as plain checksums.
    names = {n for n in hashlib.algorithms_available if hasattr(hashlib, n)}
    return {n for n in names if not n.startswith('shake_')}


def _constructor(algo: str) -> Callable[[bytes], Any]:
    if algo in _XXHASH_ALGOS:
        import xxhash
        return getattr(xxhash, algo)
    return getattr(hashlib, algo)


def get_hashes() -> set[str]:
    """Every supported hash algorithm name."""
    return _hashlib_algos() | set(_XXHASH_ALGOS)


def is_hash(algo: str) -> bool:
    """Whether ``algo`` is a supported hash algorithm."""
    return algo in get_hashes()


def validate_hashes(hashes: list[str] | None) -> list[str]:
    """Check a writer's ``hashes`` argument: known names, sorted, no repeats."""
    hashes = list(hashes or [])
    supported = get_hashes()
    unknown = [h for h in hashes if h not in supported]
    if unknown:
        raise ValueError(f'Unknown hash algorithm(s) {unknown} in hashes; supported: '
                         f'{sorted(supported)}.')
    if hashes != sorted(set(hashes)):
        raise ValueError(f'hashes must be sorted and without repeats, got {hashes}; '
                         f'use {sorted(set(hashes))}.')
    return hashes


def get_hash(algo: str, data: bytes) -> str:
    """The hex digest of ``data`` under ``algo``."""
    if not is_hash(algo):
        raise ValueError(f'Unknown hash algorithm {algo!r}; supported: {sorted(get_hashes())}.')
    return _constructor(algo)(data).hexdigest()
