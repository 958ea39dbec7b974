"""Helpers for the example tests: run a script of examples/ as a user would, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_example(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python examples/NAME ARGS`` with this tree first on the path; fails with its output."""
    env = {**os.environ, 'PYTHONPATH': str(REPO), 'PYTHONWARNINGS': 'ignore::UserWarning'}
    proc = subprocess.run([sys.executable, str(REPO / 'examples' / name), *args],
                          capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, f'{name} failed:\n{proc.stdout}\n{proc.stderr}'
    return proc
