"""Find the reference's python and run batches of operations with it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Iterator

import pytest

from tests.oracle.deaths import failure_log, with_fault_handler
from tests.oracle.private_shm import in_private_shm
from tests.oracle.zygote import zygote

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


@contextlib.contextmanager
def reference_lock() -> Iterator[None]:
    """One reference process at a time on this machine.

    The reference names its shared memory by a small per-machine counter, so two of its
    processes building datasets at once (pytest-xdist workers) can collide on a name such as
    ``/000200_locals`` and fail: a known defect of the reference that this library fixes. The
    oracle tests take this lock around every reference run so that they never see it. (Each
    test process's reference processes also have a private ``/dev/shm`` where one can be made,
    ``tests/oracle/private_shm.py``; the lock still serves machines without one, and the file
    locks in the temp dir that the reference also names by prefix.)
    """
    path = os.path.join(tempfile.gettempdir(), 'shardflow-reference-oracle.lock')
    with open(path, 'a') as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def reference_env() -> dict[str, str]:
    """This process's environment, for the reference: without any PYTHONPATH that could let our
    package shadow the reference's, and reading the bytecode its env was built with (a
    PYTHONPYCACHEPREFIX, which scripts/test.sh sets for our interpreters, would hide it: a cold
    prefix cost ~6 s more CPU per reference import) and writing none."""
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'PYTHONHOME', 'PYTHONPYCACHEPREFIX')}
    env['PYTHONDONTWRITEBYTECODE'] = '1'
    return with_fault_handler(env)


def reference_zygote():  # -> tests.oracle.zygote.Zygote
    """This test process's reference zygote: torch and the reference imported once, one forked
    child per command (see ``tests/oracle/zygote.py``), all in this process's private
    ``/dev/shm`` (``tests/oracle/private_shm.py``)."""
    return zygote(reference_python(), ['ref_driver', 'torch.distributed'], reference_env(),
                  wrap=in_private_shm)


def reference_run(argv: list[str], *, input: str | None = None, cwd: str = '/',
                  timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``<reference python> *argv`` as ``subprocess.run(..., capture_output=True, text=True)``
    would run it, in a child of the reference zygote, under the reference lock."""
    server = reference_zygote()  # started (imports done) before taking the lock
    with reference_lock():
        return server.run(argv, input=input, env=reference_env(), cwd=cwd, timeout=timeout)


def run_reference(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run ``ops`` in one reference process; returns one outcome per op."""
    proc = reference_run([DRIVER], input=json.dumps(ops))
    if proc.returncode != 0:
        raise RuntimeError(f'reference driver failed:\n{failure_log(proc.stderr)}')
    return json.loads(proc.stdout)


def main() -> None:  # pragma: no cover - manual use: python -m tests.oracle.runner < ops.json
    print(json.dumps(run_reference(json.load(sys.stdin))))
