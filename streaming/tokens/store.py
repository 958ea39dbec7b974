"""A node's directory of token shards: what is there, fetching a shard, waiting for one.

Files arrive through ``streaming.storage.download_file``: verified (size, and the manifest's
checksum when there is one), published atomically, fetched as parallel ranged GETs and resumed
from a journal after a crash. Only one process fetches a given shard at a time (a
``coord.FileLock`` on ``.NAME.lock`` in the directory, which also holds across nodes on a shared
filesystem); other processes wait until the files are published, failing only if nothing changes
in the directory for that shard for ``stall_timeout`` seconds, i.e. the deadline follows
download progress.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from streaming.tokens.format import FileEntry, ShardEntry, preferred_hash

__all__ = ['OVERHEAD', 'RemoteShard', 'ShardStore', 'ShardWaitTimeout']

logger = logging.getLogger(__name__)

# Room reserved per shard, beyond its files, for the download journal and lock file.
OVERHEAD = 64 << 10


# Ranged GETs in flight per shard download (unless STREAMING_DOWNLOAD_CONCURRENCY says): twice
# the 8 that exactly fill a 96 MB/s link at 12 MB/s per connection, so a connection waiting for
# its next part's first byte, or a slow one, leaves the link full.
CONCURRENCY = 16


def download_config():  # noqa: ANN201 - DownloadConfig, imported lazily
    """The storage layer's ``DownloadConfig.from_env()`` with ``CONCURRENCY`` parts in flight."""
    from streaming.storage.download import DownloadConfig
    config = DownloadConfig.from_env()
    if os.environ.get('STREAMING_DOWNLOAD_CONCURRENCY'):
        return config
    return replace(config, concurrency=CONCURRENCY)


class ShardWaitTimeout(TimeoutError):
    """A shard's files did not appear and nothing progressed for ``stall_timeout`` seconds."""


@dataclass(frozen=True)
class RemoteShard:
    """Where shard ``index`` comes from and the names it gets locally."""

    index: int
    tokens_url: str
    tokens_name: str
    ids_url: str | None = None
    ids_name: str | None = None
    entry: ShardEntry | None = None

    def files(self) -> list[tuple[str, str, FileEntry | None]]:
        """``(url, local name, manifest entry or None)`` for the token file and the sidecar."""
        out = [(self.tokens_url, self.tokens_name, self.entry.tokens if self.entry else None)]
        if self.ids_url and self.ids_name:
            out.append((self.ids_url, self.ids_name, self.entry.ids if self.entry else None))
        return out


def _check_for(entry: FileEntry | None):
    algo = preferred_hash(entry)
    if algo is None:
        return None
    from streaming.storage.download import hash_check
    return hash_check(algo, entry.hashes[algo])  # type: ignore[union-attr]


