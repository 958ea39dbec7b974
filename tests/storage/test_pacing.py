"""Throttling: the pacer's rules (on a simulated clock), refusals that use up no attempt, one pace
shared by a node's processes, and an epoch through a store that refuses more than the retries.
"""

from __future__ import annotations

import multiprocessing
import os
import random

import numpy as np
import pytest

from streaming.coord.lock import FileLock
from streaming.storage import TransientError, pacing
from streaming.storage.pacing import PACING_FIELDS, Pacer
from streaming.storage.retry import RetriesExhausted, RetryPolicy, call_with_retries
from tests.storage import servers
from tests.storage.conftest import s3_env
from tests.storage.test_e2e import read_all, write


class Clock:
    """A simulated monotonic clock whose sleeps advance it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def paced(clock: Clock, served: int = 0, every: float = 0.1) -> Pacer:
    """A pacer on ``clock``, after ``served`` answers ``every`` seconds apart."""
    pacer = Pacer()
    pacer._clock, pacer._sleep = clock, clock.sleep
    for _ in range(served):
        pacer.succeeded()
        clock.sleep(every)
    return pacer


def test_no_pacing_until_the_store_refuses() -> None:
    clock = Clock()
    pacer = paced(clock)
    for _ in range(100):
        assert pacer.wait_turn() == 0.0
        pacer.succeeded()
    assert pacer.rate is None and clock.now == 1000.0


def test_the_first_refusal_sets_the_rate_the_store_served_then_turns_are_spaced() -> None:
    clock = Clock()
    pacer = paced(clock)
    for _ in range(40):  # The store answers 10 requests per second for 4 seconds.
        pacer.wait_turn()
        pacer.succeeded()
        clock.sleep(0.1)
    pacer.throttled()
    assert 8.5 <= pacer.rate <= 10.5, pacer.rate
    started = clock.now
    for _ in range(20):
        pacer.wait_turn()
    # 20 turns at ~10/s take ~2 s (each spacing jittered by +-10%).
    assert 1.6 <= clock.now - started <= 2.4, clock.now - started


def test_a_refusal_before_any_answer_sets_a_small_share_of_what_was_asked() -> None:
    clock = Clock()
    pacer = paced(clock)
    for _ in range(16):  # A start all at once: 16 requests sent, none answered yet.
        pacer.wait_turn()
    pacer.throttled()
    assert pacer.rate == pytest.approx(Pacer.FIRST_KEEP * 16, rel=0.01)


def test_refusals_cut_the_rate_once_per_cooldown_and_never_below_the_floor() -> None:
    clock = Clock()
    pacer = paced(clock, served=20, every=0.05)
    pacer.throttled()
    first = pacer.rate
    for _ in range(10):  # A burst of refusals of requests sent before the cut: one cut only.
        pacer.throttled()
    assert pacer.rate == first and pacer.throttles == 11
    for _ in range(int(first)):  # The store served the rate since the cut.
        clock.sleep(1.01 * Pacer.COOLDOWN / int(first))
        pacer.succeeded()
    pacer.throttled()
    assert pacer.rate == pytest.approx(first * Pacer.BETA, rel=0.01)
    for _ in range(60):
        clock.sleep(Pacer.COOLDOWN)
        pacer.throttled()
    assert pacer.rate == Pacer.MIN_RATE


def test_a_cut_goes_down_to_what_the_store_served_since_the_last_cut() -> None:
    clock = Clock()
    pacer = paced(clock, served=20, every=0.05)
    pacer.throttled()
    first = pacer.rate
    for _ in range(4):  # Then the store answers 2 requests per second (a busy start).
        clock.sleep(0.5)
        pacer.succeeded()
    pacer.throttled()
    deep = pacer.rate  # Below BETA of the rate: to what was served, kept above MIN_KEEP of it.
    assert deep == pytest.approx(max(4 / 2.0, Pacer.MIN_KEEP * first), rel=0.01)
    assert deep < Pacer.BETA * first * 0.8
    for _ in range(4):  # Served about the rate: the usual cut (the count began at the cut).
        clock.sleep(0.25)
        pacer.succeeded()
    pacer.throttled()
    assert pacer.rate == pytest.approx(Pacer.BETA * deep, rel=0.01)


def test_the_rate_grows_additively_only_while_requests_wait_for_turns() -> None:
    clock = Clock()
    pacer = paced(clock, served=10)
    pacer.throttled()
    rate = pacer.rate
    clock.sleep(10)  # Nobody waiting: no growth.
    pacer.wait_turn()
    assert pacer.rate == pytest.approx(rate)
    for _ in range(40):  # Requests queue for turns for a few seconds: the rate grows.
        pacer.wait_turn()
    grown = pacer.rate
    assert grown > rate * 1.1
    # Additive: about GROWTH of the rate before the cut per second (times the probe's speed-up
    # at most), not compounding.
    step = (Pacer.GROWTH * rate + Pacer.MIN_STEP) * 2 ** Pacer.PROBE_DOUBLINGS
    assert grown - rate <= step * (clock.now - 1011.0) * 1.05


def test_growth_speeds_up_only_once_the_store_has_refused_nothing_for_a_while() -> None:
    """Plain additive steps while cuts come every few seconds (nodes sharing the budget do not
    probe it ever faster); past ``PROBE_AFTER`` calm seconds the step doubles every ``PROBE``
    seconds: a node cut deep (or whose peers have finished) finds the room left within seconds.
    """
    clock = Clock()
    pacer = paced(clock, served=2)
    pacer.throttled()
    cut_at, rates = clock.now, [pacer.rate]
    plain = Pacer.GROWTH * rates[0] + Pacer.MIN_STEP  # The step right after the cut.
    # Requests queue for turns, no refusal. The rate is read at the last turn inside the calm
    # window: the jittered turn after it may land past PROBE_AFTER, where the step doubles.
    calm_at, calm_rate = cut_at, rates[0]
    while clock.now < cut_at + Pacer.PROBE_AFTER:
        pacer.wait_turn()
        if clock.now <= cut_at + Pacer.PROBE_AFTER:
            calm_at, calm_rate = clock.now, pacer.rate
    calm_gain = calm_rate - rates[0]
    assert 0 < calm_gain <= plain * (calm_at - cut_at) * 1.05, (calm_gain, plain, calm_at - cut_at)
    rates.append(pacer.rate)
    for intervals in range(1, Pacer.PROBE_DOUBLINGS + 3):
        while clock.now < cut_at + Pacer.PROBE_AFTER + intervals * Pacer.PROBE:
            pacer.wait_turn()
        rates.append(pacer.rate)
    gains = np.diff(rates[1:])
    # Faster every interval until 2**PROBE_DOUBLINGS times the plain step, then steady.
    assert (np.diff(gains[:Pacer.PROBE_DOUBLINGS]) > 0).all(), rates
    assert gains[-1] >= 0.9 * plain * 2 ** Pacer.PROBE_DOUBLINGS * Pacer.PROBE, rates
    # 1.1: the rate is read at the turns' instants, a jittered spacing apart (seen: 1.0001).
    assert gains[-1] <= 1.1 * plain * 2 ** Pacer.PROBE_DOUBLINGS * Pacer.PROBE, rates
    assert rates[-1] >= 6 * rates[0], rates  # From ~1.7/s to ~14/s within 11 s of calm.
    before = pacer.rate
    pacer.throttled()  # A cut: the plain step again.
    again, cut_at = pacer.rate, clock.now
    while clock.now < cut_at + Pacer.PROBE_AFTER:
        pacer.wait_turn()
    assert pacer.rate - again <= (Pacer.GROWTH * before + Pacer.MIN_STEP) * Pacer.PROBE_AFTER \
        * 1.05


def _share_a_store(demand: list[float], budget: float, seconds: float, counted_from: float
                   ) -> tuple[list[int], int, int]:
    """Nodes asking ``demand`` requests/s each, paced, against a store allowing ``budget``/s.

    Returns the requests served per node, refused and sent from ``counted_from`` seconds on.
    """
    clock = Clock()
    nodes = [paced(clock) for _ in demand]
    tokens, last = budget, clock.now
    send_at = [clock.now] * len(nodes)
    waiting = [False] * len(nodes)  # A request waits for its turn (looks again at send_at).
    served, refused, sent = [0] * len(nodes), 0, 0
    start = clock.now
    while clock.now - start < seconds:
        clock.now += 0.002
        tokens = min(budget, tokens + (clock.now - last) * budget)
        last = clock.now
        for i, node in enumerate(nodes):
            if clock.now < send_at[i]:
                continue
            wait = node.try_turn(count=not waiting[i])  # The simulation looks every tick.
            if wait > 0:
                waiting[i] = True
                continue
            waiting[i] = False
            send_at[i] = clock.now + 1 / demand[i]
            late = clock.now - start > counted_from
            sent += late
            if tokens >= 1:
                tokens -= 1
                node.succeeded()
                served[i] += late
            else:
                node.throttled()
                refused += late
    return served, refused, sent


@pytest.mark.parametrize('seed', [1, 2, 3])
def test_nodes_that_do_not_talk_converge_to_equal_shares_under_the_budget(seed,
                                                                           monkeypatch) -> None:
    """Two nodes asking 80 and 30 requests/s share a store that allows 20/s (refusing the rest).

    The pacer's jitter is drawn from a seeded generator, so each case is the same every run.
    Shares are equal within a factor of two (seeds 1-8: 0.72-2.10 between the two nodes' answered
    requests, with 2-3% refused; growth that sped up right after every cut kept them within
    0.84-1.59 at 3-4% refused, and probed a fleet's budget harder: docs/fleet.md).
    """
    monkeypatch.setattr(pacing.random, 'uniform', random.Random(seed).uniform)
    served, refused, sent = _share_a_store([80.0, 30.0], 20.0, 60, counted_from=20)
    assert 0.5 <= served[0] / served[1] <= 2.0, served  # Fair shares from unequal demands.
    assert sum(served) / 40 >= 0.8 * 20.0, served  # The budget is used...
    assert refused <= 0.15 * sent, (refused, sent)  # ...with few refusals.


def _throttled(times: int, retry_after: float | None = None):
    calls = []

    def operation() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise TransientError('S3 answered 503 SlowDown', retry_after=retry_after,
                                 throttled=True)
        return 'ok'
    return operation, calls


def test_refusals_use_up_no_attempt() -> None:
    operation, calls = _throttled(6)
    policy = RetryPolicy(backoff=0.001, backoff_max=0.01)
    assert call_with_retries(operation, retries=0, policy=policy, what='x',
                             throttle_limit=30.0) == 'ok'
    assert len(calls) == 7
    # Without a limit for refusals (other callers), a refusal is an attempt as before.
    operation, calls = _throttled(6)
    with pytest.raises(RetriesExhausted):
        call_with_retries(operation, retries=1, policy=policy, what='x')
    assert len(calls) == 2


def test_a_store_that_never_stops_refusing_ends_in_bounded_time() -> None:
    operation, calls = _throttled(10**9)
    pacer = Pacer()
    with pytest.raises(RetriesExhausted) as caught:
        call_with_retries(operation, retries=2, policy=RetryPolicy(0.01, 0.05), what='x',
                          pacer=pacer, throttle_limit=0.5)
    assert 0.5 <= caught.value.throttled_for < 1.5
    # Each refusal was reported; turns then came no faster than the store served (nothing).
    assert pacer.throttles == len(calls) >= 2 and pacer.rate <= 1.0


def _refuse_in_child(path: str, lock_path: str) -> None:
    pacer = Pacer()
    pacer.share(np.memmap(path, np.float64, 'r+', shape=(PACING_FIELDS,)), FileLock(lock_path))
    for _ in range(5):
        pacer.succeeded()
    pacer.throttled()


def test_one_pace_for_every_process_of_a_node(tmp_path) -> None:
    path, lock_path = str(tmp_path / 'pacing'), str(tmp_path / 'pacing.lock')
    np.zeros(PACING_FIELDS, np.float64).tofile(path)
    pacer = Pacer()
    pacer.share(np.memmap(path, np.float64, 'r+', shape=(PACING_FIELDS,)), FileLock(lock_path))
    child = multiprocessing.get_context('fork').Process(target=_refuse_in_child,
                                                         args=(path, lock_path))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert pacer.throttles == 1 and pacer.rate is not None  # Refused there, paced here.
    with pytest.raises(ValueError, match='float64'):
        pacer.share(np.zeros(3), FileLock(lock_path))


def test_an_epoch_survives_refusals_beyond_its_retries(s3, moto, monkeypatch, tmp_path) -> None:
    """Every shard's first GET is refused (503 SlowDown), download_retry=0: no shard is lost."""
    _, bucket = s3
    remote = f's3://{bucket}/ds'
    write(remote, range(120))
    proxy = servers.FaultProxy(moto.port)
    try:
        s3_env(monkeypatch, proxy.url)
        proxy.rule = lambda m, p, n: '503' if m == 'GET' and '/shard.' in p and n < 1 else None
        ids = read_all(remote, str(tmp_path / 'cache'), download_retry=0, download_timeout=30)
    finally:
        proxy.stop()
    assert sorted(ids) == list(range(120))
    assert {fault for fault, _, _ in proxy.injected} == {'503'}
    assert os.listdir(tmp_path / 'cache')


def test_in_place_reads_treat_refusals_as_the_downloads_do(s3, moto, monkeypatch,
                                                          tmp_path) -> None:
    """A file read where it lies (``sources/remote.py``: ranges, listings) outlasts refusals.

    Three 503 SlowDown answers before each range, ``retries=0``: the reads succeed, each refusal
    reported to the node's pacer instead of counted as the one attempt allowed.
    """
    from streaming.sources.remote import fetch_ranges, list_objects, read_range
    client, bucket = s3
    client.put_object(Bucket=bucket, Key='src/data.bin', Body=bytes(range(256)) * 4)
    proxy = servers.FaultProxy(moto.port)
    monkeypatch.setattr(pacing.PACER, 'state', np.zeros(PACING_FIELDS, np.float64))
    try:
        s3_env(monkeypatch, proxy.url)
        proxy.rule = lambda m, p, n: '503' if n < 3 else None
        url = f's3://{bucket}/src/data.bin'
        assert read_range(url, 10, 20, retries=0, timeout=30) == bytes(range(10, 20))
        assert [found for found, _ in list_objects(f's3://{bucket}/src/', retries=0,
                                                   timeout=30)] == [url]
        out = fetch_ranges(url, str(tmp_path / 'ranges'), [(0, 4), (256, 4)], retries=0,
                           timeout=30)
        with open(out, 'rb') as f:
            assert f.read() == bytes(range(4)) * 2
    finally:
        proxy.stop()
    assert {fault for fault, _, _ in proxy.injected} == {'503'}
    assert pacing.PACER.throttles >= 6
