"""The epoch's sample ids: computed once per node, kept on disk, read per worker in slices.

With ``random`` batching, the epoch order is the sample id at each position of the epoch
(``EpochPlan.id_steps``: the expensive part) dealt to devices by index arithmetic
(``EpochPlan.worker_share``: cheap, per slot); see ``streaming.order.plan``. This module is
where the node keeps those ids. The first process of the node to need them computes them and
publishes them as a checked file (``checked_file``); every process then memory-maps that file
and each worker computes only its own slots, a chunk at a time, so nothing epoch-sized is built
per process.

The file is published as it is computed (``EpochIds``): the computation runs in a background
thread of the process that started it, which writes each part of the ids as it becomes final
(``EpochPlan.id_steps``) and records what is final in a small shared file (a head
``[0, h)`` and a tail ``[b, s)``: in a multi-node job each node computes its own canonical
rows first, from ``b``, see ``order.shuffles.py1e._py1e_rows``); a reader waits only for the
positions it reads. If the computing process ends first, the next reader that needs more
computes the ids again; a failure is reported to every reader. Once all are final, the
progress file and the compute lock go (other epochs' idle ones are swept when an order starts):
the node's shared directory does not grow with the epochs.

The file is also a cache, ``order-<key>.ids`` in the set-up cache directory of the first
stream's local directory (``cache_dirs.setup_cache_dir``: outside it, keyed by it), keyed by
every input of the ids (shard sizes, the streams' draws, epoch, seed, shuffle settings,
canonical nodes, sampling), and reused when a run restarts or resumes the same epoch; not the
topology, nor the resume point, which only change the dealing. A file whose key, length or
checksum does not match is ignored and rewritten. It is kept in the node's shared directory
instead (gone with the job) when that directory cannot be written, when ``cache_limit`` is set
(the file would take disk the limit does not count), or when ``STREAMING_SETUP_CACHE=0``.
"""

from __future__ import annotations

import atexit
import glob
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import xxhash

from streaming.coord import FileLock, SharedDir
from streaming.dataset.checked_file import (
    HEADER_BYTES,
    body_checksum,
    digest,
    pack_header,
    verify_checked,
)
from streaming.dataset.order_files import sweep_other_epochs
from streaming.fileio import TEMP_SUFFIX, atomic_write, create_temp, publish, remove_quietly
from streaming.order import FinalParts, final_ranges, newly_final, release

__all__ = ['EpochIds', 'order_cache_enabled', 'shared_epoch_ids', 'wait_for_background']

logger = logging.getLogger(__name__)

_KEEP = 3  # Cached epoch orders kept per directory (the newest).
_VERSION = 1  # Bump when the ids an input gives change.
_STALE_TEMP_SECONDS = 3600  # A partial file this old was left by a process that died.


def order_cache_enabled() -> bool:
    """Whether set-up caches may be written to local directories (``STREAMING_SETUP_CACHE``)."""
    return os.environ.get('STREAMING_SETUP_CACHE', '1') != '0'


def _kind(dtype: np.dtype) -> str:
    return f'ids{np.dtype(dtype).str}'


@dataclass(frozen=True)
class _State:
    """Where the ids are (``path``), their bytes and dtype, and whether all are final."""

    path: str
    length: int
    kind: str
    progress: str  # While not done: the shared file counting the final ids.

    @property
    def done(self) -> bool:
        return not self.progress

    def encode(self) -> str:
        return '\n'.join([self.path, str(self.length), self.kind, self.progress])

    @classmethod
    def read(cls, marker: str) -> _State | None:
        try:
            with open(marker) as file:
                path, length, kind, progress = file.read().split('\n')
        except (OSError, ValueError):
            return None
        # The file may have been replaced since (by an identical one) or removed.
        return cls(path, int(length), kind, progress) if os.path.exists(path) else None


# Computation threads of this process not yet seen ended: a thread never removes itself (it would
# still be running when it did), ``wait_for_background`` and the next start drop the ended ones.
_RUNNING: set[threading.Thread] = set()
_PARTIAL: set[str] = set()  # Their partial files, removed if the process exits first.


@atexit.register
def _remove_partial_files() -> None:
    for path in list(_PARTIAL):
        remove_quietly(path)  # The daemon thread may still write to it: harmless, unlinked.


