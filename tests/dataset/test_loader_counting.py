"""StreamingDataLoader counts samples as the collate function receives them, whatever it returns."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from streaming import StreamingDataLoader, StreamingDataset
from tests.dataset.conftest import write_ids


class Opaque:
    """A batch type the loader knows nothing about."""

    def __init__(self, samples: list[dict[str, Any]]) -> None:
        self.ids = [int(s['id']) for s in samples]


def _ids(batch: Any) -> list[int]:
    if isinstance(batch, Opaque):
        return batch.ids
    if isinstance(batch, list):
        return [int(s['id']) for s in batch]
    return batch['id'].tolist()


@pytest.mark.parametrize('collate_fn', [list, Opaque, None])
@pytest.mark.parametrize('num_workers', [0, 2])
def test_resume_after_any_collate_fn_reads_each_sample_once(tmp_path, collate_fn,
                                                            num_workers) -> None:
    remote = write_ids(os.path.join(tmp_path, 'remote'), 100)
    kwargs = {'batch_size': 10, 'num_workers': num_workers}
    if collate_fn is not None:
        kwargs['collate_fn'] = collate_fn

    def loader() -> StreamingDataLoader:
        dataset = StreamingDataset(remote=remote, local=str(tmp_path / 'local'), batch_size=10)
        return StreamingDataLoader(dataset, **kwargs)

    first = loader()
    seen: list[int] = []
    for step, batch in enumerate(first):
        assert collate_fn is None or isinstance(batch, collate_fn)
        seen += _ids(batch)
        if step == 2:
            break
    state = first.state_dict()
    assert state['sample_in_epoch'] == 30
    second = loader()
    second.load_state_dict(state)
    for batch in second:
        seen += _ids(batch)
    assert sorted(seen) == list(range(100))
    assert second.num_samples_yielded == 70


@pytest.mark.filterwarnings('ignore:.*pin_memory')  # Without an accelerator pinning is a no-op.
def test_pin_memory_loader_counts_and_unwraps_batches(tmp_path) -> None:
    remote = write_ids(os.path.join(tmp_path, 'remote'), 40)
    dataset = StreamingDataset(remote=remote, local=str(tmp_path / 'local'), batch_size=8)
    loader = StreamingDataLoader(dataset, batch_size=8, pin_memory=True)
    batches = list(loader)
    assert all(isinstance(b['id'], torch.Tensor) for b in batches)
    assert loader.num_samples_yielded == 40


class _Numbers(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(7))


def test_without_automatic_batching_every_item_counts_as_one_sample(tmp_path) -> None:
    # batch_size=None: the loader yields samples, not batches (a plain int has no len()).
    plain = StreamingDataLoader(_Numbers(), batch_size=None)
    assert list(plain) == list(range(7))
    assert plain.num_samples_yielded == 7
    remote = write_ids(os.path.join(tmp_path, 'remote'), 30)
    dataset = StreamingDataset(remote=remote, local=str(tmp_path / 'local'), batch_size=1)
    first = StreamingDataLoader(dataset, batch_size=None)
    seen = []
    for sample in first:
        seen.append(int(sample['id']))
        if len(seen) == 12:
            break
    state = first.state_dict()
    assert state['sample_in_epoch'] == 12
    second = StreamingDataLoader(StreamingDataset(remote=remote, local=str(tmp_path / 'local'),
                                                  batch_size=1), batch_size=None)
    second.load_state_dict(state)
    seen += [int(sample['id']) for sample in second]
    assert sorted(seen) == list(range(30))
