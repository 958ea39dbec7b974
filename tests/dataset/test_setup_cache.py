"""Set-up caches: the binary index summary and the on-disk epoch order.

Each is used only when it is current and whole: a changed input, a rewritten index, or a
truncated or damaged file means it is ignored and rewritten, and the order is always the one
computed without any cache.
"""

from __future__ import annotations

import glob
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from streaming import MDSWriter
from streaming.coord import SharedDir
from streaming.dataset.cache_dirs import setup_cache_dir
from streaming.dataset.checked_file import HEADER_BYTES, digest, verify_checked, write_checked
from streaming.dataset.index_cache import LazyShards, index_key, load_summary
from streaming.dataset.order_store import shared_epoch_ids, wait_for_background
from streaming.dataset.stream import Stream
from streaming.format.index import read_index_bytes
from streaming.order import get_epoch_order
from streaming.order.ids import epoch_id_steps, epoch_sample_ids
from tests.dataset.conftest import write_ids
from tests.oracle.zygote import zygote

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_RUN = '''
import json, sys
from streaming import StreamingDataLoader, StreamingDataset
args = json.loads(sys.argv[1])
resume = args.pop('resume', None)
workers = args.pop('workers', 0)
dataset = StreamingDataset(**args)
loader = StreamingDataLoader(dataset, batch_size=args['batch_size'], num_workers=workers,
                             collate_fn=list)
if resume is not None:
    loader.load_state_dict(resume)
ids = [int(s['id']) for batch in loader for s in batch]
print(json.dumps({'ids': ids, 'lazy': type(dataset.shards.parts[0]).__name__}))
'''


