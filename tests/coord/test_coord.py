"""streaming.coord with real processes: shared directories, locks, liveness, sweeping, tokens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from streaming.coord import FileLock, Lease, SharedDir, base_dir, make_job_token, sweep_stale
from streaming.coord.lock import is_locked
from streaming.coord.shared_dir import _alive, _write_pid_record
from streaming.world import World

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def shm(tmp_path, monkeypatch) -> str:
    """Every test gets its own base directory, so sweeps never touch other tests' state."""
    path = tmp_path / 'shm'
    path.mkdir()
    monkeypatch.setenv('STREAMING_SHM_DIR', str(path))
    return str(path)


def child(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``tests.coord.child`` with ``args``; it stays alive until its stdin is closed."""
    return subprocess.Popen([sys.executable, '-m', 'tests.coord.child', *args], cwd=REPO,
                            env={**os.environ, 'PYTHONPATH': REPO, **(env or {})},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def first_line(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline().strip()  # type: ignore[union-attr]
    assert line, f'child exited with {proc.wait()} before reporting'
    return line


def finish(proc: subprocess.Popen) -> int:
    proc.stdin.close()  # type: ignore[union-attr]
    return proc.wait(timeout=60)


def token() -> str:
    return uuid.uuid4().hex[:16]


def leader(local_world_size: int = 2) -> World:
    return World(rank=0, world_size=local_world_size, local_rank=0,
                 local_world_size=local_world_size)


# ---- create and join ---------------------------------------------------------------------------
def test_joiners_started_before_the_leader_wait_and_share_its_arrays(shm) -> None:
    name = token()
    joiners = [child('create', name, str(rank), '3') for rank in (1, 2)]
    time.sleep(0.5)  # The joiners are waiting: nothing is published yet.
    assert not any(n.startswith(f'streaming-{name}') for n in os.listdir(shm))
    shared = SharedDir.create_or_join(name, leader(3), {'counter': ('int64', (4,))}, timeout=5)
    paths = {first_line(j) for j in joiners}
    assert paths == {shared.path} and shared.path == os.path.join(shm, f'streaming-{name}-node0')
    assert shared.array('counter').tolist() == [0, 1, 1, 0]  # Their writes are ours to read.
    assert sorted(os.listdir(os.path.join(shared.path, 'members'))) == \
        sorted([str(os.getpid()), *(str(j.pid) for j in joiners)])
    assert [finish(j) for j in joiners] == [0, 0]
    assert os.path.isdir(shared.path)  # We are still a member: it stays.


def test_a_joiner_gives_up_after_the_timeout_naming_the_path_and_setting() -> None:
    world = World(rank=1, world_size=2, local_rank=1, local_world_size=2)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r'waited 0s \(coordination_timeout\).*streaming-'):
        SharedDir.create_or_join(token(), world, {}, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 10


def test_publication_is_atomic_no_partial_directory_is_ever_visible(shm) -> None:
    """Joiners poll the final path; the leader builds the directory under another name."""
    seen_partial = []
    name = token()
    stop = threading.Event()

    def watch() -> None:
        path = os.path.join(shm, f'streaming-{name}-node0')
        while not stop.is_set():
            if os.path.isdir(path) and not os.path.exists(os.path.join(path, 'owner.json')):
                seen_partial.append(path)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        SharedDir.create_or_join(name, leader(1), {f'a{i}': ('int64', (1000,))
                                                   for i in range(20)}, timeout=5)
    finally:
        stop.set()
        watcher.join()
    assert not seen_partial


def test_the_last_member_to_exit_removes_the_directory(shm) -> None:
    name = token()
    creator = child('create', name, '0', '2')
    path = first_line(creator)
    joiner = child('create', name, '1', '2')
    assert first_line(joiner) == path
    assert finish(creator) == 0
    assert os.path.isdir(path), 'a member is still alive: the directory must stay'
    assert finish(joiner) == 0
    assert not os.path.exists(path)


def test_the_first_rank_keeps_the_directory_until_every_rank_has_joined(shm) -> None:
    """Without a process group a fast first rank may finish before a slow rank even starts."""
    name = token()
    creator = child('create', name, '0', '2')
    path = first_line(creator)
    creator.stdin.close()  # type: ignore[union-attr]
    time.sleep(1.0)  # The creator is done and exiting; its rank 1 has not started yet.
    assert creator.poll() is None and os.path.isdir(path)
    joiner = child('create', name, '1', '2')
    assert first_line(joiner) == path  # Joined the creator's directory, not a timeout.
    assert creator.wait(timeout=30) == 0
    assert finish(joiner) == 0
    assert not os.path.exists(path)


def test_a_first_rank_whose_node_never_fills_up_leaves_after_the_timeout(shm) -> None:
    name = token()
    creator = child('create', name, '0', '2', env={'CHILD_TIMEOUT': '1'})
    path = first_line(creator)
    assert finish(creator) == 0
    assert not os.path.exists(path)


def test_a_live_owner_is_never_replaced(shm) -> None:
    name = token()
    creator = child('create', name, '0', '2', env={'CHILD_TIMEOUT': '1'})
    first_line(creator)
    try:
        with pytest.raises(RuntimeError, match='already belongs to a live process'):
            SharedDir.create_or_join(name, leader(), {}, timeout=5)
    finally:
        finish(creator)


# ---- liveness and sweeping -----------------------------------------------------------------------
def test_a_pid_record_is_alive_only_for_the_same_process(tmp_path) -> None:
    record = str(tmp_path / 'me.json')
    _write_pid_record(record)
    assert _alive(record)
    with open(record) as f:
        mine = json.load(f)
    (tmp_path / 'reused.json').write_text(json.dumps({**mine, 'start': '1'}))  # pid reused
    assert not _alive(str(tmp_path / 'reused.json'))
    gone = subprocess.Popen([sys.executable, '-c', 'pass'])
    gone.wait()
    (tmp_path / 'gone.json').write_text(json.dumps({'pid': gone.pid, 'start': mine['start']}))
    assert not _alive(str(tmp_path / 'gone.json'))
    assert not _alive(str(tmp_path / 'missing.json'))
    (tmp_path / 'torn.json').write_text('{"pid": 1')  # What fileio's atomic write prevents.
    assert not _alive(str(tmp_path / 'torn.json'))


def test_directories_of_killed_jobs_are_swept_and_live_ones_kept(shm) -> None:
    killed, alive = child('create', token(), '0', '1'), child('create', token(), '0', '1')
    killed_path, alive_path = first_line(killed), first_line(alive)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert os.path.isdir(killed_path), 'kill -9 runs no exit hook: the directory is left'
    other = os.path.join(shm, 'not-ours')
    os.mkdir(other)
    assert sweep_stale() == [killed_path]
    assert os.path.isdir(alive_path) and os.path.isdir(other)
    # A new dataset's leader sweeps on creation, so a rerun needs no manual cleanup.
    killed = child('create', token(), '0', '1')
    killed_path = first_line(killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    SharedDir.create_or_join(token(), leader(1), {}, timeout=5)
    assert not os.path.exists(killed_path)
    finish(alive)


def test_a_directory_stays_while_any_member_lives_even_if_its_creator_died(shm) -> None:
    name = token()
    creator = child('create', name, '0', '2')
    path = first_line(creator)
    joiner = child('create', name, '1', '2')
    first_line(joiner)
    creator.send_signal(signal.SIGKILL)
    creator.wait()
    assert sweep_stale() == []
    assert finish(joiner) == 0
    assert not os.path.exists(path)  # The last member out removed it.


# ---- locks ---------------------------------------------------------------------------------------
def test_a_lock_excludes_other_processes_and_dies_with_its_holder(tmp_path) -> None:
    path = str(tmp_path / 'x.lock')
    holder = child('lock', path)
    assert first_line(holder) == 'locked'
    lock = FileLock(path)
    assert not lock.acquire(blocking=False)
    waiter_done = threading.Event()

    def wait_for_it() -> None:
        with FileLock(path):
            waiter_done.set()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(0.3)
    assert not waiter_done.is_set(), 'a blocking acquire must wait for the holder'
    holder.send_signal(signal.SIGKILL)  # The kernel releases a dead process's flock.
    holder.wait()
    waiter.join(timeout=10)
    assert waiter_done.is_set()
    assert lock.acquire(blocking=False)
    lock.release()


def test_a_lock_excludes_threads_of_one_process(tmp_path) -> None:
    lock = FileLock(str(tmp_path / 't.lock'))
    inside, overlaps = [0], []

    def work() -> None:
        for _ in range(50):
            with lock:
                inside[0] += 1
                overlaps.append(inside[0])
                time.sleep(0.0005)
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(overlaps) == 1 and len(overlaps) == 200


def test_a_waiter_on_a_lock_file_removed_by_its_holder_locks_the_file_at_the_path(
        tmp_path, monkeypatch) -> None:
    """A holder removes the lock file, then lets go (``order_store`` does so when it is done).

    The waiter had the removed file open: the lock it then gets must be the one others see,
    not one on a file that is no longer at the path.
    """
    from streaming.coord import lock as lock_module
    path, test_thread = str(tmp_path / 'r.lock'), threading.current_thread()
    holder, opened, got = FileLock(path), threading.Event(), threading.Event()
    real_try_lock = lock_module.try_lock

    def noting_try_lock(fd: int, blocking: bool = False) -> bool:
        if blocking and threading.current_thread() is not test_thread:
            opened.set()  # The waiter's descriptor of the file is open.
        return real_try_lock(fd, blocking)

    monkeypatch.setattr(lock_module, 'try_lock', noting_try_lock)
    assert holder.acquire()
    waiter = FileLock(path)
    release = threading.Event()

    def wait_for_it() -> None:
        with waiter:
            got.set()
            assert release.wait(60)

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    assert opened.wait(60)
    os.remove(path)
    holder.release()
    assert got.wait(60)
    try:
        assert not FileLock(path).acquire(blocking=False), 'two holders of one lock'
    finally:
        release.set()
        thread.join(60)
    assert FileLock(path).acquire(blocking=False)


def test_a_child_forked_while_a_lease_is_given_up_keeps_its_own_descriptors(tmp_path,
                                                                            monkeypatch) -> None:
    """The node's download schedule gives its lease up in its own thread while the main thread
    may be starting DataLoader workers. A worker forked just after the lease's descriptor is
    closed must not close, as an inherited lease, the file that took the freed number: on main
    at 9d5a408 that was a torch worker's own pipe, and the worker exited with code 1 printing
    nothing (CI: "DataLoader worker (pid(s) ...) exited unexpectedly").

    Another thread lands in that window by chance; here a hook on the lock module's
    ``os.close`` forks right after the lease's close, and the freed number is taken by a pipe.
    """
    import multiprocessing

    from streaming.coord import lock as lock_module
    lease = Lease(str(tmp_path / 'downloader.lease'))
    assert lease.try_take()
    number, parent, exit_codes = lease._file.fd, os.getpid(), []

    def check_pipe(inode: int) -> None:
        sys.exit(0 if os.fstat(number).st_ino == inode else 3)

    class ForkAfterClose:  # The module's ``os``, forking a worker right after the lease's close.
        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

        def close(self, fd: int) -> None:
            os.close(fd)
            if fd != number or os.getpid() != parent or exit_codes:
                return
            read, write = os.pipe()
            if read != number:
                os.dup2(read, number)  # The freed number, now a worker's pipe.
            worker = multiprocessing.get_context('fork').Process(
                target=check_pipe, args=(os.fstat(number).st_ino,))
            worker.start()
            worker.join(60)
            exit_codes.append(worker.exitcode)
            for opened in {read, write, number}:
                os.close(opened)

    monkeypatch.setattr(lock_module, 'os', ForkAfterClose())
    lease.give_up()
    monkeypatch.undo()
    assert exit_codes == [0], 'the forked worker lost a descriptor of its own'
    assert not lease.held and not is_locked(lease.path)


def test_shared_dir_and_lock_pickle_without_process_state(shm) -> None:
    import pickle
    shared = SharedDir.create_or_join(token(), leader(1), {'a': ('int64', (2,))}, timeout=5)
    shared.array('a')[1] = 7
    lock = shared.lock('x')
    with lock:
        copy = pickle.loads(pickle.dumps(shared))
        lock_copy = pickle.loads(pickle.dumps(lock))
    assert copy.array('a').tolist() == [0, 7] and lock_copy._fds == {}


# ---- tokens --------------------------------------------------------------------------------------
def test_single_process_tokens_are_fresh_each_time() -> None:
    world = World()
    assert make_job_token(world, 'k') != make_job_token(world, 'k')


def test_launcher_tokens_agree_across_ranks_and_differ_across_jobs(monkeypatch) -> None:
    env = {'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': '29500', 'WORLD_SIZE': '2'}
    tokens = [first_line(child('token', str(rank), '2', 'key', env=env)) for rank in (0, 1)]
    assert tokens[0] == tokens[1]
    other_job = first_line(child('token', '0', '2', 'key', env={**env, 'MASTER_PORT': '29501'}))
    other_data = first_line(child('token', '0', '2', 'other', env=env))
    assert len({tokens[0], other_job, other_data}) == 3


def test_process_group_tokens_are_broadcast_from_rank_0(tmp_path) -> None:
    env = {'STREAMING_TEST_RENDEZVOUS': str(tmp_path / 'rendezvous')}
    ranks = [child('token', str(rank), '2', 'key', env=env) for rank in (0, 1)]
    tokens = [first_line(r) for r in ranks]
    assert [r.wait(timeout=60) for r in ranks] == [0, 0]
    assert tokens[0] == tokens[1] and len(tokens[0]) == 16


def test_base_dir_follows_the_override(shm) -> None:
    assert base_dir() == shm


def test_asking_whether_a_lock_is_held_never_creates_its_file(tmp_path) -> None:
    """``held`` and ``wait_free`` only look: a holder that removed the file finds none again."""
    path = str(tmp_path / 'asked.lock')
    asker = FileLock(path)
    assert not asker.held() and not os.path.exists(path)
    asker.wait_free()  # No file: nobody holds it, nothing to wait for.
    assert not os.path.exists(path)
    holder, taken, release, released = FileLock(path), threading.Event(), threading.Event(), []

    def hold() -> None:
        with holder:
            taken.set()
            assert release.wait(60)
            released.append(True)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(60)
    assert asker.held()  # Another thread's descriptor holds it, as another process's would.
    release.set()
    asker.wait_free()
    assert released == [True]  # It returned only once the holder let go.
    thread.join(60)
    assert not asker.held()
    os.remove(path)
    assert not asker.held() and not os.path.exists(path)
