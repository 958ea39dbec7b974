"""Streaming an epoch from S3 (moto) through a fault-injecting proxy, with 2 DataLoader workers.

With retries available, every fault kind (reset mid-body, 500, 503, 429, a stall past the
timeout, a truncated body, a flipped byte) is survived: the epoch yields every sample exactly once
and no corrupt sample. A shard that always fails ends the run with a clear error in bounded time.
Afterwards, every file in the cache at a shard's path is exactly that shard.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time

import pytest

from streaming.dataset.cache_dirs import setup_cache_dir
from tests.storage import servers
from tests.storage.conftest import s3_env
from tests.storage.test_e2e import read_all, write

FAULTS = servers.FAULTS
NUM = 240


@pytest.fixture
def dataset_behind_proxy(s3, moto, monkeypatch):
    """A dataset of NUM samples (about 20 shards, zstd) in moto, read through a FaultProxy."""
    _, bucket = s3
    remote = f's3://{bucket}/ds'
    write(remote, range(NUM), compression='zstd')
    proxy = servers.FaultProxy(moto.port, stall_seconds=6.0)
    s3_env(monkeypatch, proxy.url)
    monkeypatch.setenv('AWS_RESPONSE_CHECKSUM_VALIDATION', 'when_required')
    yield remote, proxy
    proxy.stop()


def assert_cache_is_trustworthy(local: str) -> int:
    """Every file in the cache is index.json, a shard file matching its index entry, or an
    in-progress download (``*.tmp``, ``*.partial``) of a worker killed when the run ended, which
    is never read: no file at a shard's name is wrong. The set-up caches (index summary, epoch
    orders) are kept outside it and hold nothing else; they are used only when their key and
    checksum match (tests/dataset/test_setup_cache.py damages them)."""
    with open(os.path.join(local, 'index.json')) as f:
        index = json.load(f)
    expected = {}
    for shard in index['shards']:
        for key in ('raw_data', 'zip_data'):
            if shard.get(key):
                expected[shard[key]['basename']] = shard[key]['hashes']['sha1']
    checked = 0
    caches = setup_cache_dir(local)
    for name in os.listdir(caches) if os.path.isdir(caches) else []:
        assert re.fullmatch(r'index\.bin|order-[0-9a-f]+\.ids|.*\.tmp', name), name
    for name in os.listdir(local):
        if name == 'index.json' or re.search(r'\.(tmp|partial|partial\.json)$', name):
            continue
        assert name in expected, f'unexpected file in the cache: {name}'
        with open(os.path.join(local, name), 'rb') as f:
            assert hashlib.sha1(f.read()).hexdigest() == expected[name], f'{name} is corrupt'
        checked += 1
    return checked


def test_every_fault_kind_is_survived_in_an_epoch(dataset_behind_proxy, tmp_path) -> None:
    remote, proxy = dataset_behind_proxy
    shard_paths: dict[str, int] = {}

    def rule(method: str, path: str, n: int) -> str | None:
        if method != 'GET' or '/shard.' not in path or n > 0:
            return None
        k = shard_paths.setdefault(path, len(shard_paths))
        return FAULTS[k % len(FAULTS)]

    proxy.rule = rule
    local = str(tmp_path / 'cache')
    started = time.monotonic()
    ids = read_all(remote, local, validate_hash='sha1', download_retry=2, download_timeout=1.0)
    assert sorted(ids) == list(range(NUM))  # Exactly once each; read_all checks payloads.
    assert {fault for fault, _, _ in proxy.injected} == set(FAULTS)
    assert assert_cache_is_trustworthy(local) > 0
    assert time.monotonic() - started < 60


_FAILING_RUN = """
import json, sys, time
from streaming import StreamingDataLoader, StreamingDataset
dataset = StreamingDataset(remote=sys.argv[1], local=sys.argv[2], batch_size=4,
                           download_retry=1, download_timeout=1.0, validate_hash='sha1')
started = time.monotonic()
try:
    for _ in StreamingDataLoader(dataset, batch_size=4, num_workers=2):
        pass
    error = None
except Exception as caught:  # Re-raised by the DataLoader from its worker.
    error = str(caught)
print(json.dumps({'error': error, 'elapsed': time.monotonic() - started}))
"""


def test_a_shard_that_always_fails_ends_the_run_clearly(dataset_behind_proxy, tmp_path) -> None:
    remote, proxy = dataset_behind_proxy
    bad = 'shard.00003.mds.zstd'
    proxy.rule = lambda m, p, n: 'stall' if m == 'GET' and p.endswith(bad) else None
    local = str(tmp_path / 'cache')
    # In a subprocess, so that a hang anywhere (this test's subject) cannot hang the suite.
    try:
        result = subprocess.run([sys.executable, '-c', _FAILING_RUN, remote, local],
                                capture_output=True, text=True, timeout=45, cwd=servers.REPO)
    except subprocess.TimeoutExpired:
        pytest.fail('the run hung instead of ending with an error')
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    message = outcome['error']
    assert message is not None, 'the run ended without an error'
    assert re.search(rf'{re.escape(remote)}/{re.escape(bad)}.*after 2 attempt\(s\)', message), \
        message
    assert 'no data received for 1s' in message
    assert outcome['elapsed'] < 20, outcome  # Two attempts of about a second each.
    assert bad not in os.listdir(local)
    assert_cache_is_trustworthy(local)
