"""The installed ``streaming`` command: the console script pip writes next to the env's python.

The other CLI tests run ``python -m streaming``, which works whether or not pyproject.toml
declares the script; these run the script itself, so losing ``[project.scripts]`` fails here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import REPO, N, write_dataset

SCRIPT = Path(sys.executable).parent / ('streaming.exe' if os.name == 'nt' else 'streaming')
TARGET = 'streaming.cli.main:main'


def _run(*args: str, cwd: str) -> subprocess.CompletedProcess:
    # This tree first on the path, as for the other CLI tests (the env may hold an editable
    # install of another checkout); run from elsewhere so the cwd cannot supply the package.
    env = {**os.environ, 'PYTHONPATH': str(REPO)}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def test_pyproject_declares_the_command() -> None:
    # (A regex, not tomllib: the package supports Python 3.10.)
    text = (REPO / 'pyproject.toml').read_text()
    section = re.search(r'^\[project\.scripts\]\n((?:[^\[].*\n|\n)*)', text, re.M)
    assert section, 'pyproject.toml has no [project.scripts] section'
    assert re.search(rf'^streaming\s*=\s*"{re.escape(TARGET)}"', section.group(1), re.M), \
        section.group(1)


def test_installed_script_runs(tmp_path) -> None:
    # A script that `python -m streaming` cannot stand in for: pip wrote it from the metadata.
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
    stream, = json.loads(report.stdout)['streams']
    assert stream['samples'] == N
    valid = _run('validate', data, cwd=str(tmp_path))
    assert valid.returncode == 0 and 'OK' in valid.stdout, valid.stdout + valid.stderr

    missing = _run('inspect', str(tmp_path / 'nowhere'), cwd=str(tmp_path))
    assert missing.returncode == 1 and 'nowhere' in missing.stderr
    assert _run(cwd=str(tmp_path)).returncode == 2
