"""The reference's ``streaming.base.shared.barrier``: a barrier for the processes of one node."""

from __future__ import annotations

import os
import time

import numpy as np

from streaming.base.constant import TICK
from streaming.base.shared.array import SharedArray
from streaming.coord import FileLock

__all__ = ['SharedArray', 'SharedBarrier', 'TICK', 'TIMEOUT']

TIMEOUT = 60


class SharedBarrier:
    """Processes calling ``barrier(num_procs)`` wait until ``num_procs`` of them have called it.

    The counters live in the shared block ``shm_name``; ``filelock_path`` serializes updates.
    Reusable: the next round starts once every process has left the previous one.
    """

    def __init__(self, filelock_path: str, shm_name: str) -> None:
        self.filelock_path = filelock_path
        self.shm_name = shm_name
        os.makedirs(os.path.dirname(filelock_path) or '.', exist_ok=True)
        self.lock = FileLock(filelock_path)
        # (number entered, number exited, flag: 1 = open for entering)
        self._arr = SharedArray(3, np.int32, shm_name)
        with self.lock:
            if self._arr[2] == 0 and self._arr[0] == 0 and self._arr[1] == 0:
                self._arr[2] = 1

    def __call__(self, num_procs: int) -> None:
        """Wait here until ``num_procs`` processes have arrived."""
        deadline = time.monotonic() + TIMEOUT
        while True:  # Wait for the previous round to drain.
            with self.lock:
                if self._arr[2] == 1:
                    self._arr[0] += 1
                    if self._arr[0] == num_procs:
                        self._arr[2] = 0  # Everyone is here: release.
                    break
            self._tick(deadline)
        while True:
            with self.lock:
                if self._arr[2] == 0:
                    self._arr[1] += 1
                    if self._arr[1] == num_procs:  # Last one out reopens the barrier.
                        self._arr[0] = self._arr[1] = 0
                        self._arr[2] = 1
                    return
            self._tick(deadline)

    def _tick(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise TimeoutError(f'SharedBarrier {self.shm_name}: processes did not all arrive '
                               f'within {TIMEOUT} s.')
        time.sleep(TICK)
