"""StreamingDataLoader steps torch's iterator without its per-batch ``record_function`` only
while no profiler runs: the same batches and counts either way, and a profile still shows the
loader's steps."""

from __future__ import annotations

import os

import pytest
import torch

from streaming import StreamingDataLoader, StreamingDataset
from streaming import dataloader as loader_module
from tests.dataset.conftest import write_ids


def _ids(loader: StreamingDataLoader) -> list[list[int]]:
    return [batch['id'].tolist() for batch in loader]


@pytest.mark.parametrize('num_workers', [0, 2])
def test_same_batches_with_and_without_the_profiler(tmp_path, num_workers) -> None:
    path = write_ids(os.path.join(tmp_path, 'ds'), 300)
    dataset = StreamingDataset(local=path, batch_size=16)
    loader = StreamingDataLoader(dataset, batch_size=16, num_workers=num_workers)
    plain = _ids(loader)
    assert loader.num_samples_yielded == 300 and len(plain) == 19
    with torch.profiler.profile() as profile:
        profiled = _ids(loader)
    assert profiled == plain and loader.num_samples_yielded == 300
    steps = [event for event in profile.events() if event.name.startswith('enumerate(DataLoader)')]
    assert len(steps) >= len(plain)  # Each step recorded (the last, ending, one too).


def test_steps_are_counted_as_torch_counts_them(tmp_path, monkeypatch) -> None:
    """Taken without ``__next__``, each step still counts in the iterator (torch's length
    check and its state use the count); with the dataset's length asked, ``__next__`` runs."""
    path = write_ids(os.path.join(tmp_path, 'ds'), 100)
    loader = StreamingDataLoader(StreamingDataset(local=path, batch_size=10), batch_size=10)
    seen = []
    original = loader_module._steps

    def watching(iterator):
        seen.append(iterator)
        return original(iterator)

    monkeypatch.setattr(loader_module, '_steps', watching)
    assert len(_ids(loader)) == 10
    assert seen[-1]._num_yielded == 10
    calls = []
    base = torch.utils.data.dataloader._BaseDataLoaderIter
    next_of = base.__next__
    monkeypatch.setattr(base, '__next__', lambda self: calls.append(1) or next_of(self))
    assert len(_ids(loader)) == 10 and not calls  # Stepped without __next__.
    len(loader)  # Asks the dataset's length: torch now checks the count in __next__.
    assert len(_ids(loader)) == 10 and len(calls) == 11
