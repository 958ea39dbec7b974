"""Checks on downloaded bytes: the size, an optional checksum, then publication.

A downloaded file lives under a temporary name until ``publish_verified`` has checked it; a
wrong file raises ``WrongBytes``, which the download layer retries and finally reports as
``CorruptDownloadError``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from streaming.fileio import publish

__all__ = ['Check', 'WrongBytes', 'hash_check', 'new_digest', 'publish_verified']

# A check on a downloaded file: a description of what is wrong with it, or None.
Check = Callable[[str], 'str | None']


class WrongBytes(Exception):
    """The bytes arrived but are wrong (size or checksum): retry, then CorruptDownloadError."""


def new_digest(algo: str) -> Any:
    """A fresh digest object of ``algo``.

    ``algo`` is any ``hashlib`` algorithm (``sha256``, ``md5``, ...) or an ``xxhash`` one
    (``xxh64``, ``xxh3_64``, ...).
    """
    if algo.startswith('xxh'):
        import xxhash
        return getattr(xxhash, algo)()
    import hashlib
    return hashlib.new(algo)


def hash_check(algo: str, expected: str) -> Check:
    """A ``check`` for ``download_file``: the file's ``algo`` digest must equal ``expected``.

    ``algo`` is any algorithm ``new_digest`` knows.
    """

    def check(path: str) -> str | None:
        digest = new_digest(algo)
        with open(path, 'rb') as f:
            while True:
                block = f.read(4 << 20)
                if not block:
                    break
                digest.update(block)
        got = digest.hexdigest()
        return None if got == expected else f'{algo} checksum mismatch (got {got}, expected ' \
                                             f'{expected})'

    return check


def publish_verified(temp: str, path: str, size: int | None, check: Check | None) -> None:
    """Rename the finished ``temp`` to ``path`` if it has ``size`` bytes and passes ``check``.

    Raises ``WrongBytes`` (and leaves ``temp`` for the caller to remove) otherwise.
    """
    got = os.path.getsize(temp)
    if size is not None and got != size:
        raise WrongBytes(f'got {got} bytes, expected {size}')
    problem = check(temp) if check is not None else None
    if problem:
        raise WrongBytes(problem)
    publish(temp, path)
