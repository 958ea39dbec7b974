"""Removing the per-epoch files an epoch order leaves in the node's shared directory.

Each computed order (``order_store.EpochIds``) has a progress file and a compute lock there;
its computation removes its own once the order is final, and ``sweep_other_epochs`` removes
those of other orders (left by a process that died computing them), so the directory stays
the same size however many epochs a job runs.
"""

from __future__ import annotations

import glob
import os

from streaming.coord import SharedDir
from streaming.fileio import remove_quietly

__all__ = ['sweep_other_epochs']


def sweep_other_epochs(shared: SharedDir, name: str) -> None:
    """Remove other orders' progress and compute-lock files, unless they are being computed.

    Called under the node's order lock, which every computation starts under, so no computation
    can start meanwhile; one still running holds its compute lock and keeps its files. Readers
    that mapped a removed progress file keep a valid map (and see the marker changed).
    """
    for lock_path in glob.glob(shared.file_path('compute-order-*.ids.lock')):
        other = os.path.basename(lock_path)[len('compute-'):-len('.lock')]
        if other != name:
            _remove_if_idle(shared, other)
    for progress in glob.glob(shared.file_path('order-*.ids.progress-*')):
        other = os.path.basename(progress).split('.progress-')[0]
        if other != name and not os.path.exists(shared.file_path(f'compute-{other}.lock')):
            remove_quietly(progress)


def _remove_if_idle(shared: SharedDir, name: str) -> None:
    """Remove order ``name``'s progress files and compute lock if nobody computes it."""
    lock = shared.lock(f'compute-{name}')
    if not lock.acquire(blocking=False):
        return
    try:
        for progress in glob.glob(shared.file_path(f'{name}.progress-*')):
            remove_quietly(progress)
        remove_quietly(lock.path)  # While held: a waiter on it then locks a new file instead.
    finally:
        lock.release()
