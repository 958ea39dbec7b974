"""Helpers for the CLI tests: run ``python -m streaming`` as a real subprocess; a small dataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# The moto S3 server of the storage tests (a real server on loopback).
from tests.storage.conftest import AWS_SECRET, moto  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
N = 300


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: str | None = None) -> subprocess.CompletedProcess:
    """``python -m streaming ARGS`` with this tree first on the path."""
    full = {**os.environ, 'PYTHONPATH': str(REPO), **(env or {})}
    return subprocess.run([sys.executable, '-m', 'streaming', *args], capture_output=True,
                          text=True, env=full, timeout=timeout, cwd=cwd)


def cli_s3_env(endpoint: str) -> dict[str, str]:
    """The environment of a CLI subprocess that talks to the moto S3 server at ``endpoint``."""
    return {'S3_ENDPOINT_URL': endpoint, 'AWS_ACCESS_KEY_ID': 'fake-key-id',
            'AWS_SECRET_ACCESS_KEY': AWS_SECRET, 'AWS_DEFAULT_REGION': 'us-east-1',
            'AWS_CONFIG_FILE': '/nonexistent', 'AWS_SHARED_CREDENTIALS_FILE': '/nonexistent'}


def run_json(*args: str, **kwargs) -> dict:
    proc = run_cli(*args, '--json', **kwargs)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def sample(i: int) -> dict:
    return {'id': i, 'text': f'sample {i} ' + 'x' * (i % 17),
            'tokens': np.arange(i % 9 + 1, dtype=np.int32)}


COLUMNS = {'id': 'int', 'text': 'str', 'tokens': 'ndarray:int32'}


def write_dataset(out: str, n: int = N, **kwargs) -> str:
    from streaming import MDSWriter
    options = {'compression': 'zstd', 'hashes': ['sha1', 'xxh64'], 'size_limit': 2048, **kwargs}
    with MDSWriter(out=out, columns=COLUMNS, **options) as writer:
        for i in range(n):
            writer.write(sample(i))
    return out


@pytest.fixture
def dataset(tmp_path) -> str:
    return write_dataset(str(tmp_path / 'ds'))
