"""The python of each implementation, building the virtual envs that are missing.

* ours: the python running the suite (this repo's dev venv, package installed editable).
* reference: ``scripts/reference_env.sh`` (mosaicml-streaming 0.13.0, torch 2.13.0 first).
* LitData: its own env under ``~/.cache/shardflow/litdata-env``, built the same way (torch
  2.13.0 first, so that pip takes the CPU wheel from disk and no CUDA torch is pulled; torchvision
  pinned to the release built for it, since LitData depends on torchvision) and stamped with its
  requirement list; a file lock keeps two runs from building it at once.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

from benchmarks.config import LITDATA, MACHINE, OURS, REFERENCE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(os.path.expanduser('~'), '.cache', 'shardflow')
LITDATA_VERSION = '0.2.76'
LITDATA_REQS = ['torch==2.13.0', 'torchvision==0.28.0', f'litdata=={LITDATA_VERSION}']
PIP = ['-m', 'pip', 'install', '-q', '--disable-pip-version-check']


def _log(message: str) -> None:
    print(f'[envs] {message}', file=sys.stderr, flush=True)


def reference_python() -> str:
    """Build (or reuse) the reference env; returns its python."""
    script = os.path.join(REPO, 'scripts', 'reference_env.sh')
    _log('checking the reference env (scripts/reference_env.sh) ...')
    out = subprocess.run(['bash', script], check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout.strip().splitlines()[-1]


def litdata_python(dest: str | None = None) -> str:
    """Build (or reuse) the LitData env; returns its python."""
    dest = dest or os.path.join(CACHE, 'litdata-env')
    python = os.path.join(dest, 'bin', 'python')
    stamp = os.path.join(dest, '.shardflow-stamp')
    wanted = ' '.join(LITDATA_REQS)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(f'{dest}.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(stamp) as f:
                if f.read().strip() == wanted and os.access(python, os.X_OK):
                    return python
        except OSError:
            pass
        _log(f'building the LitData env in {dest} (a few minutes) ...')
        subprocess.run(['rm', '-rf', dest], check=True)
        subprocess.run(['python3', '-m', 'venv', dest], check=True)
        subprocess.run([python, *PIP, 'torch==2.13.0'], check=True)
        subprocess.run([python, *PIP, *LITDATA_REQS], check=True)
        subprocess.run([python, '-c', 'import torch, litdata; '
                        'assert torch.__version__.startswith("2.13.0"), torch.__version__; '
                        'assert not torch.cuda.is_available()'], check=True)
        with open(stamp, 'w') as f:
            f.write(wanted)
    return python


def pythons(impls: set[str]) -> dict[str, str]:
    """The python of each implementation in ``impls``."""
    found = {}
    if impls & {OURS, MACHINE}:
        found[OURS] = found[MACHINE] = sys.executable
    if REFERENCE in impls:
        found[REFERENCE] = reference_python()
    if LITDATA in impls:
        found[LITDATA] = litdata_python()
    return found


def distribution_versions(python: str, names: list[str]) -> dict[str, str]:
    """Installed versions of ``names`` in the env of ``python`` (without importing them)."""
    code = ('import importlib.metadata as m, json, sys\n'
            'out = {}\n'
            'for n in sys.argv[1:]:\n'
            '    try: out[n] = m.version(n)\n'
            '    except m.PackageNotFoundError: out[n] = "missing"\n'
            'print(json.dumps(out))')
    import json
    result = subprocess.run([python, '-c', code, *names], stdout=subprocess.PIPE, text=True,
                            check=True, cwd='/')
    return json.loads(result.stdout)
