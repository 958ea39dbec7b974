"""``streaming.base.*`` layers work on our own machinery: registries, shared memory, work
generation, shuffles, the dataset under its old paths."""

from __future__ import annotations

import multiprocessing
import os
import uuid
from typing import Any

import numpy as np
import pytest

from tests.unit_helpers import write_mds


def _ids(root: str, n: int = 60) -> str:
    write_mds(root, {'id': 'int'}, [{'id': i} for i in range(n)], size_limit=200)
    return root


def test_renamed_internals_are_aliases() -> None:
    from streaming.base.array import Array
    from streaming.base.local import LocalDataset
    from streaming.indexing import IndexingMixin
    from streaming.local_dataset import LocalDataset as Ours
    assert Array is IndexingMixin and LocalDataset is Ours


def test_streams_registry_custom_stream(tmp_path: Any) -> None:
    from streaming.base import StreamingDataset
    from streaming.base.registry_utils import construct_from_registry, save_registry
    from streaming.base.stream import Stream, streams_registry
    _ids(str(tmp_path / 'data'))
    made = []

    class TaggedStream(Stream):
        def __init__(self, *, tag: str = '', **kwargs: Any) -> None:
            made.append(tag)
            super().__init__(**kwargs)

    with save_registry():
        streams_registry.register('tagged', func=TaggedStream)
        assert streams_registry.get('tagged') is TaggedStream
        assert set(streams_registry.get_all()) >= {'stream', 'tagged'}
        dataset = StreamingDataset(local=str(tmp_path / 'data'), stream_name='tagged',
                                   stream_config={'tag': 'x'}, batch_size=4)
        assert made == ['x'] and isinstance(dataset.streams[0], TaggedStream)
        assert [dataset[i]['id'] for i in range(3)] == [0, 1, 2]
        built = construct_from_registry('tagged', streams_registry,
                                        kwargs={'local': str(tmp_path / 'data'), 'tag': 'y'})
        assert isinstance(built, TaggedStream)
        with pytest.raises(ValueError, match='Expected'):
            construct_from_registry('tagged', streams_registry, pre_validation_function=int)
    assert 'tagged' not in streams_registry
    with pytest.raises(ValueError, match='not in registry'):
        streams_registry.get('tagged')


def test_create_registry_decorator() -> None:
    from streaming.base.registry_utils import create_registry
    registry = create_registry('streaming', 'compat_test', generic_type=object)
    assert registry.group == 'streaming_compat_test'

    @registry.register('double')
    def double(x: int) -> int:
        return 2 * x

    assert registry.get('double')(4) == 8 and registry.get('nope', None) is None


def test_import_file(tmp_path: Any) -> None:
    from streaming.base.registry_utils import import_file
    path = tmp_path / f'plugin_{uuid.uuid4().hex[:8]}.py'
    path.write_text('VALUE = 41 + 1\n')
    assert import_file(path).VALUE == 42
    bad = tmp_path / 'broken_plugin.py'
    bad.write_text('raise KeyError("boom")\n')
    with pytest.raises(RuntimeError, match='broken_plugin'):
        import_file(bad)


def _barrier_worker(lock: str, name: str, rounds: int, out: Any) -> None:
    from streaming.base.shared import SharedBarrier, SharedScalar
    barrier = SharedBarrier(lock, name + '_b')
    counter = SharedScalar(np.int64, name + '_n')
    for _ in range(rounds):
        barrier(3)
        out.put(int(counter.get()))
        barrier(3)


def test_shared_array_scalar_and_barrier(tmp_path: Any) -> None:
    from streaming.base.shared import SharedArray, SharedBarrier, SharedMemory, SharedScalar
    name = f'compat_{uuid.uuid4().hex[:10]}'
    array = SharedArray((2, 3), np.int32, name + '_a')
    array[1, 2] = 7
    again = SharedArray((2, 3), np.int32, name + '_a')
    assert again[1, 2] == 7 and again.numpy().shape == (2, 3)
    scalar = SharedScalar(np.int64, name + '_n')
    scalar.set(5)
    assert SharedScalar(np.int64, name + '_n').get() == 5
    memory = SharedMemory(name + '_m', create=True, size=16)
    assert memory.size >= 16 and SharedMemory(name + '_m', create=False).name == memory.name
    lock = str(tmp_path / 'barrier.lock')
    barrier = SharedBarrier(lock, name + '_b')
    ctx = multiprocessing.get_context('spawn')
    queue = ctx.Queue()
    procs = [ctx.Process(target=_barrier_worker, args=(lock, name, 2, queue))
             for _ in range(2)]
    for proc in procs:
        proc.start()
    for value in (11, 12):
        barrier(3)  # The workers read the counter once all three have arrived ...
        barrier(3)  # ... and it changes only once all three have read it.
        scalar.set(value)
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert sorted(queue.get(timeout=5) for _ in range(4)) == [5, 5, 11, 11]


