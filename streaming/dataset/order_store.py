"""The epoch's sample ids: computed once per node, kept on disk, read per worker in slices.

With ``random`` batching and one of the reference's shuffles, the epoch order is the sample id
at each position of the epoch (``order.exact.epoch_sample_ids``: the expensive part) dealt to
devices by index arithmetic (``order.dealing``: cheap, per slot). The first process of the node
to need the ids computes them and publishes them as a checked file (``checked_file``); every
process then memory-maps that file and each worker computes only its own slots, a chunk at a
time (``WorkerOrder``), so nothing epoch-sized is built per process.

The file is also a cache: it is kept in the first stream's local directory
(``.shardflow/order-<key>.ids``), keyed by every input of the ids (shard sizes, the streams'
draws, epoch, seed, shuffle settings, canonical nodes, sampling), and reused when a run restarts
or resumes the same epoch; not the topology, nor the resume point, which only change the
dealing. A file whose key, length or checksum does not match is ignored and rewritten. It is
kept in the node's shared directory instead (gone with the job) when the local directory cannot
be written, when ``cache_limit`` is set (the file would take disk the limit does not count), or
when ``STREAMING_SETUP_CACHE=0``.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Callable

import numpy as np

from streaming.coord import SharedDir
from streaming.dataset.checked_file import HEADER_BYTES, digest, verify_checked, write_checked
from streaming.fileio import atomic_write, remove_quietly
from streaming.order.dealing import Dealing
from streaming.order.exact import dealing_of, take_ids
from streaming.order.shuffle import default_shuffle_block_size
from streaming.order.spans import EXACT_SHUFFLE_ALGOS

__all__ = ['CACHE_SUBDIR', 'WorkerOrder', 'exact_dealing', 'ids_inputs',
           'is_exact_random', 'order_cache_enabled', 'shared_epoch_ids']

CACHE_SUBDIR = '.shardflow'
_KEEP = 3  # Cached epoch orders kept per directory (the newest).
_VERSION = 1  # Bump when the ids an input gives change.


_IDS_INPUTS = ('shard_sizes', 'shard_streams', 'stream_choose', 'epoch', 'seed', 'shuffle',
               'shuffle_algo', 'num_canonical_nodes', 'sampling_method',
               'sampling_granularity')


def is_exact_random(params: dict[str, Any]) -> bool:
    """Whether ``get_epoch_order(**params)`` is the reference's exact ``random`` order."""
    return params['batching_method'] == 'random' and params['shuffle_algo'] in EXACT_SHUFFLE_ALGOS


def ids_inputs(params: dict[str, Any]) -> dict[str, Any]:
    """The arguments of ``epoch_sample_ids`` among ``get_epoch_order``'s ``params``."""
    inputs = {name: params[name] for name in _IDS_INPUTS}
    inputs['block_size'] = params['shuffle_block_size'] or \
        default_shuffle_block_size(params['num_canonical_nodes'])
    return inputs


def exact_dealing(params: dict[str, Any], num_samples: int) -> Dealing:
    """Which epoch position each slot reads, for ``get_epoch_order``'s ``params``."""
    return dealing_of(num_samples,
                      partition_algo=params['partition_algo'],
                      num_canonical_nodes=params['num_canonical_nodes'],
                      num_physical_nodes=params['num_physical_nodes'],
                      ranks_per_node=params['ranks_per_node'],
                      workers_per_rank=params['workers_per_rank'],
                      batch_size=params['batch_size'],
                      sample_in_epoch=params['sample_in_epoch'],
                      initial_physical_nodes=params['initial_physical_nodes'])


def order_cache_enabled() -> bool:
    """Whether set-up caches may be written to local directories (``STREAMING_SETUP_CACHE``)."""
    return os.environ.get('STREAMING_SETUP_CACHE', '1') != '0'


def _kind(dtype: np.dtype) -> str:
    return f'ids{np.dtype(dtype).str}'


