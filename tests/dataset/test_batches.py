"""Batches fetched at once through a torch DataLoader: the same batches as torch's per-sample
fetch and the default collate; any collate_fn; telemetry counts."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset
from tests.dataset.conftest import write_ids


def _equal(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _equal(a[key], b[key])
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _equal(x, y)
    else:
        assert a == b


@pytest.fixture
def mixed(tmp_path) -> str:
    """int, str and bytes columns (the gathered encodings) in several shards."""
    out = str(tmp_path / 'mixed')
    with MDSWriter(out=out, columns={'id': 'int', 'text': 'str', 'blob': 'bytes'},
                   size_limit=1 << 12) as writer:
        for i in range(700):
            writer.write({'id': i - 300, 'text': 'é' * (i % 7) + str(i),
                          'blob': bytes([i % 256]) * (i % 50)})
    return out


def _loader_batches(monkeypatch, path: str, batched: bool, **kwargs) -> list:
    monkeypatch.setenv('STREAMING_BATCH_FETCH', '1' if batched else '0')
    dataset = StreamingDataset(local=path, batch_size=32)
    return list(DataLoader(dataset, **kwargs))


@pytest.mark.parametrize('workers', [0, 2])
@pytest.mark.parametrize('kwargs', [
    {'batch_size': 32}, {'batch_size': 48, 'drop_last': True},
    {'batch_size': 32, 'collate_fn': lambda batch: batch},
    {'batch_size': 16, 'collate_fn': lambda batch: [s['id'] for s in batch]},
    {'batch_size': None}])
def test_same_batches_as_torch_per_sample_fetch(monkeypatch, mixed, workers, kwargs) -> None:
    got = _loader_batches(monkeypatch, mixed, True, num_workers=workers, **kwargs)
    want = _loader_batches(monkeypatch, mixed, False, num_workers=workers, **kwargs)
    assert got
    _equal(got, want)


def test_shuffled_batches_equal_default_collate_of_their_samples(tmp_path) -> None:
    path = write_ids(str(tmp_path / 'ids'), 900)
    dataset = StreamingDataset(local=path, batch_size=64, shuffle=True)
    seen = []
    for batch in DataLoader(dataset, batch_size=64):
        ids = batch['id'].tolist()
        _equal(batch, default_collate([dataset[i] for i in ids]))
        seen += ids
    assert sorted(seen) == list(range(900))


def test_other_encodings_and_subclasses_fall_back(tmp_path) -> None:
    out = str(tmp_path / 'arr')
    with MDSWriter(out=out, columns={'x': 'ndarray:float32:3', 'n': 'int'}) as writer:
        for i in range(50):
            writer.write({'x': np.full(3, i, np.float32), 'n': i})

    class Doubled(StreamingDataset):
        def get_item(self, sample_id: int, retry: int = 7):
            sample = super().get_item(sample_id, retry)
            return {'n': sample['n'] * 2}

    batches = list(DataLoader(StreamingDataset(local=out, batch_size=8), batch_size=8))
    assert torch.equal(torch.cat([b['x'] for b in batches])[:, 0], torch.arange(50.0))
    doubled = list(DataLoader(Doubled(local=out, batch_size=8), batch_size=8))
    assert torch.cat([b['n'] for b in doubled]).tolist() == list(range(0, 100, 2))


_COLLATE_ARRAYS = '''
import sys
import numpy as np
from torch.utils.data import DataLoader
from streaming import StreamingDataset
batches = list(DataLoader(StreamingDataset(local=sys.argv[1], batch_size=8), batch_size=8))
assert [b['x'][0, 0].item() for b in batches] == list(range(0, 24, 8))
assert [b['y'][:, 1].tolist() for b in batches] == [list(range(k + 1, k + 9)) for k in (0, 8, 16)]
'''


def test_array_columns_reach_torch_writable_without_a_warning(tmp_path) -> None:
    """torch warns (once per process) of a non-writable array it makes a tensor of: none is."""
    import subprocess
    import sys
    out = str(tmp_path / 'arr')
    with MDSWriter(out=out, columns={'x': 'ndarray:float32:3', 'y': 'ndarray'}) as writer:
        for i in range(24):
            writer.write({'x': np.full(3, i, np.float32), 'y': np.arange(i, i + 2)})
    sample = StreamingDataset(local=out, batch_size=8)[5]
    assert sample['x'].flags.writeable and sample['x'].tolist() == [5.0] * 3
    assert sample['y'].flags.writeable and sample['y'].tolist() == [5, 6]
    # A fresh process: the warning is given once per process, maybe already by another test.
    run = subprocess.run([sys.executable, '-W', 'error:The given NumPy array is not writable',
                          '-c', _COLLATE_ARRAYS, out], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize('workers', [0, 2])
def test_stats_count_steps_and_worker_time(tmp_path, caplog, workers) -> None:
    path = write_ids(str(tmp_path / 'ids'), 640)
    dataset = StreamingDataset(local=path, batch_size=32)
    loader = StreamingDataLoader(dataset, batch_size=32, num_workers=workers, log_every=5)
    with caplog.at_level(logging.INFO, logger='streaming.loader'):
        batches = list(loader)
    stats = loader.stats.summary()
    assert stats['steps'] == len(batches) == 20
    assert 0 < stats['max_wait_s'] <= stats['wait_s']
    workers_rows = stats['workers']
    assert len(workers_rows) == max(workers, 1)
    assert sum(w['samples'] for w in workers_rows) == 640
    assert sum(w['batches'] for w in workers_rows) == 20
    assert all(w['read_s'] > 0 for w in workers_rows)
    assert len([r for r in caplog.records if r.name == 'streaming.loader']) == 4
    assert 'steps=20' in loader.stats.log_line()
    loader.stats.reset()
    assert loader.stats.summary()['steps'] == 0


class _Positions:
    """Records what a reader reports to the node's schedule (the ``Progress`` API: advance,
    stop); a stand-in only so that the reports can be read back in order."""

    def __init__(self) -> None:
        self.reported: list[int] = []
        self.stopped = False

    def advance(self, position: int) -> None:
        self.reported.append(position)

    def stop(self) -> None:
        self.stopped = True


def test_a_batch_reports_its_first_sample_before_reading_it() -> None:
    """The schedule marks a shard done with once every reader is past its last use; a batch
    about to be read must report its own first sample, not the position past it, or the shards
    it is about to read look done with and are evicted first."""
    from streaming.dataset.batches import SampleStream
    shard_starts = np.array([0, 4, 8, 12])
    ids = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -1])  # -1: padding.
    progress = _Positions()
    stream = SampleStream(ids, shard_starts, cache=None, get=lambda i: i,  # type: ignore
                          fast=False, prefetcher=progress)  # type: ignore[arg-type]
    taken = []
    while True:
        shards, indices = stream.take(5)
        if not len(shards):
            break
        taken.append(stream.read(shards, indices))
    assert taken == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10]]
    assert progress.reported == [0, 5, 10]  # Each batch's first position, read after.
    assert progress.stopped


def test_loader_index_sampler_yields_what_torch_batch_sampler_does(mixed) -> None:
    """StreamingDataLoader hands the fetcher the same batch "indices" as torch, more cheaply."""
    import itertools

    from torch.utils.data import BatchSampler

    dataset = StreamingDataset(local=mixed, batch_size=32)
    for drop_last in (False, True):
        ours = StreamingDataLoader(dataset, batch_size=32, drop_last=drop_last)
        torch_own = DataLoader(dataset, batch_size=32, drop_last=drop_last)
        assert type(torch_own._index_sampler) is BatchSampler
        assert type(ours._index_sampler) is not BatchSampler
        assert list(itertools.islice(ours._index_sampler, 5)) == \
            list(itertools.islice(torch_own._index_sampler, 5))
    # A map-style dataset keeps torch's own sampler.
    assert type(StreamingDataLoader(list(range(10)), batch_size=4)._index_sampler) is BatchSampler
