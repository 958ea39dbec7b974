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
    outputs, status, wait = [], [], timeout
    try:
        for proc in procs:
            try:
                out, _ = proc.communicate(timeout=wait)
                status.append(f'exited with {proc.returncode}')
            except subprocess.TimeoutExpired:  # What it printed tells where it was.
                wait = 5  # The rest are given only a moment more.
                proc.kill()
                out = _output_after_kill(proc)
                status.append(f'was still running after {timeout:g}s')
            outputs.append(out.decode(errors='replace'))
    finally:
        for proc in procs:
            proc.kill()
    failed = [f'rank {rank} {why}:\n{out[-3000:]}'
              for rank, (proc, why, out) in enumerate(zip(procs, status, outputs))
              if proc.returncode != 0]
    if failed:  # All of them: the first to fail may not be the lowest rank.
        raise AssertionError('\n'.join(failed))
    results = []
    for rank in range(len(procs)):
        with open(os.path.join(out_dir, f'rank{rank}.json')) as file:
            results.append(json.load(file))
    return results


def _output_after_kill(proc: subprocess.Popen) -> bytes:
    """What a killed rank printed (its DataLoader workers may hold the pipe a while longer)."""
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        return b'(its output was still held open by its children)'
    return out or b''
