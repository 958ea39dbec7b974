"""DataLoader workers: fork and spawn start methods, persistent workers, batching methods."""

from __future__ import annotations

import pytest

from streaming import Stream, StreamingDataLoader, StreamingDataset
from tests.dataset.conftest import write_ids


@pytest.mark.parametrize('context', ['fork', 'spawn'])
@pytest.mark.parametrize('persistent', [False, True])
def test_epochs_with_start_methods_and_persistent_workers(remote_ids, tmp_path, context,
                                                          persistent) -> None:
    dataset = StreamingDataset(remote=remote_ids, local=str(tmp_path / 'c'), batch_size=8,
                               shuffle=True)
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2,
                                 multiprocessing_context=context, persistent_workers=persistent)
    epochs = [[i for b in loader for i in b['id'].tolist()] for _ in range(3)]
    for ids in epochs:
        assert sorted(ids) == list(range(960))
    assert len({tuple(ids) for ids in epochs}) == 3  # A new order every epoch.
    # The same epochs as a single-process pass, because the order ignores the worker count.
    single = StreamingDataset(remote=remote_ids, local=str(tmp_path / 'c2'), batch_size=8,
                              shuffle=True)
    first = [i for b in StreamingDataLoader(single, batch_size=8) for i in b['id'].tolist()]
    assert first == epochs[0]


def test_file_url_remote(tmp_path) -> None:
    remote = write_ids(str(tmp_path / 'remote'), 100, compression='zstd')
    dataset = StreamingDataset(remote=f'file://{remote}', local=str(tmp_path / 'c'),
                               batch_size=4)
    assert sorted(s['id'] for s in dataset) == list(range(100))


@pytest.fixture
def two_streams(tmp_path) -> list[Stream]:
    a = write_ids(str(tmp_path / 'a'), 320)
    b = write_ids(str(tmp_path / 'b'), 960, start=10_000)
    return [Stream(local=a), Stream(local=b)]


def _batches(dataset: StreamingDataset, batch_size: int) -> list[list[int]]:
    return [b['id'].tolist() for b in StreamingDataLoader(dataset, batch_size=batch_size)]


def test_per_stream_batches_come_from_one_stream(two_streams) -> None:
    dataset = StreamingDataset(streams=two_streams, batch_size=16, shuffle=True,
                               batching_method='per_stream')
    batches = _batches(dataset, 16)
    assert batches and all(len({i >= 10_000 for i in b}) == 1 for b in batches)
    assert {b[0] >= 10_000 for b in batches} == {False, True}


def test_device_per_stream_batches_come_from_one_stream(two_streams) -> None:
    dataset = StreamingDataset(streams=two_streams, batch_size=16, shuffle=True,
                               batching_method='device_per_stream')
    batches = _batches(dataset, 16)
    assert batches and all(len({i >= 10_000 for i in b}) == 1 for b in batches)


def test_stratified_batches_keep_the_proportions(two_streams) -> None:
    dataset = StreamingDataset(streams=two_streams, batch_size=16, shuffle=True,
                               batching_method='stratified')
    batches = _batches(dataset, 16)
    assert batches and all(sum(i < 10_000 for i in b) == 4 for b in batches)  # 320:960 = 1:3


def test_random_batching_mixes_streams(two_streams) -> None:
    dataset = StreamingDataset(streams=two_streams, batch_size=16, shuffle=True)
    ids = [i for b in _batches(dataset, 16) for i in b]
    assert sorted(ids) == list(range(320)) + list(range(10_000, 10_960))
    assert any(len({i >= 10_000 for i in b}) == 2 for b in _batches(dataset, 16))


@pytest.mark.parametrize('method', ['balanced', 'fixed'])
def test_sampling_methods(two_streams, method) -> None:
    streams = [two_streams[0], Stream(local=two_streams[1].local, choose=100)]
    dataset = StreamingDataset(streams=streams, batch_size=10, shuffle=True,
                               sampling_method=method)
    loader = StreamingDataLoader(dataset, batch_size=10)
    picks = [{i for b in loader for i in b['id'].tolist() if i >= 10_000} for _ in range(2)]
    assert len(picks[0]) == len(picks[1]) == 100
    assert (picks[0] == picks[1]) == (method == 'fixed')
