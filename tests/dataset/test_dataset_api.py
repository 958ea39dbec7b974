"""StreamingDataset's API in one process: construction, random access, iteration, resumption."""

from __future__ import annotations

import os
import time
from contextlib import nullcontext

import numpy as np
import pytest

from streaming import MDSWriter, Stream, StreamingDataLoader, StreamingDataset, World
from tests.dataset.conftest import write_ids


def test_sizes_and_random_access(remote_ids, tmp_path) -> None:
    dataset = StreamingDataset(remote=remote_ids, local=str(tmp_path / 'c'), batch_size=4)
    assert dataset.size == len(dataset) == 960
    assert dataset[0]['id'] == 0 and dataset[-1]['id'] == 959
    assert [s['id'] for s in dataset[10:13]] == [10, 11, 12]
    assert [s['id'] for s in dataset[np.array([5, 900])]] == [5, 900]
    with pytest.raises(IndexError):
        dataset[960]


def test_iteration_uses_a_subclass_override(remote_ids, tmp_path) -> None:
    class Doubled(StreamingDataset):
        def get_item(self, sample_id: int, retry: int = 7) -> dict:
            sample = super().get_item(sample_id, retry)
            return {'id': sample['id'] * 2}

    dataset = Doubled(remote=remote_ids, local=str(tmp_path / 'c'), batch_size=4)
    assert sorted(s['id'] for s in dataset) == list(range(0, 1920, 2))
    ids = [i for b in StreamingDataLoader(dataset, batch_size=4, num_workers=2)
           for i in b['id'].tolist()]
    assert sorted(ids) == list(range(0, 1920, 2))


def test_getitem_override_is_used_too(remote_ids, tmp_path) -> None:
    class Tagged(StreamingDataset):
        def __getitem__(self, at):  # noqa: ANN001, ANN204
            return {'tag': 'x', **super().__getitem__(at)}

    dataset = Tagged(remote=remote_ids, local=str(tmp_path / 'c'), batch_size=4)
    assert all(s['tag'] == 'x' for s in dataset)


def test_load_state_dict_after_iterating_takes_effect(remote_ids, tmp_path) -> None:
    dataset = StreamingDataset(remote=remote_ids, local=str(tmp_path / 'c'), batch_size=8,
                               shuffle=True)
    loader = StreamingDataLoader(dataset, batch_size=8)
    full = [b['id'].tolist() for b in loader]  # Epoch 0, all of it.
    list(loader)  # Epoch 1.
    loader.load_state_dict({'epoch': 0, 'sample_in_epoch': 80, 'num_canonical_nodes': 1,
                            'shuffle_seed': 9176, 'initial_physical_nodes': 1})
    resumed = [b['id'].tolist() for b in loader]
    assert resumed == full[10:]
    assert [b['id'].tolist() for b in loader] != full  # Then on to epoch 1.


def test_state_dict_counts_yielded_samples(remote_ids, tmp_path) -> None:
    dataset = StreamingDataset(remote=remote_ids, local=str(tmp_path / 'c'), batch_size=8)
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2)
    for i, _ in enumerate(loader):
        if i == 4:
            break
    state = loader.state_dict()
    assert state == {'epoch': 0, 'sample_in_epoch': 40, 'num_canonical_nodes': 1,
                     'shuffle_seed': 9176, 'initial_physical_nodes': 1}


def test_streams_mix_by_proportion_and_choose(tmp_path) -> None:
    a = write_ids(str(tmp_path / 'a'), 100)
    b = write_ids(str(tmp_path / 'b'), 300, start=1000)
    dataset = StreamingDataset(streams=[Stream(local=a, choose=50), Stream(local=b, repeat=2)],
                               batch_size=10, shuffle=True)
    ids = [s['id'] for s in dataset]
    assert len(dataset) == len(ids) == 650
    assert sum(i < 1000 for i in ids) == 50 and sum(i >= 1000 for i in ids) == 600
    mixed = StreamingDataset(streams=[Stream(local=a, proportion=0.5),
                                      Stream(local=b, proportion=0.5)], epoch_size='200',
                             batch_size=10)
    ids = [s['id'] for s in mixed]
    assert sum(i < 1000 for i in ids) == 100 and len(ids) == 200


