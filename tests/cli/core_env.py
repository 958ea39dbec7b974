"""A clean virtual env with the package installed core-only (no extra): what ``pip install
shardflow`` gives a user, for tests of what happens when an extra is missing.

Built once per (checkout, core dependency list, interpreter) and cached under
``~/.cache/shardflow`` (``SHARDFLOW_CACHE``): a ``venv`` without system site-packages, the core
dependencies and everything they require (resolved from their installed metadata, so exactly the
versions the dev env tested), and this project installed from a wheel built here, which writes
the ``streaming`` console script. The dependencies' files are linked from the dev env rather than
downloaded again (torch alone is hundreds of MB); nothing else of the dev env is visible, so
boto3 and the other extras' SDKs cannot be imported. Building needs no network.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get('SHARDFLOW_CACHE') or Path.home() / '.cache' / 'shardflow')


def _core_requirements() -> list[str]:
    text = (REPO / 'pyproject.toml').read_text()
    block = re.search(r'^dependencies = \[(.*?)^\]', text, re.S | re.M)
    assert block, 'pyproject.toml has no [project] dependencies list'
    return re.findall(r'"([^"]+)"', block.group(1))


def _closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions of ``requirements`` and of all they require (no extras)."""
    found: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({'extra': ''}):
            continue
        name = re.sub(r'[-_.]+', '-', requirement.name).lower()
        if name in found:
            continue
        found[name] = dist = metadata.distribution(requirement.name)
        todo.extend(Requirement(r) for r in dist.requires or [])
    return list(found.values())


def _link_distribution(dist: metadata.Distribution, site: Path) -> None:
    """Link every top-level entry (packages, modules, its .dist-info) of ``dist`` into ``site``."""
    base = Path(str(dist.locate_file('')))
    tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith('..')}
    for top in tops:
        source, target = base / top, site / top
        if source.exists() and not target.exists() and top != '__pycache__':
            target.symlink_to(source)


def _build(env: Path) -> None:
    python = getattr(sys, '_base_executable', sys.executable)
    subprocess.run([python, '-m', 'venv', '--without-pip', str(env)], check=True)
    env_python = env / 'bin' / 'python'
    site = Path(subprocess.run([str(env_python), '-c', 'import sysconfig; print(sysconfig.'
                                'get_paths()["purelib"])'], check=True, capture_output=True,
                               text=True).stdout.strip())
    for dist in _closure(_core_requirements()):
        _link_distribution(dist, site)
    with tempfile.TemporaryDirectory(prefix='shardflow-core-wheel-') as scratch:
        # The wheel is built from a copy of the tracked files (a build writes build/ and
        # *.egg-info beside its sources) by the dev env's setuptools (no index needed).
        source = Path(scratch) / 'src'
        tracked = subprocess.run(['git', 'ls-files', '-z'], cwd=REPO, check=True,
                                 capture_output=True).stdout.decode().split('\0')
        for name in filter(None, tracked):
            if (REPO / name).is_file():
                (source / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, source / name)
        subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps',
                        '--no-build-isolation', '-w', scratch, str(source)], check=True,
                       capture_output=True)
        wheel, = Path(scratch).glob('shardflow-*.whl')
        subprocess.run([sys.executable, '-m', 'pip', '--python', str(env_python), 'install',
                        '-q', '--no-deps', '--no-index', '--no-compile', str(wheel)], check=True,
                       capture_output=True,
                       env={**os.environ, 'PIP_DISABLE_PIP_VERSION_CHECK': '1'})


def core_env() -> Path:
    """The cached core-only env (built on first use; concurrent callers wait for one builder)."""
    key = hashlib.sha256('\n'.join([str(REPO), sys.version, sysconfig.get_paths()['purelib'],
                                    *_core_requirements()]).encode()).hexdigest()[:16]
    env = CACHE / f'core-env-{key}'
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f'core-env-{key}.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (env / '.complete').exists():
            shutil.rmtree(env, ignore_errors=True)
            _build(env)
            (env / '.complete').touch()
    return env
