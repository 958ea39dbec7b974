"""Rotation against moto's S3 server standing in for R2, through the fault-injecting proxy:
faults during prefetch, kill -9 mid-prefetch then restart, real ranks sharing one directory,
two nodes on one shared directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from streaming.storage import DownloadError
from streaming.tokens import ShardRotation, list_shards
from tests.storage import servers
from tests.storage.conftest import AWS_SECRET
from tests.tokens.conftest import SEQ, gets, tokens_for
from tests.tokens.helpers import DiskMonitor, shard_files

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize('ranged', [False, True], ids=['single-get', 'ranged'])
def test_every_fault_during_prefetch_is_survived(proxied, tmp_path, monkeypatch, ranged) -> None:
    faults = servers.FAULTS
    windows = 1024 if ranged else 32  # 64 KiB shards in 16 KiB parts, or 2 KiB in one GET
    if ranged:
        monkeypatch.setenv('STREAMING_DOWNLOAD_PART_SIZE', '16kb')
        monkeypatch.setenv('STREAMING_DOWNLOAD_CONCURRENCY', '2')
    remote, proxy = proxied(len(faults) + 1, windows)
    shards, manifest = list_shards(remote)
    assert manifest is not None

    def rule(method: str, path: str, n: int) -> str | None:
        for k in range(1, len(shards)):  # shard 0 is fetched in the foreground: no fault
            if method == 'GET' and path.endswith(f'train_{k:06d}.npy') and n == 0:
                return faults[(k - 1) % len(faults)]
        return None

    proxy.rule = rule
    local = str(tmp_path / 'local')
    with DiskMonitor(local) as monitor, \
            ShardRotation(shards, local, seq_len=SEQ, keep=2, prefetch=1, timeout=1.0,
                          retries=3) as rotation:
        for k in range(len(shards)):
            ds = rotation.dataset
            assert np.array_equal(ds.tokens, tokens_for(k, windows * SEQ))
            assert len(shard_files(local)) <= 2
            rotation.advance()
    assert {fault for fault, _, _ in proxy.injected} == set(faults)
    budget = 2 * max(s.entry.bytes for s in shards) + 2 * (64 << 10)
    assert monitor.peak <= budget


def test_a_shard_that_never_arrives_fails_the_swap_with_its_url(proxied, tmp_path) -> None:
    remote, proxy = proxied(3, 16)
    shards, _ = list_shards(remote)
    proxy.rule = lambda m, p, n: '500' if m == 'GET' and 'train_000001' in p else None
    started = time.monotonic()
    with ShardRotation(shards, str(tmp_path / 'l'), seq_len=SEQ, keep=2, retries=1,
                       timeout=2.0) as rotation:
        rotation.dataset  # noqa: B018
        with pytest.raises(DownloadError, match='train_000001.npy'):
            rotation.advance()
    assert time.monotonic() - started < 60


def _job_env(proxy: servers.FaultProxy, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith('STREAMING_DOWNLOAD')}
    env.update(PYTHONPATH=REPO, S3_ENDPOINT_URL=proxy.url, AWS_ACCESS_KEY_ID='fake-key-id',
               AWS_SECRET_ACCESS_KEY=AWS_SECRET, AWS_DEFAULT_REGION='us-east-1',
               AWS_RESPONSE_CHECKSUM_VALIDATION='when_required',
               STREAMING_DOWNLOAD_BACKOFF='0.05', **extra)
    return env


def _config(tmp_path, name: str, **config) -> str:
    path = str(tmp_path / f'{name}.json')
    with open(path, 'w') as f:
        json.dump(config, f)
    return path


def test_kill_9_mid_prefetch_then_restart_resumes_the_partial_file(proxied, tmp_path) -> None:
    parts, part = 16, 64 << 10
    windows = parts * part // (SEQ * 4)  # shards of 1 MiB (+ header) in 64 KiB parts
    remote, proxy = proxied(3, windows)
    # The proxy paces bodies in 1 MiB slots: at 1 MiB/s each 64 KiB part holds its
    # connection for ~1 s, so shard 1 takes ~8 s with 2 connections.
    proxy.rate = 1 << 20
    env = _job_env(proxy, STREAMING_DOWNLOAD_PART_SIZE=str(part),
                   STREAMING_DOWNLOAD_CONCURRENCY='2')
    local, out = str(tmp_path / 'local'), str(tmp_path / 'out')
    os.makedirs(out)
    common = dict(remote=remote, local=local, out=out, seq_len=SEQ, keep=2, steps_per_shard=10,
                  batch=2)
    first = subprocess.Popen([sys.executable, '-m', 'tests.tokens.worker',
                              _config(tmp_path, 'a', hold_after_start=True, end_step=0,
                                      **common)], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while gets(proxy, 1) < 5:  # shard 0 is active, shard 1 several parts in
            assert first.poll() is None, first.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, 'the prefetch of shard 1 never started'
            time.sleep(0.05)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    before = gets(proxy, 1)
    leftovers = [n for n in os.listdir(local) if 'train_000001.npy' in n and
                 not n.endswith('.lock')]
    assert leftovers and 'train_000001.npy' not in leftovers, leftovers  # a partial file
    # Restart at step 13: the middle of shard 1.
    with DiskMonitor(local) as monitor:
        done = subprocess.run([sys.executable, '-m', 'tests.tokens.worker',
                               _config(tmp_path, 'b', start_step=13, end_step=16, **common)],
                              env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    after = gets(proxy, 1) - before
    assert 0 < after < parts, f'{after} GETs after the restart: the partial file was not resumed'
    with open(os.path.join(out, 'rank0.json')) as f:
        steps = json.load(f)['steps']
    assert [s['step'] for s in steps] == [13, 14, 15]
    assert {s['shard'] for s in steps} == {1}
    data = tokens_for(1, windows * SEQ)
    for s in steps:
        assert s['first_tokens'] == [int(data[i * SEQ]) for i in s['indices']]
    budget = 2 * (windows * SEQ * 4 + 128 + windows * 8 + (64 << 10))
    assert monitor.peak <= budget


def test_ranks_share_one_node_directory_with_one_download(proxied, tmp_path) -> None:
    remote, proxy = proxied(3, 48)
    local, out = str(tmp_path / 'local'), str(tmp_path / 'out')
    os.makedirs(out)
    config = _config(tmp_path, 'job', remote=remote, local=local, out=out, seq_len=SEQ,
                     keep=None, steps_per_shard=4, batch=3, end_step=14, seed=5)
    port = str(20000 + os.getpid() % 20000)
    procs = []
    for rank in range(2):
        env = _job_env(proxy, RANK=str(rank), WORLD_SIZE='2', LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE='2', MASTER_ADDR='127.0.0.1', MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, '-m', 'tests.tokens.worker', config],
                                      env=env, cwd=REPO, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
    outputs = [p.communicate(timeout=180)[0].decode(errors='replace') for p in procs]
    for rank, text in enumerate(outputs):
        with open(os.path.join(out, f'rank{rank}.log'), 'w') as f:
            f.write(text)
    for rank, (proc, text) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f'rank {rank}:\n{text[-3000:]}'
    results = []
    for rank in range(2):
        with open(os.path.join(out, f'rank{rank}.json')) as f:
            results.append(json.load(f))
    assert [r['downloader'] for r in results] == [True, False]
    # Steps 0..13 over 3 shards of 4 steps: shards 0 1 2 0, the last one cycled around.
    by_step = [{s['step']: s for s in r['steps']} for r in results]
    assert sorted(by_step[0]) == sorted(by_step[1]) == list(range(14))
    for step in range(14):
        a, b = by_step[0][step], by_step[1][step]
        assert a['shard'] == b['shard'] == (step // 4) % 3
        assert not set(a['indices']) & set(b['indices'])  # disjoint between ranks
    for visit in range(4):
        windows = [i for r in by_step for s in range(visit * 4, min(14, visit * 4 + 4))
                   for i in r[s]['indices']]
        assert len(windows) == len(set(windows))  # no window twice within a visit
    for index in range(3):  # every object fetched exactly once for the node
        assert gets(proxy, index) == 1, (index, proxy.counts)


_NODE = """
import json, sys
from streaming.tokens import ShardRotation, list_shards
from streaming.world import World
remote, local, rank, shared = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == '1'
shards, _ = list_shards(remote)
rotation = ShardRotation(shards, local, seq_len=SEQ_LEN, keep=None, prefetch=2,
                         world=World(rank, 2, 0, 1), shared_filesystem=shared, timeout=10.0)