def test_explicit_world(remote_ids, tmp_path) -> None:
    halves = []
    for rank in range(2):
        world = World(rank=rank, world_size=2, local_rank=0, local_world_size=1)
        dataset = StreamingDataset(remote=remote_ids, local=str(tmp_path / f'c{rank}'),
                                   batch_size=4, world=world)
        halves.append([s['id'] for s in dataset])
    assert len(halves[0]) == len(halves[1]) == 480
    assert sorted(halves[0] + halves[1]) == list(range(960))


def test_pickled_columns_need_allow_unsafe_types(tmp_path) -> None:
    out = str(tmp_path / 'pkl')
    with MDSWriter(out=out, columns={'obj': 'pkl'}) as writer:
        writer.write({'obj': {'a': 1}})
    with pytest.raises(ValueError, match='allow_unsafe_types'):
        StreamingDataset(local=out, batch_size=1)
    dataset = StreamingDataset(local=out, batch_size=1, allow_unsafe_types=True)
    assert dataset[0]['obj'] == {'a': 1}


@pytest.mark.parametrize('kwargs,names', [
    ({'shuffle_algo': 'py3'}, 'shuffle_algo'),
    ({'partition_algo': 'x'}, 'partition_algo'),
    ({'sampling_method': 'x'}, 'sampling_method'),
    ({'batching_method': 'x'}, 'batching_method'),
    ({'shuffle_seed': -1}, 'shuffle_seed'),
    ({'sampling_granularity': 0}, 'sampling_granularity'),
    ({'epoch_size': -5}, 'epoch_size'),
    ({'epoch_size': 'lots'}, 'epoch_size'),
    ({'batch_size': 0}, 'batch_size'),
    ({'num_canonical_nodes': 0}, 'num_canonical_nodes'),
    ({'cache_limit': 'big'}, 'cache_limit'),
])
def test_bad_parameters_name_themselves(remote_ids, tmp_path, kwargs, names) -> None:
    with pytest.raises(ValueError, match=names):
        StreamingDataset(remote=remote_ids, local=str(tmp_path / 'c'), **kwargs)


def test_contradictory_sources(remote_ids, tmp_path) -> None:
    with pytest.raises(ValueError, match='streams'):
        StreamingDataset(streams=[Stream(local=remote_ids)], remote=remote_ids)
    with pytest.raises(ValueError, match='remote'):
        StreamingDataset()
    with pytest.raises(ValueError, match='at most one of proportion, repeat and choose'):
        Stream(local=remote_ids, proportion=0.5, choose=3)


def test_missing_index_names_the_path(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / 'nothing')):
        StreamingDataset(local=str(tmp_path / 'nothing'), batch_size=1)


def test_iteration_needs_batch_size(remote_ids, tmp_path) -> None:
    dataset = StreamingDataset(remote=remote_ids, local=str(tmp_path / 'c'))
    assert dataset[3]['id'] == 3  # Random access works without it.
    with pytest.raises(ValueError, match='batch_size'):
        next(iter(dataset))


@pytest.mark.parametrize('algo', ['py1e', 'py1s', 'py2s', 'py1br', 'naive'])
def test_stream_smaller_than_canonical_nodes_still_covers_each_sample(tmp_path, algo) -> None:
    local = write_ids(str(tmp_path / 'tiny'), 5)
    dataset = StreamingDataset(local=local, batch_size=1, num_canonical_nodes=16,
                               shuffle=True, shuffle_algo=algo)
    # As in the reference (whose order we give exactly), canonical node c reads sample c % 5.
    with pytest.warns(UserWarning, match='canonical nodes') if algo != 'py1br' else nullcontext():
        assert set(s['id'] for s in dataset) == set(range(5))


def test_no_state_left_in_shared_memory_after_exit(remote_ids, tmp_path) -> None:
    import subprocess
    import sys
    code = ('from streaming import StreamingDataset as D; import sys; '
            f'd = D(remote={remote_ids!r}, local={str(tmp_path / "c")!r}, batch_size=4); '
            'print(d._shared.path); sum(1 for _ in d)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out and not os.path.exists(out)


def test_coordination_timeout_is_its_own_setting(remote_ids, tmp_path, monkeypatch) -> None:
    from streaming.dataset.config import DEFAULT_COORDINATION_TIMEOUT
    monkeypatch.delenv('STREAMING_COORDINATION_TIMEOUT', raising=False)
    dataset = StreamingDataset(remote=remote_ids, local=str(tmp_path / 'c'), download_timeout=1)
    assert dataset.config.coordination_timeout == DEFAULT_COORDINATION_TIMEOUT  # Not 4 x 1 s.
    follower = World(rank=1, world_size=2, local_rank=1, local_world_size=2)  # No leader runs.
    for kwargs, env in (({'coordination_timeout': 0.4}, None), ({}, '0.4')):
        if env:
            monkeypatch.setenv('STREAMING_COORDINATION_TIMEOUT', env)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match='coordination_timeout'):
            StreamingDataset(local=remote_ids, world=follower, **kwargs)
        assert time.monotonic() - started < 10
    monkeypatch.setenv('STREAMING_COORDINATION_TIMEOUT', 'soon')
    with pytest.raises(ValueError, match='STREAMING_COORDINATION_TIMEOUT'):
        StreamingDataset(local=remote_ids)
    with pytest.raises(ValueError, match='coordination_timeout'):
        StreamingDataset(local=remote_ids, coordination_timeout=0)


