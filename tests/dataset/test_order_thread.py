"""The thread that computes an epoch's ids (``order_store``) when its dataset goes away meanwhile.

A dataset dropped (or a process exiting) while its epoch order is still being written removes
the node's shared directory under the thread. The thread then has nobody to tell and nowhere to
write: it stops quietly, leaving no partial file. With the directory there, a failure is
logged once by the thread (nothing escapes it) and reported to the waiters. Nor does another
asker of the node ever remove the partial file of a thread that is still computing.
"""

from __future__ import annotations

import logging
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


def _held_steps(gate: threading.Event, fail: BaseException | None = None,
                held: threading.Event | None = None) -> Callable[[], Iterator[Any]]:
    """The ids' steps, held after the array until ``gate`` is set (then raising ``fail``).

    ``held`` is set once the computing thread waits at the gate (its files are open by then).
    """
    def steps() -> Iterator[Any]:
        real = epoch_id_steps(**INPUTS)
        yield next(real)
        if held is not None:
            held.set()
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
    gate, held = threading.Event(), threading.Event()
    ids = shared_epoch_ids(SharedDir(shm), cache if cached else None, INPUTS,
                           _held_steps(gate, held=held))
    assert not ids._state.done  # Still being computed, by the thread.
    # Not before: a thread still opening its progress file would fail, and write its error
    # into the directory being removed (rmtree: "Directory not empty").
    assert held.wait(60)
    shutil.rmtree(shm)  # The dataset's shared directory goes (its last process left).
    gate.set()
    wait_for_background(60)
    assert thread_errors == []
    if cached:  # Finished into the cache (then whole and valid), or nothing; never partial.
        assert not _partial_files(cache)
        for name in os.listdir(cache):
            assert verify_checked(os.path.join(cache, name), ids.key,
                                  ids._state.kind) == len(ids) * ids.ids.itemsize


def test_a_failure_with_the_shared_dir_there_is_logged_once_and_reaches_the_waiters(
        tmp_path, thread_errors, caplog) -> None:
    shm = str(tmp_path / 'shm')
    os.makedirs(shm)
    gate = threading.Event()
    before = set(threading.enumerate())
    with caplog.at_level(logging.WARNING, logger='streaming.dataset.order_store'):
        ids = shared_epoch_ids(SharedDir(shm), None, INPUTS,
                               _held_steps(gate, ValueError('a broken shuffle')))
        threads = [thread for thread in set(threading.enumerate()) - before
                   if thread.name == 'streaming-epoch-order']
        assert len(threads) == 1  # Held at the gate: still running.
        gate.set()
        threads[0].join(60)  # Its end, and any excepthook, is then behind us.
        assert not threads[0].is_alive()
    assert thread_errors == []
    logged = [record for record in caplog.records if 'a broken shuffle' in record.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.WARNING
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


def test_an_order_asked_for_as_its_computation_finishes_is_not_computed_again(
        tmp_path, thread_errors, monkeypatch) -> None:
    """The race CI hit (a FileNotFoundError in the thread's ``publish``).

    A process that asks for the ids just after the computing thread renamed its file, but before
    the marker names the final file, finds the marker's file gone (so does the process that
    started a short computation, mapping the file once it is already renamed). It used to start
    a second computation, whose thread waited for the compute lock. The first thread removes the
    lock file while holding it, then lets go: the second held a lock nobody else could see, so
    the next asker took that order for abandoned and removed the second thread's file under it.
    Now the asker waits for the first computation to finish and uses its file.
    """
    from streaming.coord import lock as lock_module
    from streaming.dataset import order_store
    shm = str(tmp_path / 'shm')
    os.makedirs(shm)
    renamed, go_on, asker_waits = threading.Event(), threading.Event(), threading.Event()
    first: list[threading.Thread] = []
    real_publish, real_try_lock = order_store.publish, lock_module.try_lock

    def publish_then_pause(temp: str, path: str) -> None:
        real_publish(temp, path)
        if not first:  # The first computation pauses between the rename and the marker.
            first.append(threading.current_thread())
            renamed.set()
            assert go_on.wait(60)

    def noting_try_lock(fd: int, blocking: bool = False) -> bool:
        if blocking and first and threading.current_thread() is not first[0]:
            asker_waits.set()  # It waits for a lock (the order's, then the computation's).
        return real_try_lock(fd, blocking)

    monkeypatch.setattr(order_store, 'publish', publish_then_pause)
    monkeypatch.setattr(lock_module, 'try_lock', noting_try_lock)
    first_gate, second_gate, open_gate = threading.Event(), threading.Event(), threading.Event()
    open_gate.set()
    shared_epoch_ids(SharedDir(shm), None, INPUTS, _held_steps(first_gate))  # Mapped: partial.
    first_gate.set()
    assert renamed.wait(60)
    asked: list[Any] = []
    asker = threading.Thread(target=lambda: asked.append(
        shared_epoch_ids(SharedDir(shm), None, INPUTS, _held_steps(second_gate))))
    asker.start()
    assert asker_waits.wait(60)
    go_on.set()  # The first finishes: marker, lock file removed, lock released.
    asker.join(60)
    assert asked and asked[0]._state.done  # The first computation's file, not a second one.
    third = shared_epoch_ids(SharedDir(shm), None, INPUTS, _held_steps(open_gate))
    second_gate.set()
    third.wait(len(third))
    wait_for_background(60)
    assert thread_errors == []
    assert np.array_equal(third.ids, epoch_sample_ids(**INPUTS))
    assert np.array_equal(asked[0].ids, third.ids)
    assert not _partial_files(shm)


def test_asking_about_a_finished_computation_leaves_no_compute_lock(tmp_path,
                                                                    thread_errors) -> None:
    """A waiter that asks whether the ids are still being computed, just after the computation
    removed its lock file, must not make that file again: it stayed in the node's shared
    directory until the next epoch's sweep (what the soak test saw as one entry too many)."""
    shm = str(tmp_path / 'shm')
    os.makedirs(shm)
    gate = threading.Event()
    ids = shared_epoch_ids(SharedDir(shm), None, INPUTS, _held_steps(gate))
    assert ids._computing()  # Held by the computing thread.
    gate.set()
    wait_for_background(60)
    assert not ids._computing()
    assert [name for name in os.listdir(shm) if name.startswith('compute-')] == []
    ids.wait(len(ids))
    assert np.array_equal(ids.ids, epoch_sample_ids(**INPUTS)) and thread_errors == []


def _computations_alive() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate()
            if thread.name == 'streaming-epoch-order' and thread.is_alive()]


def test_waiting_for_the_background_returns_after_the_timeout_or_once_the_thread_ended(
        tmp_path, thread_errors) -> None:
    """``wait_for_background`` gives up after its timeout while a computation goes on, and
    otherwise returns only once the computation's thread has ended (joined), not as it ends."""
    shm = str(tmp_path / 'shm')
    os.makedirs(shm)
    gate, held = threading.Event(), threading.Event()
    before = set(_computations_alive())  # Other tests' (in this process), if any.
    ids = shared_epoch_ids(SharedDir(shm), None, INPUTS, _held_steps(gate, held=held))
    assert held.wait(60)
    computing = [thread for thread in _computations_alive() if thread not in before]
    assert len(computing) == 1
    wait_for_background(0.01)  # Held at the gate: the wait gives up.
    assert all(thread.is_alive() for thread in computing)
    gate.set()
    wait_for_background(60)
    assert _computations_alive() == [] and thread_errors == []
    ids.wait(len(ids))
    assert np.array_equal(ids.ids, epoch_sample_ids(**INPUTS))
