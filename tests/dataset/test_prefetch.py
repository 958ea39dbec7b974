"""The node's downloads in first-use order (streaming.cache.prefetch)."""

from __future__ import annotations

import os
import time
from collections import deque

import numpy as np
import pytest
from torch.utils.data import DataLoader

from streaming import StreamingDataset
from streaming.cache.concurrency import IN_FLIGHT_ENV, Concurrency, in_flight_setting
from streaming.cache.prefetch import _Schedule
from streaming.cache.shard_cache import LOCAL, REMOTE
from streaming.cache.walk import EpochWalk
from streaming.order.first_use import iter_first_uses
from streaming.storage import register_backend
from streaming.storage.local import LocalBackend
from tests.dataset.conftest import write_ids


class _Link:
    """A fake meter: ``n`` transfers receive ``min(per_connection, link / n)`` bytes/s each."""

    def __init__(self, per_connection: float, link: float) -> None:
        self.per_connection, self.link = per_connection, link
        self.bytes, self.area = 0, 0.0

    def advance(self, transfers: int, seconds: float) -> None:
        rate = min(self.per_connection, self.link / transfers)
        self.bytes += int(transfers * rate * seconds)
        self.area += transfers * seconds

    def reading(self) -> tuple[int, float, int]:
        return self.bytes, self.area, 0


def _climb(link_limit: float, seconds: float = 30.0, fail_at: float | None = None,
           per_connection: float = 1e6) -> list[int]:
    """Values taken by an adaptive count on a link that carries ``link_limit`` transfers' worth."""
    link = _Link(per_connection, link_limit * per_connection)
    concurrency = Concurrency(meter=link)  # type: ignore[arg-type]
    values, now, step = [], 0.0, 0.05
    while now < seconds:
        link.advance(concurrency.value, step)
        if fail_at is not None and abs(now - fail_at) < step / 2:
            concurrency.failed(now)
        concurrency.update(now, held_back=True)
        values.append(concurrency.value)
        now += step
    return values


def test_concurrency_grows_while_each_transfer_keeps_its_rate_then_holds():
    values = _climb(link_limit=40)
    assert values[0] == Concurrency.START
    assert max(values[:20]) > 40  # Doubled twice within a second: past the link.
    # Then where the link is full plus half for transfers waiting for their first byte.
    assert all(40 <= v <= Concurrency.HIGH for v in values[20:])
    # A link that 8 transfers fill: one trial step, then 1.5x of what the start got per
    # transfer, where it stays but for a trial step every few seconds.
    low = _climb(link_limit=8)
    assert max(low[:100]) <= Concurrency.START * 2
    assert low[-1] <= Concurrency.START * 3 // 2 and max(low) <= Concurrency.START * 3


def test_concurrency_judges_its_first_window_once_bytes_arrive():
    """The first window begins with the first requests, whose bytes come a time to first byte
    later: it goes on until it has received enough to judge, instead of starting again empty
    (cross-region, 100 ms: the first doubling came a whole window late)."""
    link = _Link(per_connection=8e6, link=200e6)
    concurrency = Concurrency(meter=link)  # type: ignore[arg-type]
    now, step, doubled_at = 0.0, 0.05, None
    while doubled_at is None and now < 2.0:
        if now > 0.3:  # Nothing arrives before the first byte.
            link.advance(concurrency.value, step)
        concurrency.update(now, held_back=True)
        if concurrency.value > Concurrency.START:
            doubled_at = now
        now += step
    assert doubled_at is not None and doubled_at < 0.45
    # A window that is never busy enough to judge still ends (the count stays).
    idle = Concurrency(meter=_Link(per_connection=8e6, link=200e6))  # type: ignore[arg-type]
    for tick in range(100):
        idle.update(tick * step, held_back=False)
    assert idle.value == Concurrency.START and idle._since >= 5.0 - idle.LONGEST * idle.window


class _WaitingLink(_Link):
    """A fake meter that also reports the lowest time to first byte seen (None: none yet)."""

    def __init__(self, wait: float | None) -> None:
        super().__init__(per_connection=8e6, link=200e6)
        self.wait = wait

    def first_byte_wait(self) -> float | None:
        return self.wait


