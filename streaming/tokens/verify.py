"""Checking a shard's token bytes against its sidecar (and the manifest's checksums).

Each entry of ``sample_ids_{i:06d}.bin`` is the 8-byte blake2b digest of one window of
``seq_len`` tokens. ``find_mismatch`` hashes every window of a shard in one sequential read
(and, when given, the whole file's manifest checksum in the same pass); ``WindowCheck`` checks
only the windows about to be served. A shard that passed gets a marker beside it,
``.{tokens_name}.verified``, holding both files' size, mtime and inode and the process that
checked them. The marker vouches for the bytes only while that process lives: the other ranks
and workers of its run skip the hashing, but a restart checks every shard again (window by
window on use, and in a background pass), so bytes that rotted on disk under an old marker,
mtime kept, are caught before they are served. A shard that stayed wrong after a re-download
gets ``.{tokens_name}.corrupt`` holding the error, which waiting ranks read. Both markers are
deleted with the shard.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from streaming.coord.shared_dir import start_time
from streaming.fileio import atomic_write, remove_quietly
from streaming.tokens.format import FileEntry, TokenFormatError, preferred_hash

__all__ = ['Mismatch', 'ShardCorruptError', 'WindowCheck', 'find_mismatch', 'is_verified',
           'mark_verified']

CHUNK = 8 << 20


@dataclass(frozen=True)
class Mismatch:
    """What is wrong: a window whose digest differs from the sidecar, or a file checksum."""

    path: str
    ids_path: str | None
    window: int | None
    expected: str
    actual: str
    what: str = 'window'

    def describe(self) -> str:
        if self.window is None:
            return f'{self.path}: {self.what} is {self.actual}, the manifest says {self.expected}'
        return (f'{self.path}: window {self.window} hashes to {self.actual} but '
                f'{os.path.basename(self.ids_path or "")} says {self.expected}')


class ShardCorruptError(TokenFormatError):
    """A shard's bytes disagree with its sidecar or manifest (after one re-download).

    ``shard`` (its number), ``window``, ``expected`` and ``actual`` (hex digests) say where.
    """

    def __init__(self, shard: int | str | None, mismatch: Mismatch | None = None,
                 redownloaded: bool = False) -> None:
        self.shard, self.mismatch, self.redownloaded = shard, mismatch, redownloaded
        self.window = self.expected = self.actual = None
        if mismatch is None:  # Re-raised from a message alone (a DataLoader worker's error).
            super().__init__(str(shard))
            return
        self.window, self.expected, self.actual = mismatch.window, mismatch.expected, \
            mismatch.actual
        again = ', still wrong after one verified re-download' if redownloaded else ''
        name = f'shard {shard} ' if shard is not None else ''
        super().__init__(f'Corrupt token {name}{mismatch.describe()}{again}; refusing to '
                         f'train on it.')

    def __reduce__(self) -> tuple:
        if self.mismatch is None:
            return type(self), (self.args[0],)
        return type(self), (self.shard, self.mismatch, self.redownloaded)


def _hex(value: bytes) -> str:
    return '0x' + value[::-1].hex()  # The uint64's value (the sidecar is little-endian).


def _file_hasher(entry: FileEntry | None) -> tuple[str, str, Any] | None:
    """(algorithm, expected digest, a fresh digest object) of the manifest entry's checksum."""
    algo = preferred_hash(entry)
    if algo is None:
        return None
    from streaming.storage.verify import new_digest
    return algo, entry.hashes[algo], new_digest(algo)  # type: ignore[union-attr]