def wait_for_background(timeout: float | None = None) -> None:
    """Wait until this process's epoch-order computations have ended (their ids are cached).

    Returns once every computation thread started so far has ended (joined, so none is still
    finishing), or after ``timeout`` seconds in all.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in list(_RUNNING):
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if not thread.is_alive():
            _RUNNING.discard(thread)


class EpochIds:
    """The node's sample ids of one epoch, memory-mapped; the computation may still be going on.

    ``wait(n)`` returns once the first ``n`` ids are final. If the process computing them ends
    before that, this process computes them again (the same ids: the computation is pure).
    """

    def __init__(self, shared: SharedDir, cache_dir: str | None, name: str, key: bytes,
                 steps: Callable[[], Iterator[np.ndarray | int]]) -> None:
        self.shared, self.cache_dir, self.name, self.key = shared, cache_dir, name, key
        self._steps = steps
        self._marker = shared.file_path(f'{name}.where')
        state = _State.read(self._marker)
        if state is None or not state.done:
            state = self._publish(stale_only=state is not None)
        self._use(state)

    def __len__(self) -> int:
        return len(self.ids)

    def _use(self, state: _State) -> None:
        """Map the files ``state`` names (renamed meanwhile when done: then its new state)."""
        for _ in range(100):
            dtype = np.dtype(state.kind[3:])
            try:
                ids = np.memmap(state.path, dtype, 'r', offset=HEADER_BYTES,
                                shape=(state.length // dtype.itemsize,))
                progress = None if state.done else np.memmap(state.progress, np.int64, 'r',
                                                             shape=(3,))
            except FileNotFoundError:
                # Renamed as its computation finished, or dropped because it failed. Its
                # computation holds its lock until it has said which (``_report``): wait for
                # that, then report a failure (a new computation clears the record first)
                # rather than start the same failing computation again.
                _compute_lock(self.shared, self.name).wait_free()
                if os.path.exists(_error_path(self.shared, self.name)):
                    raise _failure(self.shared, self.name) from None
                state = _State.read(self._marker) or self._publish(stale_only=False)
                continue
            self._state, self.ids, self._progress = state, ids, progress
            # What is final, as ``(head, tail_begin, tail_stop)`` (see ``spans.FinalParts``).
            self._final = (len(ids), 0, 0) if state.done else (0, 0, 0)
            return
        raise RuntimeError(f'The epoch order files named by {self._marker} keep vanishing.')

    def _publish(self, stale_only: bool) -> _State:
        """Under the node's order lock: the current state, or a computation started anew."""
        with self.shared.lock('order'):
            state = _State.read(self._marker)
            if state is None and os.path.exists(self._marker):
                # Its computation renamed (or dropped) the file the marker names and is about
                # to rewrite the marker: wait for that rather than compute the ids again. Read
                # the marker again even if the computation has just ended: it writes its final
                # marker before it removes its lock file, so asking first left a window in
                # which the asker found neither and started a second computation.
                _compute_lock(self.shared, self.name).wait_free()
                state = _State.read(self._marker)
            if state is not None and (state.done or (stale_only and self._computing())):
                return state
            if state is None or stale_only:
                if state is not None:  # Partial, and nobody computes it any more.
                    remove_quietly(state.path)
                state = _start(self.shared, self.cache_dir, self.name, self.key, self._steps)
                for old in glob.glob(self.shared.file_path('order-*.where')):
                    if old != self._marker:
                        remove_quietly(old)
                sweep_other_epochs(self.shared, self.name)
            return state

    def _computing(self) -> bool:
        return _compute_lock(self.shared, self.name).held()

    def wait(self, count: int) -> None:
        """Return once the first ``count`` ids are final."""
        self._wait_until(lambda head, begin, stop: head >= count)

    def wait_positions(self, positions: np.ndarray) -> None:
        """Return once the ids at ``positions`` are final (the node's own rows come first)."""
        if not len(positions):
            return
        low, high = int(positions.min()), int(positions.max())

        def ready(head: int, begin: int, stop: int) -> bool:
            if high < head or (begin <= low and high < stop):
                return True
            return bool(((positions < head) | ((positions >= begin) & (positions < stop))).all())

        self._wait_until(ready)

    def _wait_until(self, ready: Callable[[int, int, int], bool]) -> None:
        delay, waited = 0.0005, 0.0
        while not ready(*self._final):
            progress = self._progress
            assert progress is not None
            head = int(progress[0])  # The head first: the tail is reset only once it is all.
            if head < 0:
                raise _failure(self.shared, self.name)
            self._final = (head, int(progress[1]), int(progress[2]))
            if ready(*self._final):
                return
            current = _State.read(self._marker)
            if current is not None and current != self._state:  # Finished, or started over.
                self._use(current)
                continue
            if not self._computing():
                # Whoever computed stopped (its process ended) first: compute them here.
                self._final = (int(progress[0]), int(progress[1]), int(progress[2]))
                if not ready(*self._final):
                    self._use(self._publish(stale_only=True))
                continue
            time.sleep(delay)
            waited += delay
            # Fine polls for the first second (a node's own first window comes within tens of
            # ms, even after skipping the rows before it), coarser ones for a whole order.
            delay = min(2 * delay, 0.005 if waited < 1 else 0.02)


