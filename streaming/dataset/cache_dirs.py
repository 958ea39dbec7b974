"""Directories the library chooses itself: the cache of ``local=None`` and the set-up caches.

- ``default_local(remote, split)``: where a stream given no ``local`` caches its shards, the
  reference's path ``<tempdir>/<blake2s of remote>/<split>`` (or under ``$STREAMING_CACHE_DIR``),
  so that both libraries find the same cache, and reused by the next run.
- ``setup_cache_dir(local_dir)``: where the set-up caches of the dataset in ``local_dir`` (the
  index summary, epoch orders: ``index_cache``, ``order_store``) are kept across runs, keyed by
  that directory's real path: ``<root>/shardflow-setup-<uid>/<hash>``, root
  ``$STREAMING_CACHE_DIR`` or the temp dir. Never inside ``local_dir``: a user's own data
  directory, or a cache whose listing and size should be the reference's, gains nothing.

A directory in the shared temp dir is created private (mode 0700) and refused if another user
owns it, others may write to it, or it is a symlink (``OutputError`` naming ``local``): on a
shared machine someone could otherwise plant files or links in a predictable path.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile

from streaming.errors import OutputError

__all__ = ['default_local', 'private_dir', 'setup_cache_dir']

CACHE_DIR_ENV = 'STREAMING_CACHE_DIR'


def private_dir(path: str) -> str:
    """``path`` as a directory of this user alone (created with mode 0700 if missing)."""
    uid = os.getuid() if hasattr(os, 'getuid') else 0
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise OutputError(f'local: the default cache directory {path} cannot be created '
                          f'({error.strerror}); pass local=...', error.errno) from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, 'getuid') and st.st_uid != uid) or \
            st.st_mode & 0o022:
        kind = 'a symlink' if stat.S_ISLNK(st.st_mode) else f'mode {stat.S_IMODE(st.st_mode):o}'
        raise OutputError(f'local: the default cache directory {path} is not a private '
                          f'directory of this user (owner uid {st.st_uid}, {kind}): refusing to '
                          f'cache there; remove it or pass local=...')
    return path


def _digest(text: str) -> str:
    return hashlib.blake2s(text.encode('utf-8'), digest_size=16).hexdigest()


def default_local(remote: str | None, split: str | None = None) -> str:
    """The cache directory of a stream given no ``local``: the same for the same remote.

    ``<tempdir>/<blake2s(remote)>/<split>`` as the reference computes it (its trailing
    separator too when there is no split); under ``$STREAMING_CACHE_DIR`` instead when set.
    """
    root = os.environ.get(CACHE_DIR_ENV)
    name = _digest(str(remote))
    if root:
        return os.path.join(root, name, split or '')
    return os.path.join(private_dir(os.path.join(tempfile.gettempdir(), name)), split or '')


def setup_cache_dir(local_dir: str) -> str:
    """The private directory of the set-up caches of the dataset in ``local_dir``.

    Keyed by the real path of ``local_dir``; raises ``OutputError`` if it cannot be made private.
    """
    uid = os.getuid() if hasattr(os, 'getuid') else 0
    base = os.environ.get(CACHE_DIR_ENV)
    if base:
        os.makedirs(base, exist_ok=True)
    root = private_dir(os.path.join(base or tempfile.gettempdir(), f'shardflow-setup-{uid}'))
    return os.path.join(root, _digest(os.path.realpath(local_dir)))