def _map(path: str, length: int, kind: str) -> np.ndarray:
    dtype = np.dtype(kind[3:])
    return np.memmap(path, dtype, 'r', offset=HEADER_BYTES, shape=(length // dtype.itemsize,))


def _write_cache(directory: str, name: str, key: bytes, ids: np.ndarray) -> str | None:
    """Write ``ids`` into ``directory``; its path, or None if the directory is not writable."""
    try:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name)
        write_checked(path, key, _kind(ids.dtype), ids)
    except OSError:
        return None
    old = sorted(glob.glob(os.path.join(directory, 'order-*.ids')), key=_mtime, reverse=True)
    for stale in old[_KEEP:]:
        if stale != path:
            remove_quietly(stale)  # Maps of it elsewhere stay valid after the unlink.
    return path


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def shared_epoch_ids(shared: SharedDir, cache_dir: str | None, inputs: dict[str, Any],
                     compute: Callable[[], np.ndarray]) -> np.ndarray:
    """The epoch's sample ids (read-only, memory-mapped), computed at most once per node.

    ``inputs`` are everything ``compute`` depends on; ``cache_dir`` is where to keep the ids
    across runs (None: only in the node's shared directory).
    """
    key = digest({**inputs, 'version': _VERSION})
    name = f'order-{key.hex()[:32]}.ids'
    marker = shared.file_path(f'{name}.where')  # Path of the verified file, once there is one.
    published = _published(marker, key)
    if published is None:
        with shared.lock('order'):
            published = _published(marker, key)
            if published is None:
                published = _publish(shared, cache_dir, name, key, compute)
                atomic_write(marker, '\n'.join(str(part) for part in published))
                for old in glob.glob(shared.file_path('order-*.where')):
                    if old != marker:
                        remove_quietly(old)
    return _map(*published)


def _published(marker: str, key: bytes) -> tuple[str, int, str] | None:
    try:
        with open(marker) as file:
            path, length, kind = file.read().split('\n')
    except (OSError, ValueError):
        return None
    # The file may have been replaced since (by an identical one) or removed: check it exists.
    return (path, int(length), kind) if os.path.exists(path) else None


def _publish(shared: SharedDir, cache_dir: str | None, name: str, key: bytes,
             compute: Callable[[], np.ndarray]) -> tuple[str, int, str]:
    """Find a valid cached file for ``key`` or compute and write one; (path, bytes, kind)."""
    if cache_dir is not None:
        path = os.path.join(cache_dir, name)
        for kind in (_kind(np.int32), _kind(np.int64)):
            length = verify_checked(path, key, kind)
            if length is not None:
                os.utime(path)  # Most recently used: kept longest.
                return path, length, kind
    ids = compute()
    kind = _kind(ids.dtype)
    path = _write_cache(cache_dir, name, key, ids) if cache_dir is not None else None
    if path is None:
        path = shared.file_path(name)
        write_checked(path, key, kind, ids)
        for old in glob.glob(shared.file_path('order-*.ids')):
            if old != path:
                remove_quietly(old)
    return path, ids.nbytes, kind


class WorkerOrder:
    """One worker's sample ids for the epoch (``-1``: none), produced a slice at a time.

    Behaves as the 1-D array ``order[node, rank, worker].reshape(-1)`` for ``len`` and slices.
    """

    def __init__(self, ids: np.ndarray, dealing: Dealing, node: int, rank: int,
                 worker: int) -> None:
        self.ids, self.dealing = ids, dealing
        self.node, self.rank, self.worker = node, rank, worker

    def __len__(self) -> int:
        return self.dealing.slots_per_worker

    def __getitem__(self, item: slice) -> np.ndarray:
        if not isinstance(item, slice):
            raise TypeError('WorkerOrder supports slices only')
        start, stop, step = item.indices(len(self))
        if step != 1:
            raise TypeError('WorkerOrder supports slices with step 1 only')
        positions = self.dealing.positions(self.node, self.rank, self.worker, start, stop)
        return take_ids(self.ids, positions)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)