def _compute_lock(shared: SharedDir, name: str) -> FileLock:
    """The lock a computation of the order ``name`` holds while it writes the ids."""
    return shared.lock(f'compute-{name}')


def _error_path(shared: SharedDir, name: str) -> str:
    """Where a failed computation of the order ``name`` records its error for the node."""
    return shared.file_path(f'{name}.error')


def _failure(shared: SharedDir, name: str) -> RuntimeError:
    """The error a reader raises when the computation it waits for failed."""
    try:
        with open(_error_path(shared, name)) as file:
            details = file.read()
    except OSError:
        details = 'no details'
    return RuntimeError(f'Computing the epoch order {name} failed: {details}')


def _temp_in(directory: str, name: str) -> tuple[int, str] | None:
    try:
        os.makedirs(directory, exist_ok=True)
        for stale in glob.glob(os.path.join(directory, f'.order-*{TEMP_SUFFIX}')):
            if time.time() - _mtime(stale) > _STALE_TEMP_SECONDS:  # Left by a killed process.
                remove_quietly(stale)
        return create_temp(os.path.join(directory, name))
    except OSError:
        return None


def _start(shared: SharedDir, cache_dir: str | None, name: str, key: bytes,
           steps_of: Callable[[], Iterator[np.ndarray | int]]) -> _State:
    """A valid cached file for ``key``, or a computation started in a background thread."""
    marker = shared.file_path(f'{name}.where')
    remove_quietly(_error_path(shared, name))  # A failure of an earlier computation.
    if cache_dir is not None:
        path = os.path.join(cache_dir, name)
        for kind in (_kind(np.int32), _kind(np.int64)):
            length = verify_checked(path, key, kind)
            if length is not None:
                os.utime(path)  # Most recently used: kept longest.
                state = _State(path, length, kind, '')
                atomic_write(marker, state.encode())
                return state
    steps = steps_of()
    ids: np.ndarray = next(steps)  # type: ignore[assignment]
    directory, made = cache_dir, None
    if directory is not None:
        made = _temp_in(directory, name)
    if made is None:
        directory, made = shared.path, _temp_in(shared.path, name)
    assert made is not None and directory is not None
    fd, temp = made
    os.ftruncate(fd, HEADER_BYTES + ids.nbytes)
    for old in glob.glob(shared.file_path(f'{name}.progress-*')):
        remove_quietly(old)  # Maps of them stay valid: their waiters notice the new marker.
    progress_path = shared.file_path(f'{name}.progress-{os.path.basename(temp)[-16:]}')
    atomic_write(progress_path, np.zeros(3, np.int64).tobytes())
    state = _State(temp, ids.nbytes, _kind(ids.dtype), progress_path)
    _PARTIAL.add(temp)
    started = threading.Event()
    job = _Computation(shared, name, key, ids, steps, fd, temp, directory, state, started)
    thread = threading.Thread(target=job.run, name='streaming-epoch-order', daemon=True)
    _RUNNING.difference_update([ended for ended in list(_RUNNING) if not ended.is_alive()])
    _RUNNING.add(thread)
    thread.start()
    started.wait()  # It holds the compute lock before anyone can see the marker.
    atomic_write(marker, state.encode())
    return state