def test_settings_are_attributes_read_from_one_config(remote_ids, tmp_path) -> None:
    with pytest.warns(UserWarning, match='shuffle_block_size'):  # Capped by the cache.
        dataset = StreamingDataset(remote=remote_ids, local=str(tmp_path / 'c'), batch_size=4,
                                   shuffle=True, cache_limit='1mb', epoch_size=500)
    config = dataset.config
    assert (dataset.batch_size, dataset.predownload, dataset.shuffle, dataset.shuffle_algo,
            dataset.cache_limit) == (4, 32, True, 'py1e', 1 << 20) == \
        (config.batch_size, config.predownload, config.shuffle, config.shuffle_algo,
         config.cache_limit)
    assert dataset.epoch_size == 500 and config.epoch_size == 500
    assert dataset.num_canonical_nodes == 1 and config.num_canonical_nodes is None  # Default.
    # As in the reference, settings may be assigned; the value is validated like the argument
    # and replaces the config (which stays frozen), re-defaulting predownload with batch_size.
    dataset.batch_size = 8
    assert (dataset.batch_size, dataset.predownload) == (8, 64) and config.batch_size == 4
    with pytest.raises(ValueError, match='batch_size'):
        dataset.batch_size = 0
    with pytest.raises(AttributeError, match='replication'):
        dataset.replication = 2
    config = dataset.config
    # The values resumption adopts change in one place, ``resumable``.
    dataset.load_state_dict({'epoch': 2, 'sample_in_epoch': 0, 'num_canonical_nodes': 3,
                             'shuffle_seed': 5, 'initial_physical_nodes': 1})
    assert (dataset.num_canonical_nodes, dataset.shuffle_seed, dataset.initial_physical_nodes) \
        == (3, 5, 1) == (dataset.resumable.num_canonical_nodes, dataset.resumable.shuffle_seed,
                         dataset.resumable.initial_physical_nodes)
    assert config.shuffle_seed == 9176  # The configuration itself never changes.


def _wait_until(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.02)


def test_a_given_predownload_counts_even_when_it_equals_the_default(remote_ids, tmp_path):
    """``predownload=64`` with ``batch_size=8`` is the default's value, but written out it is
    what the user asked for: the node's downloads stop 64 samples ahead of the readers (none
    yet), where left out the lookahead is bounded by bytes only and every shard is fetched."""
    from streaming.cache.shard_cache import LOCAL

    def built(name: str, **predownload: int) -> StreamingDataset:
        return StreamingDataset(remote=remote_ids, local=str(tmp_path / name), batch_size=8,
                                **predownload)

    defaulted = built('defaulted')
    assert defaulted.predownload == 64 and not defaulted.config.predownload_given
    _wait_until(lambda: bool((defaulted.cache.states == LOCAL).all()))

    given = built('given', predownload=64)
    assert given.predownload == 64 and given.config.predownload_given
    needed = int(np.searchsorted(given.sample_offset_per_shard, 64, side='left'))  # Samples < 64.
    assert 0 < needed < given.num_shards
    _wait_until(lambda: bool((given.cache.states[:needed] == LOCAL).all()))
    time.sleep(0.5)  # Time to fetch more, were the lookahead not bounded.
    assert int((given.cache.states == LOCAL).sum()) == needed

    # A given value also stays given when batch_size changes; a defaulted one follows it.
    given.batch_size = defaulted.batch_size = 16
    assert (given.predownload, defaulted.predownload) == (64, 128)
    assert given.config.predownload_given and not defaulted.config.predownload_given
