"""Watching a directory's disk use, and reading what a rotation trained on."""

from __future__ import annotations

import contextlib
import os
import threading


class DiskMonitor:
    """Samples the total apparent size of every file in ``directory`` every ``interval`` s."""

    def __init__(self, directory: str, interval: float = 0.002) -> None:
        self.directory, self.interval = directory, interval
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def usage(self) -> int:
        total = 0
        with contextlib.suppress(FileNotFoundError), os.scandir(self.directory) as entries:
            for item in entries:
                with contextlib.suppress(FileNotFoundError):
                    total += item.stat().st_size
        return total

    def sample(self) -> int:
        """Take one sample now (also called by the test between steps); returns it."""
        usage = self.usage()
        self.peak = max(self.peak, usage)
        self.samples += 1
        return usage

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> DiskMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.usage())


def shard_files(directory: str) -> list[str]:
    """Published token shards in ``directory``."""
    return sorted(n for n in os.listdir(directory) if n.endswith('.npy') and
                  not n.startswith('.'))
