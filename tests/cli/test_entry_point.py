"""The installed ``streaming`` command: the console script pip writes next to the env's python.

The other CLI tests run ``python -m streaming``, which works whether or not pyproject.toml
declares the script; these run the script itself, so losing ``[project.scripts]`` fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

from tests.cli.conftest import N, REPO, write_dataset

SCRIPT = Path(sys.executable).parent / ('streaming.exe' if os.name == 'nt' else 'streaming')
TARGET = 'streaming.cli.main:main'


def _run(*args: str, cwd: str) -> subprocess.CompletedProcess:
    # This tree first on the path, as for the other CLI tests (the env may hold an editable
    # install of another checkout); run from elsewhere so the cwd cannot supply the package.
    env = {**os.environ, 'PYTHONPATH': str(REPO)}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def test_pyproject_declares_the_command() -> None:
    with open(REPO / 'pyproject.toml', 'rb') as f:
        scripts = tomllib.load(f)['project'].get('scripts', {})
    assert scripts.get('streaming') == TARGET, scripts


def test_installed_metadata_has_the_command() -> None:
    found = [ep for ep in entry_points(group='console_scripts', name='streaming')]
    assert found, ('no `streaming` console script in the installed shardflow metadata; '
                   're-run scripts/setup.sh after changing [project.scripts]')
    assert {ep.value for ep in found} == {TARGET}


def test_installed_script_runs(tmp_path) -> None:
    assert SCRIPT.is_file() and os.access(SCRIPT, os.X_OK), (
        f'{SCRIPT} is missing: the `streaming` command is not installed '
        '(pyproject.toml [project.scripts]; re-run scripts/setup.sh)')
    version = _run('--version', cwd=str(tmp_path))
    assert version.returncode == 0, version.stderr
    from streaming import __version__
    assert version.stdout.strip() == f'streaming {__version__}'

    data = write_dataset(str(tmp_path / 'ds'))
    report = _run('inspect', data, '--json', cwd=str(tmp_path))
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)['samples'] == N
    valid = _run('validate', data, cwd=str(tmp_path))
    assert valid.returncode == 0 and 'OK' in valid.stdout, valid.stdout + valid.stderr

    missing = _run('inspect', str(tmp_path / 'nowhere'), cwd=str(tmp_path))
    assert missing.returncode == 1 and 'nowhere' in missing.stderr
    assert _run(cwd=str(tmp_path)).returncode == 2