def _run(env_extra: dict | None = None, **args) -> dict:
    """Iterate one epoch in a fresh process (its own shared state, as a new job would).

    Without DataLoader workers the process is a child forked from a zygote that imported torch
    alone (``tests/oracle/zygote.py``): streaming is imported afresh in each child, and torch's
    import (most of a new interpreter's cost) is paid once. With workers it is a new
    interpreter: a zygote child that forks DataLoader workers once hung."""
    env = {**os.environ, 'PYTHONPATH': REPO, **(env_extra or {})}
    argv = ['-c', _RUN, json.dumps(args)]
    if args.get('workers', 0) == 0:
        done = zygote(sys.executable, ['torch'], env).run(argv, env=env, cwd=REPO, timeout=240)
    else:
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env,
                              timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _expected(local: str, batch_size: int, seed: int = 9176, workers: int = 0,
              sample_in_epoch: int = 0) -> list[int]:
    """The order ``get_epoch_order`` gives (no dataset, no cache), as the loader yields it."""
    shards = json.loads(Path(local, 'index.json').read_text())['shards']
    sizes = np.array([s['samples'] for s in shards])
    order = get_epoch_order(shard_sizes=sizes, shard_streams=np.zeros(len(sizes), np.int64),
                            stream_choose=np.array([sizes.sum()]), epoch=0, seed=seed,
                            shuffle=True, num_canonical_nodes=1, batch_size=batch_size,
                            workers_per_rank=workers, sample_in_epoch=sample_in_epoch)
    per_worker = order[0, 0]  # (workers, batches, batch)
    batches = [per_worker[b % len(per_worker), b // len(per_worker)]
               for b in range(per_worker.shape[0] * per_worker.shape[1])]
    return [int(i) for batch in batches for i in batch if i >= 0]


def _order_files(local: str) -> list[str]:
    return sorted(glob.glob(os.path.join(setup_cache_dir(local), 'order-*.ids')))


def _summary(local: str) -> str:
    return os.path.join(setup_cache_dir(local), 'index.bin')


def _inode(path: str) -> int:
    return os.stat(path).st_ino  # A rewrite publishes a new file (atomic rename).


def test_caches_are_written_then_used_and_give_the_uncached_order(tmp_path) -> None:
    local = write_ids(str(tmp_path / 'data'), 3000, size_limit=1 << 13)
    args = dict(local=local, batch_size=8, shuffle=True, workers=2)
    expected = _expected(local, 8, workers=2)
    uncached = _run({'STREAMING_SETUP_CACHE': '0'}, **args)
    assert uncached['ids'] == expected
    assert not _order_files(local) and not os.path.exists(_summary(local))
    cold = _run(**args)
    assert cold['ids'] == expected and cold['lazy'] == 'LazyShards'
    order_file, = _order_files(local)
    summary = _summary(local)
    stamps = _inode(order_file), _inode(summary)
    warm = _run(**args)
    assert warm['ids'] == expected and warm['lazy'] == 'LazyShards'
    assert (_inode(order_file), _inode(summary)) == stamps  # Read, not rewritten.
    # Kept outside the dataset's directory, which holds the dataset's files alone.
    assert not os.path.commonpath([order_file, summary, local]) == local
    assert all(n == 'index.json' or n.startswith('shard.') for n in os.listdir(local))


def test_the_cached_order_serves_other_topologies_and_resume_points(tmp_path) -> None:
    local = write_ids(str(tmp_path / 'data'), 2000, size_limit=1 << 13)
    _run(local=local, batch_size=10, shuffle=True)
    order_file, = _order_files(local)
    stamp = _inode(order_file)
    resume = {'epoch': 0, 'sample_in_epoch': 600, 'num_canonical_nodes': 1,
              'shuffle_seed': 9176, 'initial_physical_nodes': 1}
    got = _run(local=local, batch_size=10, shuffle=True, workers=2, resume=resume)
    assert got['ids'] == _expected(local, 10, workers=2, sample_in_epoch=600)
    assert _inode(order_file) == stamp


def test_another_seed_or_a_rewritten_index_is_not_served_from_the_caches(tmp_path) -> None:
    local = write_ids(str(tmp_path / 'data'), 2000, size_limit=1 << 13)
    _run(local=local, batch_size=10, shuffle=True)
    other = _run(local=local, batch_size=10, shuffle=True, shuffle_seed=5)
    assert other['ids'] == _expected(local, 10, seed=5)
    assert len(_order_files(local)) == 2
    # The index rewritten with other shard sizes: the summary is stale, the order too.
    other_dir = write_ids(str(tmp_path / 'other'), 1500, size_limit=1 << 12)
    for name in os.listdir(local):
        if not name.startswith('.'):
            os.remove(os.path.join(local, name))
    for name in os.listdir(other_dir):
        os.rename(os.path.join(other_dir, name), os.path.join(local, name))
    summary = _summary(local)
    stamp = _inode(summary)
    got = _run(local=local, batch_size=10, shuffle=True)
    assert got['ids'] == _expected(local, 10) and sorted(got['ids']) == list(range(1500))
    assert _inode(summary) != stamp  # Rewritten for the new index.


@pytest.mark.parametrize('damage', ['truncate', 'flip', 'header'])
def test_a_damaged_cache_file_is_ignored_and_rewritten(tmp_path, damage: str) -> None:
    local = write_ids(str(tmp_path / 'data'), 2000, size_limit=1 << 13)
    expected = _expected(local, 10)
    _run(local=local, batch_size=10, shuffle=True)
    order_file, = _order_files(local)
    summary = _summary(local)
    for path in (order_file, summary):
        data = bytearray(Path(path).read_bytes())
        if damage == 'truncate':
            data = data[:len(data) - 7]
        elif damage == 'flip':
            data[HEADER_BYTES + 5] ^= 0x40
        else:
            data[:8] = b'garbage!'
        Path(path).write_bytes(bytes(data))
    stamps = _inode(order_file), _inode(summary)
    got = _run(local=local, batch_size=10, shuffle=True)
    assert got['ids'] == expected
    order_file, = _order_files(local)
    assert _inode(order_file) != stamps[0] and _inode(summary) != stamps[1]  # Both rewritten,
    stamps = _inode(order_file), _inode(summary)
    again = _run(local=local, batch_size=10, shuffle=True)
    assert again['ids'] == expected
    assert (_inode(order_file), _inode(summary)) == stamps  # and used next time.


def _ids_inputs(sizes: np.ndarray, seed: int = 3, epoch: int = 1) -> dict:
    return dict(shard_sizes=sizes, shard_streams=np.zeros(len(sizes), np.int64),
                stream_choose=np.array([int(sizes.sum() * 1.5)]), epoch=epoch, seed=seed,
                shuffle=True, shuffle_algo='py1e', block_size=50, num_canonical_nodes=2,
                sampling_method='balanced', sampling_granularity=1)


def test_epoch_ids_are_keyed_by_every_input(tmp_path) -> None:
    sizes = np.array([30, 7, 19, 44, 3])
    base = _ids_inputs(sizes)
    cache = str(tmp_path / 'cache')
    variants = [base, {**base, 'seed': 4}, {**base, 'epoch': 2},
                {**base, 'shard_sizes': np.array([30, 7, 19, 44, 4])},
                {**base, 'num_canonical_nodes': 3}, {**base, 'block_size': 51},
                {**base, 'shuffle_algo': 'py1s'}, {**base, 'sampling_method': 'fixed'},
                {**base, 'sampling_granularity': 2},
                {**base, 'stream_choose': np.array([int(sizes.sum() * 1.5) + 1])}]
    for number, inputs in enumerate(variants):
        for run in range(2):  # A fresh node (shared directory) each time: the cache serves it.
            shared = SharedDir(str(tmp_path / f'shm-{number}-{run}'))
            os.makedirs(shared.path)
            got = shared_epoch_ids(shared, cache, inputs, lambda i=inputs: epoch_id_steps(**i))
            got.wait(len(got))
            assert np.array_equal(got.ids, epoch_sample_ids(**inputs)), inputs
            wait_for_background()


def _write_same(path: str, key: bytes, ids: np.ndarray, rounds: int) -> None:
    for _ in range(rounds):
        write_checked(path, key, 'ids<i4', ids)
        assert verify_checked(path, key, 'ids<i4') == ids.nbytes


def test_concurrent_writers_of_one_cache_file_leave_a_whole_file(tmp_path) -> None:
    ids = np.random.default_rng(0).permutation(1 << 20).astype(np.int32)
    path, key = str(tmp_path / 'order-x.ids'), digest({'x': 1})
    context = multiprocessing.get_context('fork')
    procs = [context.Process(target=_write_same, args=(path, key, ids, 5)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert verify_checked(path, key, 'ids<i4') == ids.nbytes
    got = np.fromfile(path, np.int32, offset=HEADER_BYTES)
    assert np.array_equal(got, ids)
    assert not [n for n in os.listdir(tmp_path) if n.endswith('.tmp')]


def _summarise(local: str) -> None:
    stream = Stream(local=local)
    stream.get_shards(stream.get_index(fetch=False), False)


def test_concurrent_ranks_writing_the_index_summary_agree(tmp_path) -> None:
    local = write_ids(str(tmp_path / 'data'), 3000, size_limit=1 << 12)
    context = multiprocessing.get_context('fork')
    procs = [context.Process(target=_summarise, args=(local,)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    path = os.path.join(local, 'index.json')
    summary = load_summary(local, index_key(path, read_index_bytes(path)))
    assert summary is not None
    shards = json.loads(Path(path).read_text())['shards']
    assert summary.samples.tolist() == [s['samples'] for s in shards]
    stream = Stream(local=local)
    lazy = stream.get_shards(stream.get_index(fetch=False), False)
    assert isinstance(lazy, LazyShards)
    assert [lazy[i].samples for i in range(len(lazy))] == [s['samples'] for s in shards]
    assert lazy[3].get_item(0)['id'] == sum(s['samples'] for s in shards[:3])


def test_a_summary_does_not_lift_the_unsafe_types_check(tmp_path) -> None:
    out = str(tmp_path / 'pkl')
    with MDSWriter(out=out, columns={'obj': 'pkl'}) as writer:
        writer.write({'obj': {'a': 1}})
    stream = Stream(local=out)
    stream.get_shards(stream.get_index(fetch=False), True)  # Allowed: writes the summary.
    index = stream.get_index(fetch=False)
    assert index.summary is not None
    with pytest.raises(ValueError, match='allow_unsafe_types'):
        stream.get_shards(index, False)
    assert stream.get_shards(index, True)[0].get_item(0) == {'obj': {'a': 1}}


def _stalled_publisher(shm: str, cache: str, inputs: dict, ready) -> None:
    """Publish the ids but stop for good after their first part (as a process killed then)."""

    def stalling():
        steps = epoch_id_steps(**inputs)
        yield next(steps)
        yield next(steps)
        ready.set()
        time.sleep(600)

    shared_epoch_ids(SharedDir(shm), cache, inputs, stalling)
    time.sleep(600)


def test_a_computation_left_unfinished_is_taken_over(tmp_path) -> None:
    inputs = {**_ids_inputs(np.array([40, 90, 17, 64, 33])), 'shuffle_algo': 'py2s'}
    shm, cache = str(tmp_path / 'shm'), str(tmp_path / 'cache')
    os.makedirs(shm)
    context = multiprocessing.get_context('fork')
    ready = context.Event()
    proc = context.Process(target=_stalled_publisher, args=(shm, cache, inputs, ready))
    proc.start()
    try:
        assert ready.wait(60)
        got = shared_epoch_ids(SharedDir(shm), cache, inputs, lambda: epoch_id_steps(**inputs))
        got.wait(1)  # The first row is final: served from the other process's partial file.
    finally:
        proc.kill()
        proc.join()
    got.wait(len(got))  # Its computer is gone: computed again here.
    assert np.array_equal(got.ids, epoch_sample_ids(**inputs))
    wait_for_background()
    assert _order_files_in(cache) and not glob.glob(os.path.join(cache, '.*.tmp'))


def _order_files_in(directory: str) -> list[str]:
    return glob.glob(os.path.join(directory, 'order-*.ids'))


def test_a_failed_computation_is_reported_then_retried(tmp_path, monkeypatch, caplog) -> None:
    """The failure is logged once and raised by the waiter; no exception escapes the thread."""
    inputs = _ids_inputs(np.array([40, 90, 17, 64, 33]))
    shm = str(tmp_path / 'shm')
    os.makedirs(shm)
    escaped: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, 'excepthook', escaped.append)

    def failing():
        steps = epoch_id_steps(**inputs)
        yield next(steps)
        raise OSError('disk on fire')

    started: list[threading.Thread] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        started.append(thread)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, 'start', start)
    with caplog.at_level(logging.WARNING, logger='streaming.dataset.order_store'):
        # Failing at once, it may fail before the files are mapped (then this raises) or after
        # (then the wait does): either way the asker gets the cause, computed only once.
        with pytest.raises(RuntimeError, match='disk on fire'):
            got = shared_epoch_ids(SharedDir(shm), None, inputs, failing)
            got.wait(len(got))
        computing = [t for t in started if t.name == 'streaming-epoch-order']
        assert len(computing) == 1
        computing[0].join(60)  # Then its end, and any excepthook, is behind us.
        assert not computing[0].is_alive()
    monkeypatch.undo()
    assert not escaped
    logged = [r for r in caplog.records if 'disk on fire' in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.WARNING
    assert 'epoch order order-' in logged[0].getMessage()
    again = shared_epoch_ids(SharedDir(shm), None, inputs, lambda: epoch_id_steps(**inputs))
    again.wait(len(again))
    assert np.array_equal(again.ids, epoch_sample_ids(**inputs))


def test_the_local_scan_from_the_summary_counts_only_complete_shards(tmp_path) -> None:
    """With a current summary, a truncated and a missing shard file are not counted as local."""
    import shutil

    from streaming import StreamingDataset

    remote = write_ids(str(tmp_path / 'remote'), 600, size_limit=1 << 12)
    local = str(tmp_path / 'local')
    shutil.copytree(remote, local)
    _run(remote=remote, local=local, batch_size=10)  # Writes the index summary.
    with open(os.path.join(local, 'index.json')) as file:
        entries = json.load(file)['shards']
    names = [entry['raw_data']['basename'] for entry in entries]
    with open(os.path.join(local, names[1]), 'r+b') as file:
        file.truncate(10)
    os.remove(os.path.join(local, names[3]))
    os.symlink(os.path.join(remote, names[4]), os.path.join(local, names[4]) + '.link')
    # predownload=0: ours starts the node's downloads when the dataset is built, which raced
    # with reading cache_usage (the missing shard was sometimes back already).
    with pytest.warns(UserWarning, match='predownload=0 is below batch_size=10'):
        dataset = StreamingDataset(remote=remote, local=local, batch_size=10, predownload=0)
    assert isinstance(dataset.shards.parts[0], LazyShards)
    complete = [entry['raw_data']['bytes'] for i, entry in enumerate(entries) if i not in (1, 3)]
    index_bytes = os.path.getsize(os.path.join(local, 'index.json'))
    assert dataset.cache_usage == index_bytes + sum(complete)
