"""Waiting for a job's rank processes (one per rank, started as torchrun would)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

__all__ = ['finish_ranks']


def finish_ranks(procs: list[subprocess.Popen], out_dir: str, timeout: float) -> list[Any]:
    """Wait for every rank; raise AssertionError with the output of those that failed, else
    return what each rank wrote to ``<out_dir>/rank<rank>.json``, in rank order."""
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            outputs.append(out.decode(errors='replace'))
    finally:
        for proc in procs:
            proc.kill()
    failed = [f'rank {rank} exited with {proc.returncode}:\n{out[-3000:]}'
              for rank, (proc, out) in enumerate(zip(procs, outputs)) if proc.returncode != 0]
    if failed:  # All of them: the first to fail may not be the lowest rank.
        raise AssertionError('\n'.join(failed))
    results = []
    for rank in range(len(procs)):
        with open(os.path.join(out_dir, f'rank{rank}.json')) as file:
            results.append(json.load(file))
    return results