firsts = []
for _ in range(4):
    firsts.append(int(rotation.dataset.tokens[0]))
    rotation.advance()
rotation.close(wait=True)
print(json.dumps({'downloader': rotation.downloader, 'firsts': firsts}))
""".replace('SEQ_LEN', str(SEQ))


@pytest.mark.parametrize('shared', [True, False], ids=['shared-filesystem', 'lock-only'])
def test_two_nodes_on_one_shared_directory_fetch_each_shard_once(proxied, tmp_path,
                                                                 shared) -> None:
    """Two processes, each local rank 0 of its own node, on one directory (a shared
    filesystem): with ``shared_filesystem`` only rank 0 downloads; without it both try, and the
    per-shard lock lets one of them fetch each file while the other waits."""
    remote, proxy = proxied(3, 4096)  # 256 KiB shards
    local = str(tmp_path / 'shared')
    env = _job_env(proxy)
    procs = [subprocess.Popen([sys.executable, '-c', _NODE, remote, local, str(rank),
                               '1' if shared else '0'], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for proc, (_, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert [r['downloader'] for r in results] == ([True, False] if shared else [True, True])
    for r in results:
        assert r['firsts'] == [int(tokens_for(k % 3, 1)[0]) for k in range(4)]
    for index in range(3):
        assert gets(proxy, index) == 1, (index, proxy.counts)
