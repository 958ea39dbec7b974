"""The cache's answers to the node's download schedule: the epoch walk and the byte budget.

``EpochWalk`` and ``DownloadBudget`` are shared by the real schedule (``cache/prefetch.py``)
and its replay (``plan/simulate.py``); the end-to-end behaviour is in
tests/dataset/test_prefetch.py and tests/dataset/test_cache.py.
"""

from __future__ import annotations

import numpy as np

from streaming.cache.budget import AUTO_AHEAD_BYTES, DownloadBudget, share_of
from streaming.cache.shard_cache import LOCAL, REMOTE
from streaming.cache.walk import EpochWalk

# Three shards of two samples; one rank, one worker, batches of one: sample i is read at time i.
# Reads: shard 2 at 0-1, shard 0 at 2 and 4, shard 1 at 3 and 5.
ORDER = np.array([4, 5, 0, 2, 1, 3], np.int64).reshape(1, 1, 6, 1)
STARTS = np.array([0, 2, 4, 6], np.int64)


def test_walk_gives_first_uses_in_order_and_passes_shards_by_last_use() -> None:
    walk = EpochWalk(ORDER, STARTS, 3, track_last=True)
    states = np.full(3, REMOTE, np.uint8)
    assert walk.next_remote(states, None) == (2, 0)
    assert walk.next_remote(states, None) == (2, 0)  # Not taken yet: asked again, same answer.
    walk.take()
    states[0] = LOCAL  # Fetched by a reader meanwhile: passed over.
    assert walk.next_remote(states, horizon=3) is None  # Shard 1 is first used at 3.
    assert walk.next_remote(states, None) == (1, 3)
    walk.take()
    assert walk.next_remote(states, None) is None
    assert walk.walked and not walk.finished  # No reader is past a last use yet.
    assert list(walk.passed(2)) == [2]
    assert list(walk.passed(2)) == []  # Each shard once.
    assert list(walk.passed(5)) == [0]  # Shard 1's last use (5) is not before 5.
    assert list(walk.passed(6)) == [1]
    assert walk.finished


def test_walk_without_last_uses_is_finished_once_walked() -> None:
    walk = EpochWalk(ORDER, STARTS, 3, track_last=False)
    assert walk.next_remote(np.full(3, LOCAL, np.uint8), None) is None
    assert walk.finished
    assert list(walk.passed(100)) == []


def test_budget_without_a_limit_is_bounded_by_the_default_lookahead_only() -> None:
    assert DownloadBudget.for_limit(None, 0, 10) == DownloadBudget(AUTO_AHEAD_BYTES, None)
    budget = DownloadBudget.for_limit(None, 0, 8 << 30)  # A shard above the default still fits.
    assert budget.ahead == 8 << 30
    assert budget.admits(1 << 30, 0, [1 << 40], lambda size: True)


def test_budget_under_a_limit_admits_what_fits_ahead_and_in_flight() -> None:
    budget = DownloadBudget.for_limit(1000, 200, 100)
    assert (budget.ahead, budget.reservable) == (share_of(1000, 100), share_of(800, 100))
    assert (budget.ahead, budget.reservable) == (750, 600)
    room = lambda size: True  # noqa: E731
    full = lambda size: False  # noqa: E731
    assert budget.admits(100, None, [], room)
    assert not budget.admits(100, 700, [], room)  # Fetched ahead past 750 bytes.
    assert budget.admits(50, 700, [], room)
    assert not budget.admits(50, 0, [], full)  # The cache has no room for it ahead of use.
    assert budget.admits(50, None, [], full)  # Needed now: the cache evicts for it.
    assert not budget.admits(100, None, [300, 250], room)  # 650 reserved in flight > 600.
    assert budget.admits(50, None, [300, 250], room)
    assert budget.admits(700, None, [], room)  # The first download in flight always may.


def test_walk_behind_its_readers_skips_shards_past_their_last_use() -> None:
    """Readers fetched shards 2 and 0 themselves and every one is past their last uses (1 and
    4) by time 5: those shards, evicted since, are not fetched again; shard 1 (read at 5) is."""
    walk = EpochWalk(ORDER, STARTS, 3, track_last=True)
    states = np.full(3, REMOTE, np.uint8)
    assert walk.next_remote(states, None, now=1) == (2, 0)  # Read at 1: still needed.
    assert walk.next_remote(states, None, now=5) == (1, 3)
    walk.take()
    assert walk.next_remote(states, None, now=5) is None
    untracked = EpochWalk(ORDER, STARTS, 3, track_last=False)  # Nothing evicted: no last uses.
    assert untracked.next_remote(states, None, now=5) == (2, 0)
    # A download started before ends after: its shard is past once ``passed`` reached it.
    assert not any(walk.is_past(shard) for shard in range(3))
    assert list(walk.passed(5)) == [2, 0]
    assert [walk.is_past(shard) for shard in range(3)] == [True, False, True]
    assert not untracked.is_past(2) and list(untracked.passed(5)) == []
