"""Killing the node's downloader mid-epoch: the other rank takes the schedule over and finishes.

Two ranks of one node read a shuffled epoch from S3 (moto) through the link emulator set slow
(30 KB/s), so downloads are in flight when rank 0, which runs the node's schedule from the
moment it built the dataset, is killed with SIGKILL. Rank 1 must read its whole part, and must
have taken over the schedule (the lease its kernel lock frees).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip('moto')

from benchmarks.linkemu import LinkEmulator, Profile  # noqa: E402
from benchmarks.s3 import CREDENTIALS, MotoServer  # noqa: E402
from tests.dataset.conftest import write_ids  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = 800


def _start(rank: int, remote: str, out: str, local: str, endpoint: str) -> subprocess.Popen:
    env = {**os.environ, **CREDENTIALS, 'RANK': str(rank), 'WORLD_SIZE': '2',
           'LOCAL_RANK': str(rank), 'LOCAL_WORLD_SIZE': '2', 'S3_ENDPOINT_URL': endpoint,
           'PYTHONPATH': REPO}
    return subprocess.Popen([sys.executable, '-m', 'tests.dataset.takeover_rank', remote, out,
                             local], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for(proc: subprocess.Popen, prefix: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            break
        lines.append(line)
        if line.startswith(prefix):
            return line
    raise AssertionError(f'no {prefix!r} line; output:\n{"".join(lines)[-3000:]}')


def test_killing_the_downloader_mid_epoch_the_other_rank_takes_over(tmp_path):
    # Small shards (~40): when rank 0 dies after its first sample, most of the epoch is still
    # to fetch (with 16 KiB shards the last downloads could end with rank 0's first one, leaving
    # rank 1 nothing to take over).
    data = write_ids(str(tmp_path / 'data'), SAMPLES, size_limit=1 << 13, payload=400)
    with MotoServer('takeover') as s3, \
            LinkEmulator(s3.endpoint, Profile(ttfb=0.05, conn_rate=10e3, link_rate=30e3)) as link:
        s3.upload_dir(data, 'ds')
        remote, local = 's3://takeover/ds', str(tmp_path / 'cache')
        rank0 = _start(0, remote, str(tmp_path / 'rank0.json'), local, link.endpoint)
        rank1 = _start(1, remote, str(tmp_path / 'rank1.json'), local, link.endpoint)
        try:
            assert _wait_for(rank0, 'BUILT', 120).split()[1] == 'True'  # It runs the schedule.
            assert _wait_for(rank1, 'BUILT', 120).split()[1] == 'False'
            _wait_for(rank0, 'READ 1', 120)
            fetched_before_kill = link.stats()['bytes_out']
            rank0.send_signal(signal.SIGKILL)
            rank0.wait(30)
            out, _ = rank1.communicate(timeout=240)
        finally:
            for proc in (rank0, rank1):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        stats = link.stats()
    assert rank1.returncode == 0, out[-3000:]
    with open(tmp_path / 'rank1.json') as f:
        result = json.load(f)
    ids = result['ids']
    assert len(ids) == result['length'] and len(set(ids)) == len(ids)
    assert all(0 <= i < SAMPLES for i in ids)
    assert result['took_schedule'], 'rank 1 never took the schedule over'
    assert stats['head_requests'] == 0  # The index is one GET, and no HEAD before a shard's.
    total = sum(os.path.getsize(os.path.join(data, n)) for n in os.listdir(data))
    assert fetched_before_kill < total, 'rank 0 was not killed mid-epoch'
