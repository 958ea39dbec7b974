"""Run BERT's ``create_pretraining_data.py`` on slices of the input shards, one per CPU.

The enwiki ``make_train_parallel`` scripts share this. The BERT script itself is not part of
this library (it needs TensorFlow and absl): like the reference, the launchers run the
``create_pretraining_data.py`` found in the current directory. Unlike it, they check that the
script is there, pass arguments without a shell, wait for every slice and raise if one fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

__all__ = ['SCRIPT', 'run_slices', 'slice_bounds']

SCRIPT = 'create_pretraining_data.py'


def slice_bounds(num_items: int, num_slices: int) -> list[tuple[int, int]]:
    """``[begin, end)`` of each of ``num_slices`` near-equal contiguous slices of the items."""
    if num_slices < 1:
        raise ValueError(f'num_slices must be at least 1, got {num_slices}.')
    return [(k * num_items // num_slices, (k + 1) * num_items // num_slices)
            for k in range(num_slices)]


def run_slices(num_items: int, num_slices: int,
               arguments: Callable[[int, int, int], list[str]]) -> None:
    """Run ``SCRIPT`` once per slice with ``arguments(slice, begin, end)``, all at once."""
    script = os.path.abspath(SCRIPT)
    if not os.path.isfile(script):
        raise FileNotFoundError(
            f'{script} not found: run this from the directory holding BERT\'s '
            f'{SCRIPT} (it is not part of this library; it needs TensorFlow and absl).')
    procs = [subprocess.Popen([sys.executable, script, *arguments(k, begin, end)])
             for k, (begin, end) in enumerate(slice_bounds(num_items, num_slices))]
    failed = [k for k, proc in enumerate(procs) if proc.wait() != 0]
    if failed:
        raise RuntimeError(f'{SCRIPT} failed for slice(s) {failed} of {num_slices}.')
