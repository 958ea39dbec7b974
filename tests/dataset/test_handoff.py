"""Batches from DataLoader workers through shared memory (streaming.dataset.handoff).

Real DataLoader workers in real processes: the batches equal torch's per-sample fetch with the
default collate; other collate functions fall back; persistent workers; nothing stays mapped
after the loader is gone or a worker is killed; resumption stays exact.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset
from streaming.coord import ring
from streaming.dataset import handoff
from streaming.dataset.batches import SampleStream
from tests.dataset.test_batches import _equal

pytestmark = pytest.mark.filterwarnings('ignore:.*pin_memory')  # No accelerator: a no-op.

SAMPLES = 120


@pytest.fixture(scope='module')
def big(tmp_path_factory) -> str:
    """Samples of 20-40 KB of bytes plus an int and a str (some long, some not ASCII), in
    shards of ~5 samples, so that batches span shards and a batch of 8 fills a ring slot."""
    out = str(tmp_path_factory.mktemp('handoff') / 'big')
    with MDSWriter(out=out, columns={'id': 'int', 'text': 'str', 'image': 'bytes'},
                   size_limit=150_000) as writer:
        for i in range(SAMPLES):
            blob = os.urandom(20_000 + 173 * i)
            text = ('é' if i % 3 else 'x') * (i * 97 % 9000) + str(i)
            writer.write({'id': i, 'text': text, 'image': blob})
    return out


def _maps_of_ring() -> int:
    """Ring segments mapped in this process (memfds named by handoff)."""
    with open('/proc/self/maps') as maps:
        return sum('memfd:shardflow-batch' in line for line in maps)


def _batches(monkeypatch, path: str, fetch: bool, loader_cls=DataLoader, epochs: int = 1,
             shuffle: bool = True, epoch_size: int | None = None, **kwargs) -> tuple[list, int]:
    """The batches of ``epochs`` passes, and the most ring segments mapped at a time."""
    monkeypatch.setenv('STREAMING_BATCH_FETCH', '1' if fetch else '0')
    dataset = StreamingDataset(local=path, batch_size=8, shuffle=shuffle, epoch_size=epoch_size)
    loader = loader_cls(dataset, batch_size=8, **kwargs)
    batches, most = [], 0
    for _ in range(epochs):
        for batch in loader:
            batches.append(batch)
            most = max(most, handoff.mapped_rings())
        assert handoff.mapped_rings() == 0  # Each worker's final batch let its maps go.
    return batches, most


@pytest.mark.parametrize('loader_cls', [DataLoader, StreamingDataLoader])
@pytest.mark.parametrize('pin_memory', [False, True])
def test_ring_batches_equal_torch_default_collate(monkeypatch, big, loader_cls,
                                                  pin_memory) -> None:
    kwargs = {'num_workers': 2, 'pin_memory': pin_memory}
    got, most = _batches(monkeypatch, big, True, loader_cls, **kwargs)
    want, _ = _batches(monkeypatch, big, False, loader_cls, **kwargs)
    assert most > 0  # The batches did come through the ring.
    _equal(got, want)
    assert sorted(i for b in got for i in b['id'].tolist()) == list(range(SAMPLES))
    for batch in got:
        assert type(batch) is dict and batch['id'].dtype == torch.int64
        batch['id'].resize_(1)  # Ordinary tensor memory, as default_collate's.


@pytest.mark.parametrize('persistent', [False, True])
def test_drop_last_still_lets_the_rings_go(monkeypatch, big, persistent) -> None:
    # 116 samples: some worker's last batch is short, and dropped.
    kwargs = {'num_workers': 2, 'drop_last': True, 'persistent_workers': persistent,
              'epoch_size': SAMPLES - 4}
    got, most = _batches(monkeypatch, big, True, epochs=2, **kwargs)  # Asserts the maps go.
    want, _ = _batches(monkeypatch, big, False, epochs=2, **kwargs)
    assert most > 0 and all(len(batch['id']) == 8 for batch in got)
    assert sum(len(batch['id']) for batch in got) < 2 * (SAMPLES - 4)
    _equal(got, want)


def test_batches_that_outgrow_the_slots_and_a_full_ring(monkeypatch, tmp_path) -> None:
    # Samples of 4 KB up to ~600 KB in order: each worker's ring is replaced by bigger ones
    # (new generations) while earlier batches are in flight.
    out = str(tmp_path / 'growing')
    with MDSWriter(out=out, columns={'id': 'int', 'image': 'bytes'},
                   size_limit=1 << 22) as writer:
        for i in range(96):
            writer.write({'id': i, 'image': os.urandom(4_000 + 6_000 * i)})
    want, _ = _batches(monkeypatch, out, False, shuffle=False, num_workers=2)
    got, most = _batches(monkeypatch, out, True, shuffle=False, num_workers=2)
    assert most > 0
    _equal(got, want)
    # One slot per ring (inherited by the forked workers): batches that find it busy travel
    # inside the pickle instead, with the same result.
    monkeypatch.setattr(ring, 'SLOTS', 1)
    got, most = _batches(monkeypatch, out, True, shuffle=False, num_workers=2,
                         prefetch_factor=4)
    assert most > 0
    _equal(got, want)


def test_small_batches_travel_inline(monkeypatch, tmp_path) -> None:
    out = str(tmp_path / 'small')
    with MDSWriter(out=out, columns={'id': 'int', 'text': 'str'}, size_limit=1 << 10) as writer:
        for i in range(100):
            writer.write({'id': i, 'text': f'sample {i}'})
    got, most = _batches(monkeypatch, out, True, num_workers=2)
    want, _ = _batches(monkeypatch, out, False, num_workers=2)
    assert most == 0
    _equal(got, want)


@pytest.mark.parametrize('collate_fn', [
    lambda samples: samples,
    lambda samples: {'wrapped': default_collate(samples)},
])
def test_other_collate_functions_fall_back(monkeypatch, big, collate_fn) -> None:
    got, most = _batches(monkeypatch, big, True, num_workers=2, collate_fn=collate_fn)
    want, _ = _batches(monkeypatch, big, False, num_workers=2, collate_fn=collate_fn)
    assert most == 0
    _equal(got, want)


@pytest.mark.parametrize('context', ['fork', 'spawn'])
def test_persistent_workers_over_two_epochs(monkeypatch, big, context) -> None:
    kwargs = {'num_workers': 2, 'persistent_workers': True, 'multiprocessing_context': context}
    got, most = _batches(monkeypatch, big, True, StreamingDataLoader, epochs=2, **kwargs)
    want, _ = _batches(monkeypatch, big, False, StreamingDataLoader, epochs=2, **kwargs)
    assert most > 0
    _equal(got, want)
    half = len(got) // 2
    first, second = ([i for b in part for i in b['id'].tolist()]
                     for part in (got[:half], got[half:]))
    assert sorted(first) == sorted(second) == list(range(SAMPLES)) and first != second


def test_nothing_stays_mapped_after_the_loader_is_gone(monkeypatch, big) -> None:
    monkeypatch.setenv('STREAMING_BATCH_FETCH', '1')
    dataset = StreamingDataset(local=big, batch_size=8)
    loader = DataLoader(dataset, batch_size=8, num_workers=2)
    seen = 0
    for step, _ in enumerate(loader):
        seen = max(seen, _maps_of_ring())
        if step == 3:
            break  # Broken off: the workers' final batches never come.
    assert seen > 0
    del loader
    gc.collect()
    handoff.release_dead_workers()
    assert handoff.mapped_rings() == 0 and _maps_of_ring() == 0


@pytest.mark.parametrize('loader_cls', [DataLoader, StreamingDataLoader])
def test_nothing_stays_mapped_after_a_worker_is_killed(monkeypatch, big, loader_cls) -> None:
    monkeypatch.setenv('STREAMING_BATCH_FETCH', '1')
    shm_before = set(os.listdir('/dev/shm')) if os.path.isdir('/dev/shm') else set()
    children_before = set(multiprocessing.active_children())  # An earlier test's, exiting.
    dataset = StreamingDataset(local=big, batch_size=8)
    loader = loader_cls(dataset, batch_size=8, num_workers=2)
    iterator = iter(loader)
    next(iterator)
    assert _maps_of_ring() > 0
    workers = [c for c in multiprocessing.active_children() if c not in children_before]
    assert len(workers) == 2
    with pytest.raises(RuntimeError, match='worker'):  # torch's error may come at once.
        os.kill(workers[0].pid, signal.SIGKILL)
        for _ in iterator:
            pass
    del iterator, loader
    gc.collect()
    if loader_cls is DataLoader:  # StreamingDataLoader does this itself when iteration ends.
        handoff.release_dead_workers()
    assert handoff.mapped_rings() == 0 and _maps_of_ring() == 0
    # The ring is memfds, never files: nothing new of ours (or of torch's) in /dev/shm. torch
    # names its files torch_<pid>_...: only this process's and its workers' count (a test in
    # another pytest-xdist process may have files of its own there meanwhile).
    shm_after = set(os.listdir('/dev/shm')) if os.path.isdir('/dev/shm') else set()
    ours = tuple(f'torch_{pid}_' for pid in [os.getpid(), *(w.pid for w in workers)])
    assert not {name for name in shm_after - shm_before
                if name.startswith(('shardflow-batch', *ours))}


def test_an_error_while_a_batch_is_copied_out_still_lets_the_rings_go(monkeypatch, big) -> None:
    """torch's SIGCHLD handler raises "worker ... killed" wherever the main thread is, also while
    it copies a batch out of a ring: the traceback then keeps a view of that ring. Releasing the
    dead workers' rings as the loader's iteration ends must not fail on it (a BufferError that
    replaced torch's error, and left the rings mapped); each map goes with its last view.
    """
    monkeypatch.setenv('STREAMING_BATCH_FETCH', '1')
    copy_int, fail = handoff._int_tensor, []

    def failing(data: memoryview, count: int) -> torch.Tensor:
        if fail:  # ``data`` is a view of the ring, held by this frame in the traceback.
            raise RuntimeError('DataLoader worker (pid 1) is killed by signal: Killed.')
        return copy_int(data, count)

    monkeypatch.setattr(handoff, '_int_tensor', failing)
    loader = StreamingDataLoader(StreamingDataset(local=big, batch_size=8), batch_size=8,
                                 num_workers=2)
    iterator = iter(loader)
    next(iterator)
    assert _maps_of_ring() > 0
    fail.append(True)
    with pytest.raises(RuntimeError, match='worker'):
        for _ in iterator:
            pass
    del iterator, loader
    gc.collect()
    assert handoff.mapped_rings() == 0 and _maps_of_ring() == 0


def test_resumption_stays_exact(monkeypatch, big, tmp_path) -> None:
    monkeypatch.setenv('STREAMING_BATCH_FETCH', '1')

    def loader() -> StreamingDataLoader:
        dataset = StreamingDataset(remote=big, local=str(tmp_path / 'local'), batch_size=8,
                                   shuffle=True)
        return StreamingDataLoader(dataset, batch_size=8, num_workers=2)

    first = loader()
    seen: list[int] = []
    for step, batch in enumerate(first):
        seen += batch['id'].tolist()
        if step == 5:
            break
    state = first.state_dict()
    assert state['sample_in_epoch'] == 48
    del first
    second = loader()
    second.load_state_dict(state)
    rest = [i for b in second for i in b['id'].tolist()]
    assert sorted(seen + rest) == list(range(SAMPLES))
    assert second.num_samples_yielded == SAMPLES - 48


@pytest.mark.parametrize('num_workers', [0, 2])
def test_a_loader_left_mid_epoch_exits_quietly(big, num_workers) -> None:
    """A loader's iterator kept in a global, one batch taken, then exit: the unfinished iterator
    is closed while the interpreter tears modules down, and must not print an ignored exception
    then."""
    script = ('import sys\n'
              'from streaming import StreamingDataLoader, StreamingDataset\n'
              'dataset = StreamingDataset(local=sys.argv[1], batch_size=8, shuffle=True)\n'
              'loader = StreamingDataLoader(dataset, batch_size=8, num_workers=int(sys.argv[2]))\n'
              'batches = iter(loader)\n'
              'batch = next(batches)\n'
              'print(len(batch["id"]))\n')
    done = subprocess.run([sys.executable, '-c', script, big, str(num_workers)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '8'
    assert 'Traceback' not in done.stderr and 'Exception ignored' not in done.stderr, done.stderr


def test_an_exited_worker_not_yet_reaped_counts_as_dead() -> None:
    # A worker killed mid-epoch is a zombie until its DataLoader joins it; the loader releases
    # dead workers' rings before that (this was the flaky case of the test above).
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    try:
        for _ in range(200):  # Exited, not waited for: a zombie.
            with open(f'/proc/{child.pid}/stat', 'rb') as stat:
                if stat.read().rpartition(b')')[2].split()[0] == b'Z':
                    break
            time.sleep(0.05)
        else:
            pytest.fail('the child never exited')
        assert not ring._is_alive(child.pid)
        assert ring._is_alive(os.getpid())
    finally:
        child.wait()
    assert not ring._is_alive(child.pid)


def test_a_batch_from_a_shard_per_sample_packs_in_batch_order(tmp_path) -> None:
    """Small samples in tiny shards (the many-small-shards case): a shuffled batch draws on
    nearly one shard per sample, and some shards twice. Packed into this process's ring as a
    worker packs it and rebuilt as the main process rebuilds it, it equals the default collate
    of the samples read one by one, value for value and in batch order."""
    out = str(tmp_path / 'small')
    with MDSWriter(out=out, columns={'id': 'int', 'text': 'str', 'tokens': 'bytes'},
                   size_limit=9_000) as writer:
        for i in range(400):
            writer.write({'id': i, 'text': 'é' * (i % 5) + str(i),
                          'tokens': os.urandom(2_048 + 37 * (i % 50))})
    dataset = StreamingDataset(local=out, batch_size=40, shuffle=True)
    assert dataset.num_shards >= 100
    ids = np.random.default_rng(7).permutation(dataset.num_samples)
    stream = SampleStream(ids, dataset.sample_offset_per_shard, dataset.cache,
                          dataset.get_item, True, None)
    for _ in range(10):
        shards, indices = stream.take(40)
        assert len(np.unique(shards)) > 20  # Most samples come from a shard of their own.
        runs = stream.gather(shards, indices, spans=True)
        packed = handoff.pack(runs, False)
        assert packed.slot is not None  # Over RING_MIN_BYTES: through the ring.
        batch = pickle.loads(pickle.dumps(packed))
        samples = [dataset[int(dataset.sample_offset_per_shard[s]) + i]
                   for s, i in zip(shards.tolist(), indices.tolist())]
        _equal(batch, default_collate(samples))


def test_a_detached_batch_outlives_its_shard_maps_and_still_gives_bytes(tmp_path) -> None:
    """A batch kept for a group is copied out of the shards' maps: after the maps are closed
    it still gives the same values, as ``bytes`` (as they travel inline, in the pickle), and
    packs through the ring to the same values."""
    import mmap
    path = tmp_path / 'shard'
    values = [os.urandom(6_000 + 7 * i) for i in range(12)]  # Over RING_MIN_BYTES in all.
    path.write_bytes(b''.join(values))
    with open(path, 'rb') as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    stops = np.cumsum([len(v) for v in values])
    starts = stops - [len(v) for v in values]
    order = np.random.default_rng(3).permutation(len(values))  # Batch order is not map order.
    scattered = handoff.Scattered.in_order([data], np.zeros(len(values), np.int64),
                                           starts[order], stops[order])
    detached = handoff.detached([{'tokens': scattered}])
    data.close()  # What readying another shard may do to the map.
    expected = [values[i] for i in order.tolist()]
    got = detached[0]['tokens'].values()
    assert got == expected and all(type(value) is bytes for value in got)
    packed = handoff.pack(detached, False)
    assert packed.slot is not None  # Through the ring.
    assert list(pickle.loads(pickle.dumps(packed))['tokens']) == expected