class _Computation:
    """Computes the ids, writing each part to the file as it becomes final."""

    def __init__(self, shared: SharedDir, name: str, key: bytes, ids: np.ndarray,
                 steps: Iterator[np.ndarray | int], fd: int, temp: str, directory: str,
                 state: _State, started: threading.Event) -> None:
        self.shared, self.name, self.key, self.ids, self.steps = shared, name, key, ids, steps
        self.fd, self.temp, self.directory, self.state = fd, temp, directory, state
        self.started = started
        self._progress: np.ndarray | None = None

    def run(self) -> None:
        lock, held = _compute_lock(self.shared, self.name), False
        try:
            try:
                lock.acquire()
                held = True
            finally:
                self.started.set()  # It holds the compute lock (or failed) before the marker.
            self._compute(lock)
        except BaseException as error:  # Waiters elsewhere are told; the next ask recomputes.
            # Logged once here; nothing is raised: a waiter raises a clear error naming the
            # cause, and an exception escaping a thread would only print a second traceback.
            self._report(error)
        finally:
            _PARTIAL.discard(self.temp)
            if held:
                lock.release()

    def _compute(self, lock: FileLock) -> None:
        progress = np.memmap(self.state.progress, np.int64, 'r+', shape=(3,))
        self._progress = progress
        hasher, hashed, itemsize = xxhash.xxh3_64(), 0, self.ids.itemsize
        done: FinalParts = 0
        for final in self.steps:
            for begin, stop in newly_final(done, final):  # type: ignore[arg-type]
                part = memoryview(self.ids[begin:stop]).cast('B')
                _pwrite_all(self.fd, part, HEADER_BYTES + begin * itemsize)
                if hashed == begin:  # In order so far: hashed as written.
                    hasher.update(part)
                    hashed = stop
                del part
                release(self.ids, begin, stop)  # Readers map the file: never read again.
            done = final  # type: ignore[assignment]
            head, begin, stop = _parts(done)
            progress[0] = head  # Before the tail: a reader may see less, never more.
            progress[1], progress[2] = begin, stop
        checksum = hasher.intdigest() if hashed * itemsize == self.state.length else \
            _read_back_checksum(self.temp, self.state.length)
        _pwrite_all(self.fd, memoryview(pack_header(self.key, self.state.kind,
                                                    self.state.length, checksum)), 0)
        self._close_file()
        path = os.path.join(self.directory, self.name)
        publish(self.temp, path)
        atomic_write(self.shared.file_path(f'{self.name}.where'),
                     _State(path, self.state.length, self.state.kind, '').encode())
        # Done: readers now follow the marker; maps of the progress file stay valid.
        remove_quietly(self.state.progress)
        # While held: a waiter that opened it meanwhile finds it gone and locks a new file
        # (``FileLock.acquire``), so it never computes under a lock nobody else can see.
        remove_quietly(lock.path)
        _prune(self.directory, path)

    def _report(self, error: BaseException) -> None:
        """Record ``error`` for the waiters and log it once; raise nothing (a thread's end)."""
        try:
            told = self._fail(error)
        except OSError as unrecorded:  # Waiters then find nobody computing: they recompute.
            logger.warning('Could not record the failure of epoch order %s for its readers: %s',
                           self.name, unrecorded)
            told = True
        if told:
            logger.warning('Computing the epoch order %s failed (%s: %s); its readers raise this '
                           'error and the next one to ask computes it again.',
                           self.name, type(error).__name__, error,
                           exc_info=(type(error), error, error.__traceback__))
        # Else the dataset's shared directory is gone (the dataset was dropped, or its process
        # is exiting): nobody is left to wait for these ids, and nowhere to say so. Quietly.

    def _fail(self, error: BaseException) -> bool:
        """Tell the node's waiters (if its shared directory is still there); drop the file.

        False when the shared directory is gone: there is nobody left to tell.
        """
        remove_quietly(self.temp)
        self._close_file()
        try:
            atomic_write(_error_path(self.shared, self.name), f'{type(error).__name__}: {error}')
        except FileNotFoundError:
            if os.path.isdir(self.shared.path):
                raise
            return False
        if self._progress is not None:
            self._progress[0] = -1
        remove_quietly(self.shared.file_path(f'{self.name}.where'))
        return True

    def _close_file(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def _parts(final: FinalParts) -> tuple[int, int, int]:
    ranges = final_ranges(final)
    head = ranges[0][1] if ranges and ranges[0][0] == 0 else 0
    tail = [r for r in ranges if r[0] > 0]
    return (head, *tail[0]) if tail else (head, 0, 0)


def _read_back_checksum(path: str, length: int) -> int:
    """The ids' checksum, read back from the file (they were written out of order)."""
    with open(path, 'rb') as file:
        checksum = body_checksum(file, length)
    if checksum is None:
        raise OSError(f'{path} holds fewer than the {length} bytes of ids written to it')
    return checksum


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


def _prune(directory: str, keep: str) -> None:
    """Keep the newest ``_KEEP`` orders of ``directory`` (maps of the others stay valid)."""
    old = sorted(glob.glob(os.path.join(directory, 'order-*.ids')), key=_mtime, reverse=True)
    for stale in old[_KEEP:]:
        if stale != keep:
            remove_quietly(stale)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def shared_epoch_ids(shared: SharedDir, cache_dir: str | None, inputs: dict[str, Any],
                     steps: Callable[[], Iterator[np.ndarray | int]]) -> EpochIds:
    """The epoch's sample ids, computed at most once per node (see ``EpochIds``).

    ``inputs`` are everything ``steps`` (``EpochPlan.id_steps``) depends on (``id_inputs``);
    ``cache_dir`` is where to keep the ids across runs (None: only in the node's shared
    directory, for this job).
    """
    key = digest({**inputs, 'version': _VERSION})
    return EpochIds(shared, cache_dir, f'order-{key.hex()[:32]}.ids', key, steps)
