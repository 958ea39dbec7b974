"""The thread that computes an epoch's ids (``order_store``) when its dataset goes away meanwhile.

A dataset dropped (or a process exiting) while its epoch order is still being written removes
the node's shared directory under the thread. The thread then has nobody to tell and nowhere to
write: it stops quietly, leaving no partial file. With the directory there, a failure is still
raised in the thread and reported to the waiters.
"""

from __future__ import annotations

import os
import shutil
import threading
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from streaming.coord import SharedDir
from streaming.dataset.checked_file import verify_checked
from streaming.dataset.order_store import shared_epoch_ids, wait_for_background
from streaming.fileio import TEMP_SUFFIX
from streaming.order.ids import epoch_id_steps, epoch_sample_ids

INPUTS = dict(shard_sizes=np.full(40, 50, np.int64), shard_streams=np.zeros(40, np.int64),
              stream_choose=np.array([2000]), epoch=1, seed=3, shuffle=True,
              shuffle_algo='py1e', block_size=300, num_canonical_nodes=4,
              sampling_method='balanced', sampling_granularity=1)


def _held_steps(gate: threading.Event,
                fail: BaseException | None = None) -> Callable[[], Iterator[Any]]:
    """The ids' steps, held after the array until ``gate`` is set (then raising ``fail``)."""
    def steps() -> Iterator[Any]:
        real = epoch_id_steps(**INPUTS)
        yield next(real)
        assert gate.wait(60)
        if fail is not None:
            raise fail
        yield from real
    return steps


def _partial_files(directory: str) -> list[str]:
    """The partial order files (``fileio.create_temp``'s names) in ``directory``."""
    return [name for name in os.listdir(directory)
            if name.startswith('.order-') and name.endswith(TEMP_SUFFIX)]


@pytest.fixture
def thread_errors(monkeypatch) -> list[BaseException]:
    """Exceptions that end an epoch-order thread unhandled (what Python would print).

    Only this test's own threads: a thread an earlier test of the same process left running
    (a download, a dataset's background work) must neither fail this test nor be hidden.
    """
    errors: list[BaseException] = []
    before = set(threading.enumerate())
    hook = threading.excepthook

    def record(args: Any) -> None:
        if args.thread not in before and args.thread.name == 'streaming-epoch-order':
            errors.append(args.exc_value)
        else:
            hook(args)
    monkeypatch.setattr(threading, 'excepthook', record)
    return errors


@pytest.mark.parametrize('cached', [False, True], ids=['in-shared-dir', 'in-cache-dir'])
def test_the_thread_stops_quietly_when_the_shared_dir_is_removed(tmp_path, thread_errors,
                                                                 cached) -> None:
    shm, cache = str(tmp_path / 'shm'), str(tmp_path / 'cache')
    os.makedirs(shm)
    gate = threading.Event()
    ids = shared_epoch_ids(SharedDir(shm), cache if cached else None, INPUTS, _held_steps(gate))
    assert not ids._state.done  # Still being computed, by the thread.
    shutil.rmtree(shm)  # The dataset's shared directory goes (its last process left).
    gate.set()
    wait_for_background(60)
    assert thread_errors == []
    if cached:  # Finished into the cache (then whole and valid), or nothing; never partial.
        assert not _partial_files(cache)
        for name in os.listdir(cache):
            assert verify_checked(os.path.join(cache, name), ids.key,
                                  ids._state.kind) == len(ids) * ids.ids.itemsize


def test_a_failure_with_the_shared_dir_there_still_reaches_thread_and_waiters(
        tmp_path, thread_errors) -> None:
    shm = str(tmp_path / 'shm')
    os.makedirs(shm)
    gate = threading.Event()
    ids = shared_epoch_ids(SharedDir(shm), None, INPUTS,
                           _held_steps(gate, ValueError('a broken shuffle')))
    gate.set()
    wait_for_background(60)
    assert [type(error) for error in thread_errors] == [ValueError]
    with pytest.raises(RuntimeError, match='ValueError: a broken shuffle'):
        ids.wait(len(ids))
    assert not _partial_files(shm)


def test_the_ids_are_unchanged(tmp_path, thread_errors) -> None:
    shm = str(tmp_path / 'shm')
    os.makedirs(shm)
    gate = threading.Event()
    gate.set()
    ids = shared_epoch_ids(SharedDir(shm), None, INPUTS, _held_steps(gate))
    ids.wait(len(ids))
    assert np.array_equal(ids.ids, epoch_sample_ids(**INPUTS)) and thread_errors == []
