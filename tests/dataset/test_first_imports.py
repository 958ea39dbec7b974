"""The node's download threads never import a module for the first time.

A DataLoader worker forked while one of those threads held a module's import lock deadlocked as
soon as it imported that module (numpy.random, seeded by torch's worker loop). The dataset's
constructor now imports what the threads use (streaming.cache.preload); a fresh interpreter
(tests/dataset/first_imports.py) records, with an audit hook, every first import made by a
thread named ``streaming-*`` while the schedule fetches a zstd-compressed dataset.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.dataset.conftest import write_ids

SCRIPT = os.path.join(os.path.dirname(__file__), 'first_imports.py')
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _first_imports(remote: str, local: str, env: dict[str, str] | None = None,
                   options: dict | None = None) -> list[list[str]]:
    done = subprocess.run([sys.executable, SCRIPT, remote, local, json.dumps(options or {})],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, 'PYTHONPATH': ROOT, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope='module')
def zstd_remote(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp('first-imports') / 'remote')
    return write_ids(out, 600, size_limit=1 << 14, payload=500, compression='zstd')


def test_local_remote_downloads_import_nothing(zstd_remote, tmp_path):
    pytest.importorskip('zstandard')
    assert _first_imports(zstd_remote, str(tmp_path / 'cache')) == []


def test_s3_downloads_import_nothing(zstd_remote, tmp_path):
    pytest.importorskip('zstandard')
    pytest.importorskip('moto')
    boto3 = pytest.importorskip('boto3')
    from tests.storage.servers import moto_server
    server = moto_server()
    try:
        client = boto3.client('s3', endpoint_url=server.url, region_name='us-east-1',
                              aws_access_key_id='testing', aws_secret_access_key='testing')
        client.create_bucket(Bucket='first-imports')
        for name in os.listdir(zstd_remote):
            client.upload_file(os.path.join(zstd_remote, name), 'first-imports', f'ds/{name}')
        env = {'S3_ENDPOINT_URL': server.url, 'AWS_ACCESS_KEY_ID': 'testing',
               'AWS_SECRET_ACCESS_KEY': 'testing', 'AWS_DEFAULT_REGION': 'us-east-1'}
        assert _first_imports('s3://first-imports/ds', str(tmp_path / 'a'), env) == []
        # The index already local: the main thread makes no request before the schedule does.
        os.makedirs(tmp_path / 'b')
        shutil.copy(os.path.join(zstd_remote, 'index.json'), tmp_path / 'b')
        assert _first_imports('s3://first-imports/ds', str(tmp_path / 'b'), env) == []
    finally:
        server.stop()
