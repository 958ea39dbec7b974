"""``--competing-load N``: N busy processes beside the job, as the training process, augmentation
or tokenization would be on a real node.

Each is a pure-Python loop that spins until stopped; they start before the runs and stop after
them. On this 2-core machine two of them leave the job about a third of the CPU it had, which is
where a loader that needs less CPU per gigabyte keeps more of the link.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

SPIN = 'while True:\n    pass\n'


@contextlib.contextmanager
def competing_load(processes: int) -> Iterator[list[int]]:
    """Run ``processes`` busy loops for the duration of the ``with`` block; yields their pids."""
    started = [subprocess.Popen([sys.executable, '-c', SPIN]) for _ in range(processes)]
    try:
        yield [process.pid for process in started]
    finally:
        for process in started:
            process.kill()
        for process in started:
            process.wait()
