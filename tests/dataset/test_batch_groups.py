"""Small batches cross from the DataLoader workers in groups (``StreamingDataLoader``).

Real DataLoader workers in real processes. With groups (the default) the user gets exactly the
batches, in exactly the order, of torch's one-batch-per-item protocol
(``STREAMING_BATCH_GROUPS=0``): 1-3 workers with uneven streams, the last partial batch,
``drop_last``, epochs that do not divide into groups, kept workers over several epochs, the
batches through the ring and inside the pickle; ``state_dict`` counts only batches yielded; a
worker's error still surfaces, no later than the batch where it happened. Groups are only for
small, default-collated batches without a ``timeout``.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader, default_collate

from streaming import StreamingDataLoader, StreamingDataset
from streaming import dataloader as loader_module
from streaming.dataset import handoff
from streaming.dataset.batches import SampleStream
from tests.dataset.conftest import write_ids
from tests.dataset.test_batches import _equal

pytestmark = pytest.mark.filterwarnings('ignore:This DataLoader will create 3 worker')

SAMPLES = 301  # Not a multiple of the batch size, nor of the workers.
BATCH = 8


@pytest.fixture(scope='module')
def small(tmp_path_factory) -> str:
    """Batches of ~0.5 KB: inside the pickle, groups of up to 16."""
    return write_ids(str(tmp_path_factory.mktemp('groups') / 'small'), SAMPLES, payload=64)


@pytest.fixture(scope='module')
def ringed(tmp_path_factory) -> str:
    """Batches of ~96 KB: through the ring, in groups of up to 10."""
    return write_ids(str(tmp_path_factory.mktemp('groups') / 'ringed'), SAMPLES,
                     payload=12_000, size_limit=1 << 16)


class _FailingDataset(StreamingDataset):
    """Raises when asked for sample ``FAILING``."""

    FAILING = 150

    def get_item(self, sample_id: int) -> Any:
        if sample_id == self.FAILING:
            raise ValueError(f'cannot read sample {sample_id}')
        return super().get_item(sample_id)


def _count_groups(monkeypatch) -> list[int]:
    """A list that grows by one per group the loader receives."""
    seen: list[int] = []
    original = loader_module._ungrouped

    def counting(items, iterator, workers):
        def watched():
            for item in items:
                if type(item) is loader_module._Group:
                    seen.append(len(item.counts))
                yield item
        return original(watched(), iterator, workers)

    monkeypatch.setattr(loader_module, '_ungrouped', counting)
    return seen


def _loader(path: str, grouped: bool, monkeypatch, dataset_cls=StreamingDataset,
            workers: int = 2, drop_last: bool = False, **kwargs) -> StreamingDataLoader:
    monkeypatch.setenv('STREAMING_BATCH_GROUPS', '1' if grouped else '0')
    dataset = dataset_cls(local=path, batch_size=BATCH, shuffle=True, shuffle_seed=3)
    return StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers,
                               drop_last=drop_last, **kwargs)


def _ids(loader: Any, epochs: int = 1) -> list[list[int]]:
    return [batch['id'].tolist() for _ in range(epochs) for batch in loader]


@pytest.mark.parametrize('workers', [1, 2, 3])
@pytest.mark.parametrize('drop_last', [False, True])
def test_the_same_batches_in_the_same_order(monkeypatch, small, workers, drop_last) -> None:
    want = _ids(_loader(small, False, monkeypatch, workers=workers, drop_last=drop_last))
    groups = _count_groups(monkeypatch)
    loader = _loader(small, True, monkeypatch, workers=workers, drop_last=drop_last)
    assert loader._batches_per_group() == loader_module.MAX_GROUP
    got = _ids(loader)
    assert got == want
    assert groups and max(groups) > 1 and sum(groups) == len(got)  # Groups did travel.
    assert loader.num_samples_yielded == sum(map(len, got))
    if drop_last:
        assert all(len(batch) == BATCH for batch in got)
    else:
        assert sorted(i for batch in got for i in batch) == list(range(SAMPLES))


@pytest.mark.parametrize('shm', ['1', '0'])
def test_kept_workers_over_epochs_through_the_ring(monkeypatch, ringed, shm) -> None:
    monkeypatch.setenv('STREAMING_BATCH_SHM', shm)
    want = _ids(_loader(ringed, False, monkeypatch), epochs=3)
    groups = _count_groups(monkeypatch)
    loader = _loader(ringed, True, monkeypatch)
    assert 4 <= loader._batches_per_group() < loader_module.MAX_GROUP  # From the bytes.
    got = _ids(loader, epochs=3)
    assert loader.persistent_workers and loader._iterator is not None  # Kept workers.
    assert got == want and max(groups) > 2
    assert handoff.mapped_rings() == 0  # Each worker's last group let its ring go.


def test_no_groups_under_a_cache_limit(monkeypatch, ringed, tmp_path) -> None:
    """A worker reading a group ahead would change which shards a ``cache_limit`` evicts
    (and so the egress): one batch per item there, the same batches."""
    outcomes = []
    for grouped in (False, True):
        monkeypatch.setenv('STREAMING_BATCH_GROUPS', '1' if grouped else '0')
        dataset = StreamingDataset(remote=ringed, local=str(tmp_path / f'cache{grouped}'),
                                   batch_size=BATCH, shuffle=True, shuffle_seed=3,
                                   cache_limit=200_000)
        loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=2)
        assert loader._batches_per_group() == 1
        outcomes.append([(b['id'].tolist(), b['payload']) for b in loader])
    assert outcomes[0] == outcomes[1]
    assert sorted(i for ids, _ in outcomes[1] for i in ids) == list(range(SAMPLES))


def test_state_dict_counts_only_the_batches_yielded(monkeypatch, small) -> None:
    """Broken off at a batch in the middle of a group (rounds of 1, 2, 4...: batches 6-13 of
    the epoch are the two workers' third groups), the state is that of the batches yielded
    (as without groups), and the resumed epoch gives the same rest."""
    states, rests = [], []
    for grouped in (False, True):
        loader = _loader(small, grouped, monkeypatch)
        for step, _ in enumerate(loader):
            if step == 9:
                break
        states.append(loader.state_dict())
        assert loader.num_samples_yielded == 10 * BATCH
        resumed = _loader(small, grouped, monkeypatch)
        resumed.load_state_dict(states[-1])
        rests.append(_ids(resumed))
    assert states[0] == states[1] and states[1]['sample_in_epoch'] == 10 * BATCH
    assert rests[0] == rests[1] and sum(map(len, rests[1])) == SAMPLES - 10 * BATCH


def test_an_epoch_broken_off_then_read_whole(monkeypatch, small) -> None:
    """Left after 7 batches (inside the third round of groups), then iterated again: the same
    batches as without groups, each time."""
    outcomes = []
    for grouped in (False, True):
        loader = _loader(small, grouped, monkeypatch)
        first = []
        for batch in loader:
            first.append(batch['id'].tolist())
            if len(first) == 7:
                break
        assert loader._iterator is None  # Fresh workers for the next iteration.
        outcomes.append((first, _ids(loader), loader.num_samples_yielded))
    assert outcomes[0] == outcomes[1]


def test_a_worker_error_surfaces_no_later(monkeypatch, small) -> None:
    """The error of the batch holding sample 150 reaches the user, with torch's worker
    traceback, after at most the batches that came before that batch without groups."""
    outcomes = []
    for grouped in (False, True):
        got: list[list[int]] = []
        with pytest.raises(ValueError, match='cannot read sample 150'):
            for batch in _loader(small, grouped, monkeypatch, _FailingDataset):
                got.append(batch['id'].tolist())
        outcomes.append(got)
    before, grouped = outcomes
    assert len(grouped) <= len(before) and grouped == before[:len(grouped)]


@pytest.mark.parametrize('kwargs', [
    {'collate_fn': lambda samples: default_collate(samples)},
    {'timeout': 60},
    {'num_workers': 0},
])
def test_no_groups_where_they_are_not_for(monkeypatch, small, kwargs) -> None:
    kwargs = dict(kwargs)
    options = {'workers': kwargs.pop('num_workers', 2), **kwargs}
    want = _ids(_loader(small, False, monkeypatch, **options))
    groups = _count_groups(monkeypatch)
    loader = _loader(small, True, monkeypatch, **options)
    assert loader._batches_per_group() == 1
    assert _ids(loader) == want and not groups


def test_a_plain_dataloader_and_unbatched_loaders_are_unchanged(monkeypatch, small) -> None:
    dataset = StreamingDataset(local=small, batch_size=BATCH, shuffle=True, shuffle_seed=3)
    plain = [b['id'].tolist() for b in DataLoader(dataset, batch_size=BATCH, num_workers=2)]
    assert plain == _ids(_loader(small, True, monkeypatch))
    unbatched = StreamingDataLoader(dataset, batch_size=None, num_workers=2)
    assert unbatched._batches_per_group() == 1
    assert sorted(sample['id'] for sample in unbatched) == list(range(SAMPLES))


def test_big_batches_are_not_grouped(monkeypatch, tmp_path) -> None:
    path = write_ids(str(tmp_path / 'big'), 40, payload=200_000, size_limit=1 << 22)
    loader = _loader(path, True, monkeypatch)
    assert loader._batches_per_group() == 1


def _order(lengths: list[int], group: int) -> tuple[list[tuple[int, int]], list[Any]]:
    """torch's batch order for workers with ``lengths`` batches, and the groups it receives."""
    order = sorted((i, w) for w, n in enumerate(lengths) for i in range(n))
    items, start, size, rounds = [], 0, 1, 0
    while start < max(lengths):
        for w, n in enumerate(lengths):
            if start < n:
                batches = [(i, w) for i in range(start, min(start + size, n))]
                items.append(loader_module._Group(w, rounds, [1] * len(batches), batches,
                                                  start + size >= n))
        start, size, rounds = start + size, min(2 * size, group), rounds + 1
    return order, items


class _Iterator:
    _num_yielded = 0
    _profile_name = 'enumerate(DataLoader)#test'


@pytest.mark.parametrize('lengths', [[9], [5, 5], [7, 3], [3, 7], [0, 4, 2], [30, 29, 1]])
@pytest.mark.parametrize('group', [2, 4, 16])
def test_groups_unpack_in_torch_order(lengths, group) -> None:
    order, items = _order(lengths, group)
    iterator, pulled = _Iterator(), []

    def arriving():
        for item in items:
            pulled.append(item.round)
            yield item

    got, waited = [], []
    for counted in loader_module._ungrouped(arriving(), iterator, len(lengths)):
        got.append(counted.batch)
        waited.append(pulled[-1])
    assert got == order and iterator._num_yielded == len(order) - len(items)
    if all(lengths):  # Each batch once its round is complete, not after the next one's first.
        rounds = {batch: item.round for item in items for batch in item.batches}
        assert waited == [rounds[batch] for batch in got]


def test_a_batch_copied_out_of_closed_maps(tmp_path) -> None:
    """A worker keeps a group's earlier batches while it reads the next, which may close the
    map of a shard evicted meanwhile (``ShardCache.ready``): ``handoff.detached`` copies a
    batch's values out of the maps first, so that the group still packs the same values."""
    path = write_ids(str(tmp_path / 'ds'), 200, payload=3_000, size_limit=1 << 14)
    dataset = StreamingDataset(local=path, batch_size=BATCH, shuffle=True)
    ids = np.random.default_rng(9).permutation(dataset.num_samples)
    stream = SampleStream(ids, dataset.sample_offset_per_shard, dataset.cache,
                          dataset.get_item, True, None)
    shards, indices = stream.take(4 * BATCH)
    runs = stream.gather(shards, indices, spans=True)
    kept = handoff.detached(runs)
    samples = [dataset[int(dataset.sample_offset_per_shard[s]) + i]
               for s, i in zip(shards.tolist(), indices.tolist())]
    for shard_id in np.unique(shards).tolist():
        dataset.cache.shards[shard_id].close()
    with pytest.raises(ValueError, match='closed'):  # What the kept spans would have read.
        handoff.pack(runs, False)
    _equal(pickle.loads(pickle.dumps(handoff.pack_group([kept], False)))[0],
           default_collate(samples))


def test_maps_of_shards_evicted_while_a_group_is_gathered_stay_open_until_it_is_packed(
        tmp_path) -> None:
    """A worker gathers a group's batches as spans of the shards' maps inside
    ``ShardCache.maps_held``: a shard evicted meanwhile (by another process of the node) and
    readied again by the next batch keeps the map the kept spans read, so the group packs the
    same values without copying them first; the maps are closed once the block ends."""
    path = write_ids(str(tmp_path / 'ds'), 200, payload=3_000, size_limit=1 << 14)
    dataset = StreamingDataset(remote=path, local=str(tmp_path / 'cache'), batch_size=BATCH,
                               shuffle=True)
    cache = dataset.cache
    ids = np.random.default_rng(9).permutation(dataset.num_samples)
    stream = SampleStream(ids, dataset.sample_offset_per_shard, cache, dataset.get_item, True,
                          None)
    with cache.maps_held():
        shards, indices = stream.take(4 * BATCH)
        runs = stream.gather(shards, indices, spans=True)
        touched = np.unique(shards).tolist()
        samples = [dataset[int(dataset.sample_offset_per_shard[s]) + i]
                   for s, i in zip(shards.tolist(), indices.tolist())]
        for shard_id in touched:
            cache.evict(shard_id)
        for shard_id in touched:  # What readying the next batch's shards does.
            cache.ready(shard_id)
        assert all(cache.shards[shard_id]._maps is not None for shard_id in touched)
        packed = handoff.pack_group([runs], False)
    _equal(pickle.loads(pickle.dumps(packed))[0], default_collate(samples))
    assert all(cache.shards[shard_id]._maps is None for shard_id in touched)  # Let go at last.
    for shard_id in touched:  # Outside the block, an eviction closes the map when next readied.
        cache.ready(shard_id).map_files()
        cache.evict(shard_id)
        cache.ready(shard_id)
        assert cache.shards[shard_id]._maps is None


def test_a_group_with_a_collated_batch_through_the_ring(tmp_path) -> None:
    """``pack_group``: gathered batches and an already collated one, in one ring slot, unpickle
    in order as the default collate of their samples."""
    path = write_ids(str(tmp_path / 'ds'), 200, payload=3_000, size_limit=1 << 14)
    dataset = StreamingDataset(local=path, batch_size=BATCH, shuffle=True)
    ids = np.random.default_rng(5).permutation(dataset.num_samples)
    stream = SampleStream(ids, dataset.sample_offset_per_shard, dataset.cache,
                          dataset.get_item, True, None)
    parts, want = [], []
    for position in range(6):
        shards, indices = stream.take(BATCH)
        samples = [dataset[int(dataset.sample_offset_per_shard[s]) + i]
                   for s, i in zip(shards.tolist(), indices.tolist())]
        want.append(default_collate(samples))
        parts.append(handoff.Collated(want[-1]) if position == 3 else
                     stream.gather(shards, indices, spans=True))
    packed = handoff.pack_group(parts, False)
    assert packed.slot is not None  # Through the ring.
    got = pickle.loads(pickle.dumps(packed))
    assert packed.slot is None  # Sent: the slot was the reader's to free.
    assert len(got) == len(want)
    for batch, expected in zip(got, want):
        _equal(batch, expected)