def test_concurrency_start_scales_with_the_time_to_first_byte():
    """A long time to first byte (cross-region) starts the count higher, in proportion, up to
    ``HIGH``; the same region (40 ms) starts at ``START`` as before."""
    starts = {}
    for wait in (0.01, 0.04, Concurrency.NEAR, 0.1, 0.15, 1.0):
        concurrency = Concurrency(meter=_WaitingLink(wait))  # type: ignore[arg-type]
        concurrency.update(0.0, held_back=True)
        starts[wait] = concurrency.value
    assert starts[0.01] == starts[0.04] == starts[Concurrency.NEAR] == Concurrency.START
    assert starts[0.1] == 2 * Concurrency.START and starts[0.15] == 3 * Concurrency.START
    assert starts[1.0] == Concurrency.HIGH
    # A fixed count stays what it was told.
    fixed = Concurrency(fixed=5, meter=_WaitingLink(0.1))  # type: ignore[arg-type]
    fixed.update(0.0, held_back=True)
    assert fixed.value == 5


def test_concurrency_sized_by_its_own_first_gets_starts_a_new_window():
    """Without a response before the schedule (no index.json fetched), the first GETs tell the
    time to first byte: the count is raised once, and the window begun with fewer transfers is
    dropped, so the first judgement is of the raised count."""
    link = _WaitingLink(None)
    concurrency = Concurrency(meter=link)  # type: ignore[arg-type]
    concurrency.update(0.0, held_back=True)
    concurrency.update(0.05, held_back=True)
    assert concurrency.value == Concurrency.START and concurrency._since == 0.0
    link.wait = 0.1
    concurrency.update(0.1, held_back=True)
    assert concurrency.value == 2 * Concurrency.START and concurrency._since is None
    # Once only: a lower count after a full link is not raised again by the same wait.
    concurrency.failed(0.2)
    concurrency.update(0.3, held_back=True)
    assert concurrency.value == Concurrency.START
    # Nor after a failure that came before the wait was known.
    early = Concurrency(meter=_WaitingLink(None))  # type: ignore[arg-type]
    early.failed(0.0)
    early.meter.wait = 0.2  # type: ignore[attr-defined]
    early.update(0.1, held_back=True)
    assert early.value == Concurrency.START // 2


def test_concurrency_halves_on_failure_and_a_fixed_count_stays():
    values = _climb(link_limit=8, seconds=6.0, fail_at=1.5)
    before, after = values[29], values[30]
    assert after == before // 2
    assert max(values[30:]) <= after  # No growth for a while after a failure.
    fixed = Concurrency(fixed=5)
    fixed.failed()
    fixed.update(0.0, True)
    fixed.update(5.0, True)
    assert fixed.value == 5


def test_in_flight_setting(monkeypatch):
    monkeypatch.delenv(IN_FLIGHT_ENV, raising=False)
    assert in_flight_setting() is None
    monkeypatch.setenv(IN_FLIGHT_ENV, 'auto')
    assert in_flight_setting() is None
    monkeypatch.setenv(IN_FLIGHT_ENV, '12')
    assert in_flight_setting() == 12
    monkeypatch.setenv(IN_FLIGHT_ENV, 'many')
    with pytest.raises(ValueError, match=IN_FLIGHT_ENV):
        in_flight_setting()


class LoggingBackend(LocalBackend):
    """Copies like the local backend; appends each file's name, when it starts, to a log that
    forked DataLoader workers share."""

    log = ''

    def download(self, url: str, local_path: str, timeout: float | None = None) -> None:
        name = os.path.basename(local_path).lstrip('.').split('.mds')[0] + '.mds'  # A temp file.
        with open(self.log, 'a') as f:
            f.write(name + '\n')
        time.sleep(0.02)  # A little latency, so that downloads overlap.
        super().download(url, local_path, timeout)


@pytest.fixture
def logged_remote(tmp_path):
    remote = write_ids(str(tmp_path / 'remote'), 1200, size_limit=1 << 14, payload=500)
    LoggingBackend.log = str(tmp_path / 'downloads.log')
    register_backend('', LoggingBackend)
    yield remote
    register_backend('', LocalBackend)


