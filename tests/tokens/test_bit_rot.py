"""Bit rot under a verified marker: a restart checks every shard again before serving it.

Disk corruption changes bytes without touching size, mtime or inode, so a marker written by an
earlier run cannot vouch for them. The runs here are real processes: one verifies and exits
(or stays alive), then bytes of the cached copy are flipped with their mtime restored.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np

from streaming.tokens import ShardRotation, list_shards
from tests.tokens.conftest import SEQ, tokens_for
from tests.tokens.test_verify import flip, numpy_dataset

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# An earlier run: every shard fetched and verified (markers written), then the process exits,
# or with 'stay' waits on stdin, so that its markers' checker is still alive.
RUN = textwrap.dedent('''
    import sys
    from streaming.tokens import list_shards
    from streaming.tokens.store import ShardStore
    shards, _ = list_shards(sys.argv[1])
    store, seq_len = ShardStore(sys.argv[2]), int(sys.argv[3])
    for shard in shards:
        store.fetch(shard)
        store.verify(shard, seq_len)
        assert store.verified(shard, seq_len), shard
    print('verified', flush=True)
    if sys.argv[4] == 'stay':
        sys.stdin.readline()
''')


def run_elsewhere(remote: str, local: str, stay: bool = False) -> subprocess.Popen:
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [
        REPO, os.environ.get('PYTHONPATH')]))}
    child = subprocess.Popen([sys.executable, '-c', RUN, remote, local, str(SEQ),
                              'stay' if stay else 'exit'], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == 'verified'
    return child


def rot(path: str, window: int) -> None:
    """Flip one byte of ``window`` and put size, mtime and inode back as they were."""
    before = os.stat(path)
    flip(path, window)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == \
        (before.st_size, before.st_mtime_ns, before.st_ino)


def test_rot_under_an_earlier_runs_marker_is_caught_before_it_is_served(tmp_path, caplog):
    remote, local = str(tmp_path / 'remote'), str(tmp_path / 'local')
    numpy_dataset(remote, shards=2, windows=8)
    run_elsewhere(remote, local).wait(timeout=60)
    markers = sorted(n for n in os.listdir(local) if n.endswith('.verified'))
    assert markers == ['.train_000000.npy.verified', '.train_000001.npy.verified']
    rot(os.path.join(local, 'train_000000.npy'), window=5)  # The shard active at the restart.
    rot(os.path.join(local, 'train_000001.npy'), window=2)  # The one prefetched after it.
    shards, _ = list_shards(remote)
    with caplog.at_level(logging.WARNING, 'streaming.tokens'), \
            ShardRotation(shards, local, seq_len=SEQ, keep=None, prefetch=1,
                          stall_timeout=30) as rotation:
        for k in range(2):
            served = rotation.dataset.batch(list(range(8))).numpy()
            assert np.array_equal(served, tokens_for(k, 8 * SEQ).reshape(8, SEQ)), k
            if k == 0:
                rotation.advance()
        rotation.close(wait=True)
    again = [r.getMessage() for r in caplog.records if 'downloading it again' in r.getMessage()]
    assert len(again) == 2, again  # Each rotten copy was caught and fetched anew once.
    for k in range(2):  # The copies on disk are good again, and vouched for by this process.
        with open(os.path.join(local, f'train_{k:06d}.npy'), 'rb') as f:
            assert f.read() == open(os.path.join(remote, f'train_{k:06d}.npy'), 'rb').read()
        assert rotation.store.verified(shards[k], SEQ)


def test_a_marker_counts_while_its_checker_runs_and_not_after(tmp_path):
    remote, local = str(tmp_path / 'remote'), str(tmp_path / 'local')
    numpy_dataset(remote, shards=2, windows=8)
    shards, _ = list_shards(remote)
    store = ShardRotation(shards, local, seq_len=SEQ).store
    child = run_elsewhere(remote, local, stay=True)
    try:  # Another rank of the same run: trusts the running checker, hashes nothing.
        assert all(store.verified(shard, SEQ) for shard in shards)
    finally:
        child.communicate('\n', timeout=60)
    assert not any(store.verified(shard, SEQ) for shard in shards)
