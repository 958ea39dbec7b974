"""``StreamingDataLoader`` keeps its workers from one whole epoch to the next (by default).

Real DataLoader workers in real processes. The samples of every epoch equal those of fresh
workers (``persistent_workers=False``); an epoch broken off, a dataset attribute rebound or a
second iteration at once gets fresh workers; the user's own choices are left alone.
"""

from __future__ import annotations

import gc
import os

import pytest
from torch.utils.data import get_worker_info

from streaming import StreamingDataLoader, StreamingDataset
from streaming.coord.shared_dir import start_time
from streaming.dataset import handoff
from tests.dataset.conftest import write_ids

SAMPLES = 480


@pytest.fixture
def ids_dir(tmp_path) -> str:
    return write_ids(str(tmp_path / 'ids'), SAMPLES, payload=2_000, size_limit=1 << 14)


def _loader(path: str, **kwargs) -> StreamingDataLoader:
    dataset = StreamingDataset(local=path, batch_size=8, shuffle=True)
    return StreamingDataLoader(dataset, batch_size=8, num_workers=2, **kwargs)


def _worker_pids(loader: StreamingDataLoader) -> list[tuple[int, str | None]]:
    """The loader's workers: (pid, start time), which a reused pid does not match."""
    return [(worker.pid, start_time(worker.pid)) for worker in loader._iterator._workers]


def _alive(worker: tuple[int, str | None]) -> bool:
    """Whether that worker runs (an exited, unreaped one does not)."""
    pid, started = worker
    return started is not None and start_time(pid) == started


def _epochs(loader: StreamingDataLoader, count: int) -> tuple[list[list[int]], list]:
    """The ids of ``count`` whole epochs, and the workers' pids after each."""
    epochs, pids = [], []
    for _ in range(count):
        epochs.append([i for batch in loader for i in batch['id'].tolist()])
        pids.append(None if loader._iterator is None else _worker_pids(loader))
    return epochs, pids


def test_whole_epochs_keep_the_workers_and_the_samples(ids_dir, tmp_path) -> None:
    kept = _loader(ids_dir)
    assert kept.persistent_workers
    epochs, pids = _epochs(kept, 3)
    assert pids[0] is not None and pids[0] == pids[1] == pids[2]  # The same two processes.
    assert all(_alive(worker) for worker in pids[0])
    assert all(sorted(ids) == list(range(SAMPLES)) for ids in epochs)
    assert len({tuple(ids) for ids in epochs}) == 3  # A new order every epoch.
    assert handoff.mapped_rings() == 0  # Each epoch's last batches let the rings go.
    del kept
    gc.collect()
    # Fresh workers every epoch (torch's default), another copy of the dataset: same samples.
    copy = write_ids(str(tmp_path / 'copy'), SAMPLES, payload=2_000, size_limit=1 << 14)
    fresh = _loader(copy, persistent_workers=False)
    assert not fresh.persistent_workers
    fresh_epochs, fresh_pids = _epochs(fresh, 3)
    assert fresh_pids == [None, None, None]
    assert fresh_epochs == epochs


def test_a_broken_off_epoch_lets_its_workers_go(ids_dir) -> None:
    loader = _loader(ids_dir)
    seen = []
    for step, batch in enumerate(loader):
        seen.extend(batch['id'].tolist())
        if step == 0:
            pids = _worker_pids(loader)
        if step == 2:
            break
    assert loader._iterator is None
    assert not any(_alive(worker) for worker in pids)
    assert handoff.mapped_rings() == 0
    # Resumed from where it stopped, by new workers; then whole epochs go on as usual.
    loader.load_state_dict(loader.state_dict())
    rest = [i for batch in loader for i in batch['id'].tolist()]
    assert sorted(seen + rest) == list(range(SAMPLES))
    epochs, _ = _epochs(loader, 1)
    assert sorted(epochs[0]) == list(range(SAMPLES))


class _Shifted(StreamingDataset):
    """Ids moved by ``shift``, read in the workers."""

    shift = 0

    def get_item(self, sample_id: int) -> dict:
        sample = super().get_item(sample_id)
        sample['id'] += self.shift
        return sample


def test_a_rebound_dataset_attribute_gets_fresh_workers(ids_dir) -> None:
    dataset = _Shifted(local=ids_dir, batch_size=8, shuffle=True)
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2)
    first, pids = _epochs(loader, 1)
    assert sorted(first[0]) == list(range(SAMPLES))
    dataset.shift = 10_000  # Kept workers would still hold 0.
    second, new_pids = _epochs(loader, 1)
    assert sorted(second[0]) == list(range(10_000, 10_000 + SAMPLES))
    assert set(new_pids[0]).isdisjoint(pids[0])
    assert not any(_alive(worker) for worker in pids[0])


def test_two_iterations_at_once_equal_fresh_workers(ids_dir, tmp_path) -> None:
    def interleaved(loader: StreamingDataLoader) -> tuple[list[int], list[int]]:
        outer = iter(loader)
        first = next(outer)['id'].tolist()
        inner = [i for batch in loader for i in batch['id'].tolist()]
        first += [i for batch in outer for i in batch['id'].tolist()]
        return first, inner

    kept = interleaved(_loader(ids_dir))
    gc.collect()
    copy = write_ids(str(tmp_path / 'copy'), SAMPLES, payload=2_000, size_limit=1 << 14)
    fresh = interleaved(_loader(copy, persistent_workers=False))
    assert kept == fresh
    assert handoff.mapped_rings() == 0


def _init(worker_id: int) -> None:
    assert get_worker_info().id == worker_id


def test_the_users_choices_are_left_alone(ids_dir, monkeypatch) -> None:
    assert not _loader(ids_dir, worker_init_fn=_init).persistent_workers
    assert not _loader(ids_dir, persistent_workers=False).persistent_workers
    dataset = StreamingDataset(local=ids_dir, batch_size=8)
    assert not StreamingDataLoader(dataset, batch_size=8).persistent_workers  # No workers.
    monkeypatch.setenv('STREAMING_REUSE_WORKERS', '0')
    assert not _loader(ids_dir).persistent_workers
    monkeypatch.delenv('STREAMING_REUSE_WORKERS')
    # Asked for: torch's persistent workers, kept even when an epoch is broken off.
    loader = _loader(ids_dir, persistent_workers=True)
    for step, _ in enumerate(loader):
        if step == 1:
            break
    pids = _worker_pids(loader)
    assert all(_alive(worker) for worker in pids)
    assert os.getpid() not in [pid for pid, _ in pids]
    epochs, after = _epochs(loader, 1)
    assert after[0] == pids


def test_a_resume_point_loaded_between_whole_epochs_reaches_kept_workers(ids_dir) -> None:
    loader = _loader(ids_dir)
    epoch = []
    for step, batch in enumerate(loader):
        epoch.extend(batch['id'].tolist())
        if step == 2:
            state = loader.state_dict()  # After 24 samples; the epoch goes on to its end.
    pids = _worker_pids(loader)
    loader.load_state_dict(state)
    resumed = [i for batch in loader for i in batch['id'].tolist()]
    assert _worker_pids(loader) == pids  # The same workers read the resumed epoch.
    assert resumed == epoch[24:]