def _log_lines(tmp_path) -> list[str]:
    path = tmp_path / 'downloads.log'
    return [line for line in path.read_text().split() if line.startswith('shard')] \
        if path.exists() else []


def test_each_shard_is_fetched_once_in_first_use_order(logged_remote, tmp_path, monkeypatch):
    monkeypatch.setenv(IN_FLIGHT_ENV, '3')
    dataset = StreamingDataset(remote=logged_remote, local=str(tmp_path / 'cache'),
                               batch_size=8, shuffle=True, shuffle_block_size=300)
    # The order the node will read, as the schedule sees it (worker-count independent).
    order = dataset._epoch_order(0, 0, dataset.world)[0]
    walk = list(iter_first_uses(order, dataset.sample_offset_per_shard, dataset.num_shards))
    expected = np.concatenate([shards for shards, _ in walk]).tolist()
    names = [dataset.shards[i].raw_data['basename'] for i in expected]
    seen = []
    for batch in DataLoader(dataset, batch_size=8, num_workers=2):
        seen.extend(batch['id'].tolist())
    assert sorted(seen) == list(range(1200))
    fetched = _log_lines(tmp_path)
    assert sorted(fetched) == sorted(names), 'every shard exactly once'
    # Downloads started in first-use order, three at a time, from the moment the dataset was
    # built (before any reader): the first ones are among the first needed (a thread started
    # late on a loaded machine may log after the next one).
    assert set(fetched[:3]) <= set(names[:5])
    assert fetched[:len(names) // 2] != sorted(fetched[:len(names) // 2])  # Not name order.
    assert (dataset.cache.states == LOCAL).all()


@pytest.mark.filterwarnings('ignore:predownload=0')
def test_no_background_download_with_predownload_zero(logged_remote, tmp_path):
    dataset = StreamingDataset(remote=logged_remote, local=str(tmp_path / 'cache'),
                               batch_size=8, predownload=0)
    time.sleep(0.5)
    assert (dataset.cache.states == REMOTE).all()
    assert _log_lines(tmp_path) == []
    assert dataset[5]['id'] == 5  # Fetched on demand.
    assert len(_log_lines(tmp_path)) == 1


def test_the_last_shards_are_split_into_parts():
    from streaming.cache.walk import MAX_PARTS, tail_parts
    assert tail_parts(free=4, unstarted=40, limit=16) == 1  # Plenty left: whole shards.
    assert tail_parts(free=4, unstarted=16, limit=16) == 1
    assert tail_parts(free=4, unstarted=8, limit=16) == 2
    assert tail_parts(free=4, unstarted=3, limit=16) == 6
    assert tail_parts(free=4, unstarted=1, limit=16) == MAX_PARTS
    assert tail_parts(free=0, unstarted=1, limit=16) == 1


def _admitted(connections: int, others: int, limit: int, shards: int = 6) -> list[int]:
    """Ranged parts of each shard a fresh walk of ``shards`` 1 MB shards starts now."""
    from streaming.cache.budget import DownloadBudget
    starts = np.arange(shards) * 10
    walk = EpochWalk(np.arange(shards * 10).reshape(1, 1, -1, 1), starts, shards, False)
    states = np.full(shards, REMOTE)
    budget = DownloadBudget.for_limit(None, 0, 1 << 20)
    in_flight: dict[int, tuple[int, int]] = {}
    parts = []
    for shard, _, size, count in walk.admit(states, 0, None, in_flight, others, limit, deque(),
                                            lambda shard: 1 << 20, budget, lambda size: True,
                                            connections):
        in_flight[shard] = (count, size)
        parts.append(count)
    return parts


def test_ranged_parts_count_against_the_limit_of_connections():
    """A split tail used to count one per shard: with 64 allowed, 43 shards left went out as
    ~150 ranged GETs at once (cross-region, docs/benchmarks.md), most waiting for moto."""
    # The tail is split (``tail_parts``) until the count is reached (the last shard started
    # may pass it by less than MAX_PARTS); the rest waits for connections to end.
    assert _admitted(connections=0, others=0, limit=16) == [3, 4, 4, 6]
    assert _admitted(connections=9, others=2, limit=16) == [3, 4]  # 5 connections were left.
    assert _admitted(connections=14, others=2, limit=16) == []
    assert _admitted(connections=0, others=0, limit=4, shards=6) == [1, 1, 1, 2]


def test_share_of_a_cache_limit_leaves_two_shards_and_never_less_than_half():
    from streaming.cache.budget import share_of
    assert share_of(100, 4) == 75  # Plenty of room: three quarters.
    assert share_of(100, 20) == 60  # Two of the largest shards stay free.
    assert share_of(100, 40) == 50  # Never less than half (the share it had before).


@pytest.mark.filterwarnings('ignore:predownload=0')
def test_a_download_for_a_shard_every_reader_is_past_is_not_made(logged_remote, tmp_path,
                                                                  monkeypatch):
    """A download that waited for its thread while readers fetched, read and let go of its
    shard is not made; one whose shard they pass while it comes is marked passed (evicted
    first), not ahead (where it stayed above every shard still needed)."""
    total = sum(os.path.getsize(os.path.join(logged_remote, n))
                for n in os.listdir(logged_remote) if n.startswith('shard.'))
    dataset = StreamingDataset(remote=logged_remote, local=str(tmp_path / 'cache'),
                               batch_size=8, cache_limit=total // 4, predownload=0)
    starts = dataset.sample_offset_per_shard
    order = np.arange(dataset.num_samples).reshape(1, 1, -1, 1)  # Sample i read at time i.
    schedule = _Schedule(dataset._node_prefetch(), None)
    walk = EpochWalk(order, starts, dataset.num_shards, track_last=True)
    assert list(walk.passed(int(starts[2]))) == [0, 1]  # Readers are past shards 0 and 1.
    schedule._fetch(walk, 1, int(starts[1]), 1)
    cache = dataset.cache
    assert cache.states[1] == REMOTE and cache.egress() == (0, 0)  # Not fetched for nobody.
    schedule._fetch(walk, 3, int(starts[3]), 1)
    assert cache.states[3] == LOCAL and cache.access[3] > 0  # Ahead: needed later.
    prepare = cache.prepare

    def readers_pass_meanwhile(shard_id: int, blocking: bool = True) -> bool:
        done = prepare(shard_id, blocking)
        list(walk.passed(int(starts[5])))  # Past shards 2-4 while shard 4 came.
        return done

    monkeypatch.setattr(cache, 'prepare', readers_pass_meanwhile)
    schedule._fetch(walk, 4, int(starts[4]), 1)
    assert cache.states[4] == LOCAL and cache.access[4] == 0  # Evicted before any other.
    assert cache.egress()[1] == 2


@pytest.mark.filterwarnings('ignore:predownload=0')
def test_under_a_cache_limit_the_shard_needed_last_is_evicted_first(logged_remote, tmp_path):
    """Shards fetched ahead are evicted after every shard read, the one needed last first,
    whenever each was fetched: marks ranked by fetch time made the first fetched, needed
    soonest, go first (its reader fetched it again and evicted the next: a cascade)."""
    total = sum(os.path.getsize(os.path.join(logged_remote, n))
                for n in os.listdir(logged_remote) if n.startswith('shard.'))
    dataset = StreamingDataset(remote=logged_remote, local=str(tmp_path / 'cache'),
                               batch_size=8, cache_limit=total // 4, predownload=0)
    prefetch = dataset._node_prefetch()
    dataset[0]  # Shard 0 read now.
    prefetch.fetch(1, first_use=100)
    time.sleep(0.01)
    # The node's schedule thread begins the plan whenever it gets the CPU (CI saw it 77 ms
    # late): marks must not depend on when, so begin it again here, between two fetches.
    _Schedule(prefetch, None)._begin(dataset._shared.array('prefetch_plan'))
    prefetch.fetch(2, first_use=500)  # Fetched later, needed later.
    time.sleep(0.01)
    prefetch.fetch(3, first_use=300)
    access = dataset.cache.access
    assert access[0] < access[2] < access[3] < access[1]
    for victim in (0, 2, 3, 1):
        assert dataset.cache.evict_coldest() == victim