class ShardStore:
    """Shards in the local directory ``local``."""

    def __init__(self, local: str, *, retries: int = 4, timeout: float = 60.0,
                 stall_timeout: float = 600.0, poll: float = 0.1) -> None:
        self.local = os.fspath(local)
        os.makedirs(self.local, exist_ok=True)
        self.retries, self.timeout = retries, timeout
        self.stall_timeout, self.poll = stall_timeout, poll

    def path(self, name: str) -> str:
        return os.path.join(self.local, name)

    # ---- state on disk ----------------------------------------------------------------------
    def ready(self, shard: RemoteShard) -> bool:
        """Whether every file of ``shard`` is published (with the manifest's size, if known)."""
        for _, name, entry in shard.files():
            try:
                size = os.path.getsize(self.path(name))
            except FileNotFoundError:
                return False
            if entry is not None and size != entry.bytes:
                return False
        return True

    def _related(self, shard: RemoteShard) -> Iterator[os.DirEntry]:
        """Directory entries of ``shard``: final, partial, temporary, journal, lock."""
        names = [name for _, name, _ in shard.files()]
        with os.scandir(self.local) as entries:
            for item in entries:
                bare = item.name.lstrip('.')
                if any(bare == n or bare.startswith(n + '.') for n in names):
                    yield item

    def on_disk(self, shard: RemoteShard) -> tuple[int, float]:
        """(apparent bytes, latest mtime) of everything ``shard`` has in the directory."""
        total, latest = 0, 0.0
        for item in self._related(shard):
            with contextlib.suppress(FileNotFoundError):
                stat = item.stat()
                total += stat.st_size
                latest = max(latest, stat.st_mtime)
        return total, latest

    def _mark(self, shard: RemoteShard) -> tuple:
        marks = []
        for item in self._related(shard):
            with contextlib.suppress(FileNotFoundError):
                stat = item.stat()
                marks.append((item.name, stat.st_size, stat.st_mtime_ns))
        return tuple(sorted(marks))

    def remove(self, shard: RemoteShard) -> None:
        """Delete every file of ``shard``, partial downloads included."""
        for item in list(self._related(shard)):
            if not item.name.endswith('.lock'):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(item.path)

    # ---- fetching and waiting ---------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, shard: RemoteShard, again: bool = False) -> Iterator[bool]:
        """Hold ``shard``'s download lock.

        Yields False (without the lock) if the shard became ready while waiting for it (unless
        ``again``: it is to be downloaded anew however ready it is).
        """
        from streaming.coord import FileLock
        lock = FileLock(self.path(f'.{shard.tokens_name}.lock'))
        held = False

        def attempt() -> bool:
            nonlocal held
            held = held or lock.acquire(blocking=False)
            return held or (not again and self.ready(shard))

        try:
            self._wait(shard, attempt)
            if not held or (not again and self.ready(shard)):
                yield False
                return
            yield True
        finally:
            if held:
                lock.release()

    def fetch(self, shard: RemoteShard, again: bool = False) -> None:
        """Download whatever of ``shard`` is missing (resuming a partial download).

        ``again``: every file anew, each replacing its old copy only once complete (atomically),
        so that other processes of the node never find the shard missing meanwhile.
        """
        from streaming.storage import download_file
        with self._locked(shard, again) as mine:
            if not mine:
                return
            self._clean_temporaries(shard)
            for url, name, entry in shard.files():
                path = self.path(name)
                if not again and os.path.exists(path) and (
                        entry is None or os.path.getsize(path) == entry.bytes):
                    continue
                started = time.monotonic()
                download_file(url, path, retries=self.retries, timeout=self.timeout,
                              size=entry.bytes if entry else None, check=_check_for(entry),
                              config=download_config())
                logger.info('Fetched %s in %.1fs.', name, time.monotonic() - started)

    # ---- verification -------------------------------------------------------------------------
    def verified(self, shard: RemoteShard, seq_len: int) -> bool:
        """Whether ``shard`` on disk carries a valid verified marker (or has nothing to check)."""
        from streaming.tokens.verify import is_verified
        if not _checkable(shard):
            return True
        return is_verified(self.path(shard.tokens_name), self._ids_path(shard), seq_len)

    def _ids_path(self, shard: RemoteShard) -> str | None:
        return self.path(shard.ids_name) if shard.ids_name else None

    def verify(self, shard: RemoteShard, seq_len: int, raw_dtype=None, *,
               refetch: bool | Callable[[], bool] = True) -> None:
        """Check every window of ``shard`` against its sidecar (and the manifest's checksums).

        On a mismatch the shard is downloaded once more (each file replaced when complete, never
        missing meanwhile), then checked again; a shard still wrong gets a corrupt marker and
        raises ShardCorruptError naming the shard, window and both digests. A shard that passes
        gets a verified marker. ``refetch=False``: no re-download; a callable ``refetch`` is
        asked at the mismatch, and when it says no (the shard is no longer wanted), the shard is
        left unmarked for its next use to check.
        """
        from streaming.tokens.format import read_npy_layout
        from streaming.tokens.verify import (
            ShardCorruptError,
            find_mismatch,
            mark_corrupt,
            mark_verified,
        )
        if not _checkable(shard) or self.verified(shard, seq_len):
            return
        path, ids_path = self.path(shard.tokens_name), self._ids_path(shard)
        for attempt in range(2 if refetch else 1):  # noqa: B007 - used after the loop.
            layout = read_npy_layout(path, raw_dtype)
            entry = shard.entry
            started = time.monotonic()
            mismatch = find_mismatch(path, ids_path, seq_len=seq_len, offset=layout.offset,
                                     itemsize=layout.dtype.itemsize,
                                     tokens_entry=entry.tokens if entry else None,
                                     ids_entry=entry.ids if entry else None)
            if mismatch is None:
                mark_verified(path, ids_path, seq_len)
                logger.info('Verified shard %d in %.1fs.', shard.index,
                            time.monotonic() - started)
                return
            if attempt == 0 and (refetch() if callable(refetch) else refetch):
                logger.warning('Shard %d is corrupt on disk (%s); downloading it again.',
                               shard.index, mismatch.describe())
                self.fetch(shard, again=True)  # Replaced, never removed: readers wait.
            elif attempt == 0 and callable(refetch):
                logger.info('Shard %d is corrupt on disk (%s) but no longer active; left for '
                            'its next use to check.', shard.index, mismatch.describe())
                return
            else:
                break
        mark_corrupt(path, shard.index, mismatch)
        raise ShardCorruptError(shard.index, mismatch, attempt == 1)

    def _clean_temporaries(self, shard: RemoteShard) -> None:
        """Temporary files of a killed download (never resumed; partial files are kept)."""
        for item in list(self._related(shard)):
            if item.name.endswith('.tmp'):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(item.path)

    def wait(self, shard: RemoteShard) -> float:
        """Block until ``shard`` is ready; returns the seconds waited."""
        started = time.monotonic()
        self._wait(shard, lambda: self.ready(shard))
        return time.monotonic() - started

    def _wait(self, shard: RemoteShard, done: Callable[[], bool]) -> None:
        """Poll ``done`` until true; fail if ``shard``'s files stay unchanged too long."""
        last, mark = time.monotonic(), self._mark(shard)
        while not done():
            time.sleep(self.poll)
            now, new = time.monotonic(), self._mark(shard)
            if new != mark:
                last, mark = now, new
            elif now - last > self.stall_timeout:
                raise ShardWaitTimeout(
                    f'Waited for shard {shard.index} ({self.path(shard.tokens_name)}) with no '
                    f'download progress for {self.stall_timeout:g}s (stall_timeout); the '
                    f'process fetching it (local rank 0, or the holder of its lock) may have '
                    f'died.')


def _checkable(shard: RemoteShard) -> bool:
    """Whether there is anything to verify a shard against (a sidecar, or checksums)."""
    return bool(shard.ids_name) or bool(shard.entry and shard.entry.tokens.hashes)

