"""Find the reference's python and run batches of operations with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ref_driver.py')
DEFAULT_ENV = os.path.expanduser('~/.cache/shardflow/reference-0.13.0/bin/python')


def reference_python() -> str:
    """The reference env's python; fails in CI (STREAMING_REQUIRE_REFERENCE=1), skips elsewhere."""
    python = os.environ.get('STREAMING_REFERENCE_PYTHON') or DEFAULT_ENV
    if os.path.exists(python):
        return python
    message = (f'reference env not found at {python}; build it with scripts/reference_env.sh '
               f'and set STREAMING_REFERENCE_PYTHON')
    if os.environ.get('STREAMING_REQUIRE_REFERENCE') == '1':
        pytest.fail(message)
    pytest.skip(message)


def run_reference(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run ``ops`` in one reference process; returns one outcome per op."""
    # Never let our package shadow the reference's: drop any PYTHONPATH pointing at this tree.
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
    proc = subprocess.run([reference_python(), DRIVER], input=json.dumps(ops), text=True,
                          capture_output=True, timeout=600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f'reference driver failed:\n{proc.stderr[-4000:]}')
    return json.loads(proc.stdout)


def main() -> None:  # pragma: no cover - manual use: python -m tests.oracle.runner < ops.json
    print(json.dumps(run_reference(json.load(sys.stdin))))
