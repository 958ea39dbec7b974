"""Run a snippet of Python in the reference's env (an oracle, driven as a subprocess).

The snippet sees the reference's ``streaming`` (with the torchvision stand-in of
``tests/oracle/ref_driver.py``) and must ``emit(value)`` JSON-able results, which the call returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from typing import Any

from tests.oracle.runner import reference_lock, reference_python

ORACLE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'oracle')

_PRELUDE = f"""
import json, sys
sys.path.insert(0, {ORACLE_DIR!r})
import ref_driver  # noqa: installs the torchvision stand-in, imports the reference
_out = []
def emit(value):
    _out.append(value)
"""
_EPILOGUE = "\nprint('\\n@@ORACLE@@' + json.dumps(_out))\n"


def run_reference_code(code: str, cwd: str | None = None, timeout: float = 300) -> list[Any]:
    """Run ``code`` in the reference env; returns the list of values it emitted."""
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
    script = _PRELUDE + textwrap.dedent(code) + _EPILOGUE
    with reference_lock():
        proc = subprocess.run([reference_python(), '-c', script], capture_output=True,
                              text=True, timeout=timeout, env=env, cwd=cwd or '/')
    if proc.returncode != 0:
        raise RuntimeError(f'reference snippet failed:\n{proc.stderr[-4000:]}')
    return json.loads(proc.stdout.rsplit('@@ORACLE@@', 1)[1])
