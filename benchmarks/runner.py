"""Running case workers: one fresh process per (case, implementation, repeat), alternating.

A worker is started by path with the implementation's python, in its own session (so a timeout
can stop its DataLoader workers too), with the scratch directory as working directory; the
result is the last ``BENCH_RESULT`` line it prints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.cases.harness import RESULT_PREFIX
from benchmarks.config import OURS, Case, Context

CASES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cases')


def _worker_env(impl: str) -> dict[str, str]:
    """The environment of a case worker: no inherited PYTHONPATH (see the module docstring),
    bytecode cached.

    ``STREAMING_BENCH_SRC=/path/to/checkout`` puts that checkout first on the path of OUR
    implementation's workers only, to benchmark a branch or worktree instead of the editable
    install; the reference and LitData workers never see it.
    """
    # PYTHONDONTWRITEBYTECODE is dropped too: an installed package runs from cached bytecode,
    # while a checkout without it compiles every module it imports in every run (inside the
    # clock for the modules a loader imports lazily).
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'PYTHONHOME', 'PYTHONDONTWRITEBYTECODE')}
    source = os.environ.get('STREAMING_BENCH_SRC')
    if source and impl == OURS:
        env['PYTHONPATH'] = os.path.abspath(source)
    env['LITDATA_DISABLE_VERSION_CHECK'] = '1'  # No PyPI call from LitData.
    env['PYTHONUNBUFFERED'] = '1'
    return env


def parse_result(stdout: str) -> dict[str, Any] | None:
    """The last result line a worker printed, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return None


def run_worker(python: str, script: str, impl: str, params: dict[str, Any], cwd: str,
               timeout: float) -> dict[str, Any]:
    """Run one worker to completion; always returns a result dict with a ``status``."""
    os.makedirs(cwd, exist_ok=True)
    command = [python, os.path.join(CASES_DIR, script), impl, json.dumps(params)]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=_worker_env(impl), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # The worker's own session only.
        stdout, stderr = process.communicate()
        return {'status': 'error', 'reason': f'timed out after {timeout:.0f} s',
                'wall_s': time.perf_counter() - start}
    result = parse_result(stdout)
    if result is None:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        result = {'status': 'error',
                  'reason': f'exit code {process.returncode}, no result: ' + ' | '.join(tail)}
    result['wall_s'] = time.perf_counter() - start
    return result


def run_case(case: Case, ctx: Context, python: dict[str, str], repeats: int, timeout: float,
             blocked: dict[str, str], progress: Callable[[str], None] | None = None
             ) -> dict[str, list[dict[str, Any]]]:
    """Run ``case`` ``repeats`` times per implementation, alternating A B C A B C ...

    ``blocked`` maps an implementation to why it cannot run this case (its dataset could not be
    prepared, say). An implementation that reports ``unsupported`` or ``error`` is not run again
    for this case: the first answer is the answer.
    """
    runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in case.impls}
    for impl, why in blocked.items():
        if impl in runs:
            runs[impl].append({'status': 'error', 'reason': why})
    for repeat in range(repeats):
        for impl in case.impls:
            done = runs[impl]
            if done and done[-1]['status'] != 'ok':
                continue
            result = run_worker(python[impl], case.script, impl, case.params(impl, ctx),
                                ctx.scratch, timeout)
            done.append(result)
            if progress:
                progress(_describe(case, impl, repeat, result))
    return runs


def _describe(case: Case, impl: str, repeat: int, result: dict[str, Any]) -> str:
    status = result['status']
    if status == 'ok':
        metric = case.metrics[0]
        value = result['metrics'].get(metric.key)
        detail = f'{metric.label} {value:,.4g} {metric.unit}' if value is not None else ''
    else:
        detail = result.get('reason', '')[:160]
    return (f'{case.id:34} {impl:9} #{repeat + 1} {status:11} {detail} '
            f'({result.get("wall_s", 0):.1f} s)')


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
