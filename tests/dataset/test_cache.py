"""The node-wide shard cache under a byte limit, with a directory as the remote."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset
from streaming.cache.shard_cache import PREPARING
from streaming.storage import register_backend
from streaming.storage.local import LocalBackend
from tests.dataset.conftest import write_ids

NUM_SAMPLES = 2000


class CountingBackend(LocalBackend):
    """Copies files like the local backend and logs each download's size to a file, which
    forked DataLoader workers append to as well."""

    log = ''

    def download(self, url: str, local_path: str, timeout: float | None = None) -> None:
        super().download(url, local_path, timeout)
        with open(self.log, 'a') as f:
            f.write(f'{os.path.getsize(local_path)}\n')


@pytest.fixture
def counted_remote(tmp_path):
    remote = write_ids(str(tmp_path / 'remote'), NUM_SAMPLES, size_limit=1 << 15, payload=1000)
    CountingBackend.log = str(tmp_path / 'downloads.log')
    register_backend('', CountingBackend)
    yield remote
    register_backend('', LocalBackend)


def _downloaded(tmp_path) -> int:
    path = tmp_path / 'downloads.log'
    return sum(int(line) for line in path.read_text().split()) if path.exists() else 0


def _dataset_bytes(remote: str) -> int:
    return sum(os.path.getsize(os.path.join(remote, n)) for n in os.listdir(remote)
               if n.startswith('shard.'))


@pytest.mark.parametrize('workers', [0, 2])
def test_shuffled_epoch_with_quarter_cache_completes_without_thrashing(
        counted_remote, tmp_path, workers) -> None:
    total = _dataset_bytes(counted_remote)
    limit = total // 4
    with pytest.warns(UserWarning, match='shuffle_block_size'):
        dataset = StreamingDataset(remote=counted_remote, local=str(tmp_path / 'cache'),
                                   batch_size=10, shuffle=True, cache_limit=limit)
        ids = [i for b in StreamingDataLoader(dataset, batch_size=10, num_workers=workers)
               for i in b['id'].tolist()]
    assert sorted(ids) == list(range(NUM_SAMPLES))
    assert dataset.cache_usage <= limit
    cached = sum(os.path.getsize(os.path.join(tmp_path / 'cache', n))
                 for n in os.listdir(tmp_path / 'cache') if n.startswith('shard.'))
    assert cached <= limit
    downloaded = _downloaded(tmp_path)
    assert total <= downloaded <= 2 * total, (downloaded, total)


# Tests that drive the cache by hand pass predownload=0: with it, the node's schedule starts no
# download of its own (see streaming.cache.prefetch), so the cache holds only what they did.
BY_HAND = {'predownload': 0}


@pytest.mark.filterwarnings('ignore:predownload=0')
def test_evict_and_prepare_by_hand(counted_remote, tmp_path) -> None:
    dataset = StreamingDataset(remote=counted_remote, local=str(tmp_path / 'cache'),
                               batch_size=4, **BY_HAND)
    index = os.path.getsize(tmp_path / 'cache' / 'index.json')
    assert dataset.cache_usage == index  # The index counts, as in the reference.
    dataset.prepare_shard(3)
    size = index + dataset.shards[3].get_raw_size()
    assert dataset.cache_usage == size
    first = dataset[dataset.sample_offset_per_shard[3]]
    dataset.prepare_shard(5)
    dataset.evict_coldest_shard()  # Shard 3 was used before shard 5 was prepared.
    assert not os.path.exists(dataset.shards[3].path(dataset.shards[3].raw_data))
    assert dataset.cache_usage == index + dataset.shards[5].get_raw_size()
    assert dataset[dataset.sample_offset_per_shard[3]] == first  # Fetched again on demand.
    dataset.evict_shard(5)
    assert dataset.cache_usage == size


def test_local_only_shards_are_never_evicted(tmp_path) -> None:
    local = write_ids(str(tmp_path / 'data'), NUM_SAMPLES, size_limit=1 << 15, payload=1000)
    before = sorted(os.listdir(local))
    with pytest.raises(RuntimeError, match='cache_limit'):
        StreamingDataset(local=local, batch_size=4, cache_limit=_dataset_bytes(local) // 2)
    assert sorted(os.listdir(local)) == before  # No data lost.
    dataset = StreamingDataset(local=local, batch_size=4)
    with pytest.raises(ValueError, match='only copy'):
        dataset.evict_shard(0)


def test_cache_limit_smaller_than_two_shards_is_refused(counted_remote, tmp_path) -> None:
    with pytest.raises(ValueError, match=r'cache_limit=1000 bytes is too small.*largest shard'):
        StreamingDataset(remote=counted_remote, local=str(tmp_path / 'cache'), batch_size=4,
                         cache_limit=1000)


@pytest.mark.parametrize('keep_zip', [False, True])
def test_keep_zip(tmp_path, keep_zip: bool) -> None:
    remote = write_ids(str(tmp_path / 'remote'), 300, compression='zstd')
    dataset = StreamingDataset(remote=remote, local=str(tmp_path / 'cache'), batch_size=4,
                               keep_zip=keep_zip)
    assert sorted(s['id'] for s in dataset) == list(range(300))
    names = os.listdir(tmp_path / 'cache')
    assert any(n.endswith('.mds') for n in names)
    assert any(n.endswith('.zstd') for n in names) == keep_zip


class FlakyBackend(LocalBackend):
    """Slow shard downloads of which every other one fails, so prepares overlap and fail."""

    calls = 0

    def download(self, url: str, local_path: str, timeout: float | None = None) -> None:
        if not url.endswith('index.json'):
            FlakyBackend.calls += 1
            time.sleep(0.001)
            if FlakyBackend.calls % 2:
                raise ConnectionResetError('injected failure')
        super().download(url, local_path, timeout)


@pytest.mark.filterwarnings('ignore:predownload=0')
def test_concurrent_prepares_with_failures_never_deadlock(tmp_path) -> None:
    remote = write_ids(str(tmp_path / 'remote'), 100, size_limit=1 << 12, payload=200)
    register_backend('', FlakyBackend)
    try:
        dataset = StreamingDataset(remote=remote, local=str(tmp_path / 'cache'), batch_size=4,
                                   download_retry=0, **BY_HAND)
        failures = []

        def hammer(seed: int) -> None:
            rng = np.random.RandomState(seed)
            for _ in range(150):
                shard_id = int(rng.randint(3))  # A few shards, so threads collide.
                try:
                    dataset.prepare_shard(shard_id)
                    if rng.rand() < 0.5:
                        dataset.evict_shard(shard_id)
                except RuntimeError as error:  # An injected failure, reported: fine.
                    failures.append(error)

        threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=90)
        assert not any(t.is_alive() for t in threads), 'prepare deadlocked'
        assert failures  # Failures happened, and were raised rather than hanging.
        assert dataset.cache_usage == dataset.streams[0].get_index_size() + sum(
            dataset.shards[i].get_raw_size() for i in range(3) if dataset.cache.is_local(i))
    finally:
        register_backend('', LocalBackend)


@pytest.mark.filterwarnings('ignore:predownload=0')
def test_a_dead_preparer_is_detected(counted_remote, tmp_path) -> None:
    dataset = StreamingDataset(remote=counted_remote, local=str(tmp_path / 'cache'),
                               batch_size=4, **BY_HAND)
    # As if a process had claimed shard 2 and been killed before finishing (its flock is gone).
    dataset.cache.states[2] = PREPARING
    dataset.cache._add_usage(dataset.shards[2].get_max_size())
    first = int(dataset.sample_offset_per_shard[2])
    assert dataset[first]['id'] == first
    assert dataset.cache_usage == dataset.streams[0].get_index_size() + \
        dataset.shards[2].get_raw_size()


def test_corrupt_cached_shard_is_fetched_again_with_validate_hash(tmp_path) -> None:
    remote = str(tmp_path / 'remote')
    with MDSWriter(out=remote, columns={'id': 'int'}, hashes=['sha1'], size_limit=1 << 10) as w:
        for i in range(300):
            w.write({'id': i})
    local = tmp_path / 'cache'
    first = StreamingDataset(remote=remote, local=str(local), batch_size=4)
    assert sorted(s['id'] for s in first) == list(range(300))
    shard = local / 'shard.00001.mds'
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # The last byte of the last sample's id: same size, wrong content.
    shard.write_bytes(bytes(data))
    trusting = StreamingDataset(remote=remote, local=str(local), batch_size=4)
    assert sorted(s['id'] for s in trusting) != list(range(300))  # Size-only check: served.
    checking = StreamingDataset(remote=remote, local=str(local), batch_size=4,
                                validate_hash='sha1')
    assert sorted(s['id'] for s in checking) == list(range(300))


@pytest.mark.filterwarnings('ignore:predownload=0')
def test_a_download_ahead_fits_only_where_evicting_passed_shards_makes_room(tmp_path) -> None:
    """Compressed shards take raw + zip while prepared, raw once prepared: evicting a shard
    every reader is past frees its raw bytes only. ``room_for_ahead`` must reckon so, or the
    download it admits evicts a shard a reader still needs."""
    remote = write_ids(str(tmp_path / 'remote'), 400, size_limit=1 << 13, payload=512,
                       compression='zstd')  # Random payloads: zip about as large as raw.
    whole = StreamingDataset(local=remote, batch_size=4, **BY_HAND)
    shards = whole.shards
    held = [shards[i].get_raw_size() for i in range(6)]
    peak = shards[6].get_max_size()
    assert peak - shards[6].get_raw_size() > peak // 3  # A zip worth counting.
    dataset = StreamingDataset(remote=remote, local=str(tmp_path / 'cache'), batch_size=4,
                               **BY_HAND)
    cache = dataset.cache
    before = cache.usage  # The index.
    for shard in range(6):
        cache.ready(shard)  # Read: touched, still needed.
    assert cache.usage == before + sum(held)
    limit = dataset.cache_limit = cache.usage + (peak - shards[6].get_raw_size()) // 2
    cache.mark_passed(0)
    # Evicting shard 0 frees held[0]: shard 6 at its peak does not fit beside the others.
    assert cache.usage - held[0] + peak > limit
    assert not cache.room_for_ahead(peak)
    cache.mark_passed(1)
    assert cache.usage - held[0] - held[1] + peak <= limit
    assert cache.room_for_ahead(peak)
    cache.prepare(6)  # Fetched ahead where there is room: takes the passed shards only.
    assert [cache.is_local(shard) for shard in range(7)] == [False, False] + [True] * 5
