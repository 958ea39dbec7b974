"""Facts about the machine and the code under test, recorded with every run."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from typing import Any


def _cpu_model() -> str:
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or 'unknown'


def _mem_total_gib() -> float:
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemTotal:'):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float('nan')


def _git(repo: str, *args: str) -> str:
    try:
        return subprocess.run(['git', '-C', repo, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ''


def facts(repo: str) -> dict[str, Any]:
    """CPU, cores, memory, kernel, python, load, date and the git revision of ``repo``."""
    commit = _git(repo, 'rev-parse', '--short', 'HEAD')
    dirty = bool(_git(repo, 'status', '--porcelain', '--untracked-files=no'))
    return {
        'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
        'cpu': _cpu_model(),
        'nproc': os.cpu_count(),
        'memory_gib': round(_mem_total_gib(), 1),
        'kernel': platform.release(),
        'os': platform.platform(terse=True),
        'python': platform.python_version(),
        'load_average': [round(x, 2) for x in os.getloadavg()],
        'git_commit': commit + ('-dirty' if dirty else ''),
    }