def find_mismatch(path: str, ids_path: str | None, *, seq_len: int, offset: int,
                  itemsize: int, tokens_entry: FileEntry | None = None,
                  ids_entry: FileEntry | None = None) -> Mismatch | None:
    """The first thing wrong with a shard, or None.

    Hashes every whole window of ``seq_len`` tokens (``itemsize`` bytes each, starting at byte
    ``offset``) and compares it with the sidecar ``ids_path``; with manifest entries, also the
    token file's and sidecar's checksums, in the same read.
    """
    file_hash = _file_hasher(tokens_entry)
    ids = np.fromfile(ids_path, dtype='<u8') if ids_path else np.empty(0, '<u8')
    ids_bytes = ids.tobytes()
    step = seq_len * itemsize
    per_chunk = max(1, CHUNK // step)
    buffer = bytearray(per_chunk * step)
    view = memoryview(buffer)
    blake2b = hashlib.blake2b
    window = 0
    with open(path, 'rb', buffering=0) as f:
        head = f.read(offset)
        if file_hash:
            file_hash[2].update(head)
        while True:
            got = f.readinto(buffer)
            if not got:
                break
            chunk = view[:got]
            if file_hash:
                file_hash[2].update(chunk)
            whole = min(got // step, len(ids) - window)
            if whole <= 0:
                continue
            digests = b''.join([blake2b(chunk[i * step:(i + 1) * step], digest_size=8).digest()
                                for i in range(whole)])
            expected = ids_bytes[window * 8:(window + whole) * 8]
            if digests != expected:
                bad = next(i for i in range(whole) if digests[i * 8:i * 8 + 8] !=
                           expected[i * 8:i * 8 + 8])
                return Mismatch(path, ids_path, window + bad, _hex(expected[bad * 8:bad * 8 + 8]),
                                _hex(digests[bad * 8:bad * 8 + 8]))
            window += whole
    if file_hash and file_hash[2].hexdigest() != file_hash[1]:
        return Mismatch(path, ids_path, None, file_hash[1], file_hash[2].hexdigest(),
                        f'its {file_hash[0]} checksum')
    ids_hash = _file_hasher(ids_entry)
    if ids_hash and ids_path:
        ids_hash[2].update(ids_bytes)
        if ids_hash[2].hexdigest() != ids_hash[1]:
            return Mismatch(ids_path, None, None, ids_hash[1], ids_hash[2].hexdigest(),
                            f'its {ids_hash[0]} checksum')
    return None


# ---- markers ----------------------------------------------------------------------------------
def _marker(path: str, kind: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, f'.{name}.{kind}')


def _stats(path: str, ids_path: str | None, seq_len: int) -> dict[str, Any]:
    def one(p: str) -> list[int]:
        stat = os.stat(p)
        return [stat.st_size, stat.st_mtime_ns, stat.st_ino]
    return {'tokens': one(path), 'ids': one(ids_path) if ids_path else None,
            'seq_len': seq_len}


def _boot_id() -> str:
    try:
        with open('/proc/sys/kernel/random/boot_id') as f:
            return f.read().strip()
    except OSError:
        return ''


def _checker() -> list[Any]:
    """This process, as a marker records it: boot, pid and the kernel's start time of the pid."""
    pid = os.getpid()
    return [_boot_id(), pid, start_time(pid)]


def _still_running(checker: Any) -> bool:
    """Whether the process a marker names is alive (same boot, same pid, same start time)."""
    try:
        boot, pid, started = checker
    except (TypeError, ValueError):
        return False  # A marker from before markers named their checker: check again.
    return bool(boot) and boot == _boot_id() and started is not None and \
        start_time(int(pid)) == started


def mark_verified(path: str, ids_path: str | None, seq_len: int) -> None:
    """Record that ``path`` (as it is now on disk) matched its sidecar, checked by this process."""
    remove_quietly(_marker(path, 'corrupt'))
    atomic_write(_marker(path, 'verified'),
                 json.dumps({**_stats(path, ids_path, seq_len), 'checker': _checker()}))


def is_verified(path: str, ids_path: str | None, seq_len: int) -> bool:
    """Whether ``path`` carries a marker that matches the files as they are now.

    Only a marker whose checker is still running counts: after a restart every shard is
    checked again, since disk corruption can change bytes without touching size, mtime or inode.
    """
    try:
        with open(_marker(path, 'verified')) as f:
            body = json.load(f)
        checker = body.pop('checker', None)
        return body == _stats(path, ids_path, seq_len) and _still_running(checker)
    except (OSError, ValueError, AttributeError):
        return False


def mark_corrupt(path: str, shard: int | None, mismatch: Mismatch) -> None:
    """Record the final verdict on a shard that stayed wrong after a re-download."""
    atomic_write(_marker(path, 'corrupt'), json.dumps({'shard': shard, **asdict(mismatch)}))


def corrupt_verdict(path: str) -> ShardCorruptError | None:
    """The error recorded by ``mark_corrupt`` for ``path``, if any."""
    try:
        with open(_marker(path, 'corrupt')) as f:
            body = json.load(f)
    except (OSError, ValueError):
        return None
    shard = body.pop('shard', None)
    return ShardCorruptError(shard, Mismatch(**body), True)


# ---- checking the windows about to be served --------------------------------------------------
class WindowCheck:
    """Checks windows of one shard against the sidecar before they are served, each once.

    Skipped entirely when the shard carries a valid verified marker (looked at again every
    ``recheck`` calls, so a background pass that finishes stops the per-window work).
    """

    def __init__(self, path: str, ids_path: str, seq_len: int, num_windows: int,
                 recheck: int = 64) -> None:
        self.path, self.ids_path, self.seq_len = path, ids_path, seq_len
        self.seen = np.zeros((num_windows + 7) // 8, np.uint8)  # One bit per window.
        self.recheck, self.calls = recheck, 0
        self.done = is_verified(path, ids_path, seq_len)

    def unchecked(self, indices: np.ndarray) -> np.ndarray:
        """Positions in ``indices`` of the windows not checked yet."""
        if self.done:
            return indices[:0]
        self.calls += 1
        if self.calls % self.recheck == 0 and is_verified(self.path, self.ids_path,
                                                          self.seq_len):
            self.done = True
            return indices[:0]
        bits = (self.seen[indices >> 3] >> (indices & 7).astype(np.uint8)) & 1
        return np.flatnonzero(bits == 0)

    def check(self, indices: np.ndarray, rows: Any, ids: np.ndarray) -> Mismatch | None:
        """Hash ``rows[k][:seq_len]`` as window ``indices[k]``; the first bad one, or None."""
        blake2b, seq_len = hashlib.blake2b, self.seq_len
        digests = b''.join([blake2b(np.ascontiguousarray(row[:seq_len]), digest_size=8).digest()
                            for row in rows])
        expected = np.asarray(ids[indices], '<u8').tobytes()
        good = len(indices)
        if digests != expected:
            good = next(k for k in range(len(indices))
                        if digests[k * 8:k * 8 + 8] != expected[k * 8:k * 8 + 8])
        passed = indices[:good]
        np.bitwise_or.at(self.seen, passed >> 3, (1 << (passed & 7)).astype(np.uint8))
        if good == len(indices):
            return None
        return Mismatch(self.path, self.ids_path, int(indices[good]),
                        _hex(expected[good * 8:good * 8 + 8]), _hex(digests[good * 8:good * 8 + 8]))

def await_verdict(path: str, ids_path: str, seq_len: int, shard: int | None,
                  mismatch: Mismatch, stall_timeout: float, poll: float = 0.1) -> None:
    """After a mismatch in a shard some other process verifies: wait for its verdict.

    Returns once the shard carries a verified marker again (it was downloaded anew and
    passed: the caller maps it again), raises its ShardCorruptError if it stayed wrong, and
    raises one for ``mismatch`` if nothing about the shard changes for ``stall_timeout`` s.
    """
    import time
    last, seen = time.monotonic(), None
    while True:
        verdict = corrupt_verdict(path)
        if verdict is not None:
            raise verdict
        if is_verified(path, ids_path, seq_len):
            return
        try:
            now_seen = os.stat(path).st_ino, os.stat(path).st_mtime_ns
        except FileNotFoundError:
            now_seen = None
        if now_seen != seen:
            last, seen = time.monotonic(), now_seen
        elif time.monotonic() - last > stall_timeout:
            raise ShardCorruptError(shard, mismatch, False)
        time.sleep(poll)
