"""The rotation manager over a local "remote": swaps, cycles, the disk budget, restarts."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming.tokens import DiskBudgetError, ShardRotation, list_shards
from streaming.tokens.store import OVERHEAD
from tests.tokens.conftest import SEQ, tokens_for, write_dataset
from tests.tokens.helpers import DiskMonitor, shard_files

WINDOWS = 64


@pytest.fixture
def remote(tmp_path):
    out = str(tmp_path / 'remote')
    write_dataset(out, shards=4, windows=WINDOWS)
    return out


def first_token(index: int) -> int:
    return int(tokens_for(index, 1)[0])


def shard_bytes(remote: str) -> int:
    return max(os.path.getsize(os.path.join(remote, f'train_{i:06d}.npy')) +
               os.path.getsize(os.path.join(remote, f'sample_ids_{i:06d}.bin'))
               for i in range(4)) + OVERHEAD


@pytest.mark.parametrize('limit', ['keep', 'bytes'])
def test_cycle_around_within_the_budget(remote, tmp_path, limit) -> None:
    shards, manifest = list_shards(remote)
    assert manifest is not None and len(shards) == 4
    local = str(tmp_path / 'local')
    budget = 2 * shard_bytes(remote)
    kwargs = {'keep': 2} if limit == 'keep' else {'keep': None, 'disk_budget': budget}
    seen = []
    with DiskMonitor(local) as monitor, \
            ShardRotation(shards, local, seq_len=SEQ, prefetch=1, **kwargs) as rotation:
        for _ in range(10):
            ds = rotation.dataset
            seen.append(int(ds.tokens[0]))
            assert len(ds) == WINDOWS
            assert len(shard_files(local)) <= 2
            assert monitor.sample() <= budget
            rotation.advance()
            assert monitor.sample() <= budget
    assert seen == [first_token(i % 4) for i in range(10)]  # 0 1 2 3 0 1 2 3 0 1
    assert monitor.peak <= budget, (monitor.peak, budget)


def test_keep_everything_downloads_each_shard_once(remote, tmp_path) -> None:
    shards, _ = list_shards(remote)
    local = str(tmp_path / 'local')
    inodes = {}
    with ShardRotation(shards, local, seq_len=SEQ, keep=None, prefetch=2) as rotation:
        for turn in range(9):
            name = rotation.shards[rotation.position].tokens_name
            rotation.dataset  # noqa: B018
            inode = os.stat(os.path.join(local, name)).st_ino
            assert inodes.setdefault(name, inode) == inode, f'{name} fetched again at {turn}'
            rotation.advance()
    assert len(shard_files(local)) == 4


def test_on_step_is_idempotent_and_restart_lands_mid_shard(remote, tmp_path) -> None:
    shards, _ = list_shards(remote)
    steps_per_shard, batch = 5, 4

    def run(local: str, start: int, end: int) -> list[list[int]]:
        got = []
        rotation = ShardRotation(shards, local, seq_len=SEQ, steps_per_shard=steps_per_shard,
                                 start_step=start)
        step = start
        while step < end:
            rotation.on_step(step)
            order = list(rotation.sampler(seed=3, step=step, batch_size=batch))
            got.append([int(rotation.dataset[i][0]) for i in order[:batch]])
            step += 1
        rotation.close()
        return got

    full = run(str(tmp_path / 'a'), 0, 17)
    for restart in (7, 10, 13):  # the middle of shard 1, the start of shard 2, mid shard 2
        assert run(str(tmp_path / f'r{restart}'), restart, 17) == full[restart:], restart
    rotation = ShardRotation(shards, str(tmp_path / 'b'), seq_len=SEQ, steps_per_shard=5)
    assert rotation.on_step(0) is True
    assert rotation.on_step(0) is False and rotation.on_step(4) is False
    assert rotation.on_step(10) is True and rotation.shards[rotation.position].index == 2
    assert rotation.on_step(10) is False and rotation.on_step(14) is False
    assert rotation.on_step(23) is True and rotation.position == 0 and rotation.cycle == 1
    assert rotation.step_in_shard(23) == 3
    state = rotation.state_dict()
    other = ShardRotation(shards, str(tmp_path / 'b'), seq_len=SEQ, steps_per_shard=5)
    other.load_state_dict(state)
    assert other.dataset.path == rotation.dataset.path


def test_budget_too_small_is_a_clear_error(remote, tmp_path) -> None:
    shards, _ = list_shards(remote)
    rotation = ShardRotation(shards, str(tmp_path / 'l'), seq_len=SEQ, keep=None,
                             disk_budget=shard_bytes(remote) // 2)
    with pytest.raises(DiskBudgetError, match='disk_budget'):
        rotation.dataset  # noqa: B018


def test_no_manifest_and_raw_names(tmp_path) -> None:
    out = str(tmp_path / 'remote')
    write_dataset(out, shards=3, windows=8)
    os.remove(os.path.join(out, 'manifest.json'))
    shards, manifest = list_shards(out)
    assert manifest is None and [s.index for s in shards] == [0, 1, 2]
    rotation = ShardRotation(shards, str(tmp_path / 'l'), seq_len=SEQ, keep=2)
    for i in range(4):
        assert np.array_equal(rotation.dataset.window(0), tokens_for(i % 3, SEQ))
        rotation.advance()


@pytest.mark.parametrize('drop_last', [False, True])
def test_batches_are_the_loaders_batches_without_a_dataloader(remote, tmp_path,
                                                               drop_last) -> None:
    shards, _ = list_shards(remote)
    with ShardRotation(shards, str(tmp_path / 'l'), seq_len=SEQ, steps_per_shard=5,
                       start_step=6) as rotation:
        rotation.on_step(6)
        fast = list(rotation.batches(6, seed=3, step=6, drop_last=drop_last))
        slow = list(rotation.loader(6, seed=3, step=6, drop_last=drop_last))
    assert len(fast) == len(slow) == (WINDOWS - 6 + (0 if drop_last else 5)) // 6
    assert all(a.dtype == b.dtype and np.array_equal(a.numpy(), b.numpy())
               for a, b in zip(fast, slow))