def test_get_shm_prefix_detects_reused_local(tmp_path: Any) -> None:
    from streaming.base.shared import get_shm_prefix
    from streaming.base.world import World
    local = str(tmp_path / 'cache')
    prefix, shm = get_shm_prefix([local], ['s3://bucket/x'], World(1, 1, 1, 0))
    try:
        with pytest.raises(ValueError, match='Reused local directory'):
            get_shm_prefix([local], ['s3://bucket/y'], World(1, 1, 1, 0), retry=1)
        other, shm2 = get_shm_prefix([str(tmp_path / 'other')], [None], World(1, 1, 1, 0))
        assert other != prefix
        shm2.cleanup()
        # Another rank of the node (not its local leader) finds the leader's prefix.
        follower, attached = get_shm_prefix([local], ['s3://bucket/x'], World(1, 2, 1, 1))
        assert follower == prefix and bytes(attached.buf) == bytes(shm.buf)
        attached.cleanup()
        with pytest.raises(RuntimeError, match='local leader'):
            get_shm_prefix([str(tmp_path / 'unregistered')], [None], World(1, 2, 1, 1), retry=2)
    finally:
        shm.cleanup()
    assert os.path.exists(f'/dev/shm/{prefix:06}_locals') is False  # the leader's block went
    with pytest.raises(ValueError, match='Reused local directory'):  # as the reference
        get_shm_prefix([local, str(tmp_path / 'x' / '..' / 'cache')], [None, None],
                       World(1, 1, 1, 0))


def test_registry_block_layout() -> None:
    """The reference's layout: a size that counts its own 4 bytes, then NUL-separated text."""
    from streaming.base.shared.prefix import pack_locals, unpack_locals
    block = pack_locals(['/a', '/bé'], 12)
    text = '/a\0/bé\0' + '12'
    assert block == (4 + len(text.encode())).to_bytes(4, 'little') + text.encode()
    assert unpack_locals(block + bytes(100)) == (['/a', '/bé'], 12)  # blocks are page-sized
    assert unpack_locals(pack_locals([], 0)) == ([''], 0)  # as the reference packs no dirs
    assert unpack_locals(bytes(8)) == ([], None)  # a torn block names nothing


def test_generate_work_is_the_datasets_order(tmp_path: Any) -> None:
    from streaming.base.batching import generate_work
    from streaming.base.dataset import StreamingDataset
    from streaming.base.world import World
    dataset = StreamingDataset(local=_ids(str(tmp_path / 'd')), batch_size=4, shuffle=True,
                               shuffle_seed=3)
    world = World(1, 1, 2, 0)
    work = generate_work('random', dataset, world, 0, 0)
    assert work.shape[:3] == (1, 1, 2)
    ids = sorted(work[work >= 0].tolist())
    assert ids == list(range(60))
    assert (generate_work('random', dataset, world, 0, 0) == work).all()
    per_stream = generate_work('per_stream', dataset, world, 1, 0)
    assert sorted(per_stream[per_stream >= 0].tolist()) == list(range(60))
    assert dataset.batching_method == 'random'  # Unchanged by asking for another method.
    with pytest.raises(ValueError, match='batching method'):
        generate_work('nope', dataset, world, 0, 0)


@pytest.mark.parametrize('algo', ['naive', 'py1b', 'py1br', 'py1e', 'py1s', 'py2s'])
def test_get_shuffle_structure(algo: str) -> None:
    from streaming.base.shuffle import get_shuffle
    sizes = np.array([50, 70, 30, 90, 10])
    perm = get_shuffle(algo, sizes, 3, 11, 2, 40)
    assert sorted(perm.tolist()) == list(range(250))
    assert (get_shuffle(algo, sizes, 3, 11, 2, 40) == perm).all()
    assert not (get_shuffle(algo, sizes, 3, 11, 3, 40) == perm).all()
    if algo != 'naive':  # Each canonical node's range holds samples of whole shards.
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        shard_of = np.searchsorted(bounds, perm, side='right') - 1
        for node in range(3):
            part = shard_of[250 * node // 3:250 * (node + 1) // 3]
            assert len(set(part.tolist())) <= 3


def test_distributed_single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from streaming.base import distributed as dist
    for name in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE'):
        monkeypatch.delenv(name, raising=False)
    assert (dist.get_rank(), dist.get_world_size(), dist.get_local_rank(),
            dist.get_local_world_size()) == (0, 1, 0, 1)
    assert dist.maybe_init_dist() is False
    dist.barrier()
    tensor = torch.arange(3)
    dist.broadcast(tensor, 0)
    gathered = [torch.zeros(3, dtype=torch.int64)]
    dist.all_gather(gathered, tensor)
    assert gathered[0].tolist() == [0, 1, 2]
    assert dist.all_gather_object({'a': 1}) == [{'a': 1}]
    monkeypatch.setenv('RANK', '3')
    monkeypatch.setenv('WORLD_SIZE', '8')
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '4')
    assert (dist.get_rank(), dist.get_world_size(), dist.get_local_rank(),
            dist.get_local_world_size()) == (3, 8, 3, 4)


def test_util_extras(tmp_path: Any) -> None:
    from streaming.base.util import (
        clean_stale_shared_memory,
        get_import_exception_message,
        wait_for_file_to_exist,
    )
    assert 'shardflow[s3]' in get_import_exception_message('boto3', 's3')
    clean_stale_shared_memory()
    with pytest.raises(RuntimeError, match='never came'):
        wait_for_file_to_exist(str(tmp_path / 'missing'), 0.01, 0.05, 'never came')
    (tmp_path / 'there').write_text('')
    wait_for_file_to_exist(str(tmp_path / 'there'), 0.01, 0.05, 'unused')
