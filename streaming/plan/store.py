"""A store's request limit and the node's pacer, in a plan's simulated time.

The store: ``request_limit`` GETs/s for the whole run, a token bucket with one second's worth
banked that refuses a request finding no token (the way the link emulator's ``StoreLimits``
answers for a real store). The nodes a plan simulates share one bucket (their part of the
limit); a node simulated alone meets its equal share.

The node: every GET takes its turn from the library's own ``Pacer`` (``storage/pacing.py``)
on the simulation's clock, unpaced until the first refusal, then AIMD on the request rate. As
``Pacer.wait_turn`` does, a GET whose turn is not due holds no turn ahead: it looks again every
``Pacer.RECHECK`` seconds (sooner if its turn is sooner), so a rate grown while it waits serves
it at once. A refusal is known ``ttfb`` after the request; it cuts the pacer's rate and the
scheduler's count of downloads in flight (``on_refusal``), and the GET waits the retry policy's
backoff for a refusal (``call_with_retries`` in ``storage/retry.py``) before it takes a turn
again, its random jitter drawn as the library draws it (from the plan's seeded generator). At
the jitter's mean instead, every refused GET of a node came back at one instant and met the
others' again: a lockstep that no real fleet shows, which starved the same nodes for seconds.
Which node the store serves first then depends on those draws, so a plan of a throttled store
is simulated over several draws and reports the median one (``plan/core.py``).

A node's GETs due together leave ``send_gap`` apart (``RunSettings.send_gap_s``: the time
the node takes to send one; 0, they leave at one instant). Nodes whose GETs leave at one
instant reach the store one node after another, so the first node's burst takes the bucket's
banked second and every other node's first GETs are refused; on a real machine the nodes'
bursts interleave at the store, so that the banked second goes to the nodes that start first
(``RunSettings.start_spread_s``) and is shared by them (``docs/plan.md``, Calibration).
"""

from __future__ import annotations

import heapq
import random
from typing import Callable

from streaming.plan.pieces import Transfer
from streaming.storage.pacing import Pacer
from streaming.storage.retry import RetryPolicy

__all__ = ['SimPacer', 'StoreQueue', 'ThrottledStore', 'TokenBucket']

_AT_STORE, _REFUSED, _TURN, _LOOK = range(4)
JITTER_RANGE = (0.5, 1.0)  # ``RetryPolicy.delay`` scales by a uniform factor in this range.


class TokenBucket:
    """The store's budget: ``rate`` tokens a second, one second's worth banked.

    A request that finds no token is refused and takes none.
    """

    def __init__(self, rate: float) -> None:
        self.rate, self.capacity = rate, max(1.0, rate)
        self.tokens, self.at = self.capacity, 0.0

    def admit(self, at: float) -> bool:
        self.tokens = min(self.capacity, self.tokens + max(0.0, at - self.at) * self.rate)
        self.at = max(self.at, at)
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class StoreQueue:
    """The store's answers, begun one after another at ``rate`` GETs/s (None: each at once).

    A GET's first byte comes ``ttfb`` after it reached the store, or once the store has begun
    it, whichever is later: a link that delays every answer by ``ttfb`` hides a store that
    keeps up, and shows one that does not (as the link emulator holds an answer until ``ttfb``
    after its request, however soon the store gave it).
    """

    def __init__(self, rate: float | None) -> None:
        self.rate, self.free_at = rate, 0.0

    def answer(self, at: float, ttfb: float) -> float:
        """When the first byte of a GET that reached the store at ``at`` arrives."""
        if not self.rate:
            return at + ttfb
        self.free_at = max(self.free_at, at) + 1.0 / self.rate
        return max(at + ttfb, self.free_at)


class SimPacer(Pacer):
    """The library's pacer on a simulated clock, its turns at their mean spacing.

    The simulation asks ``try_turn`` itself (``ThrottledStore``): in ``wait_turn`` the
    simulated clock would not move.
    """

    JITTER = 0.0

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self._clock = clock
        self._sleep = lambda seconds: None


class ThrottledStore:
    """One node's GETs through its pacer to its share of a throttling store (see module doc)."""

    def __init__(self, bucket: TokenBucket, ttfb: float, clock: Callable[[], float],
                 on_refusal: Callable[[], None], seed: int = 0,
                 queue: StoreQueue | None = None, send_gap: float = 0.0) -> None:
        self.bucket, self.ttfb, self.clock, self.on_refusal = bucket, ttfb, clock, on_refusal
        self.send_gap, self.last_sent = send_gap, -float('inf')
        self.queue = queue or StoreQueue(None)
        self.jitter = random.Random(seed)
        self.pacer = SimPacer(clock)
        self.policy = RetryPolicy()
        self.events: list[tuple[float, int, int, Transfer]] = []
        self.count = 0

    def request(self, transfer: Transfer, new: bool = True) -> float | None:
        """``transfer``'s GET asks for its turn now; when it is sent, or None (not due yet).

        Sent ``send_gap`` after the node's last GET at the soonest (maybe later than now).

        ``new``: a GET not asked for before (it counts toward the rate the node asks at). One
        not due looks again later (``due``).
        """
        wait = self.pacer.try_turn(count=new)
        if wait > 0:
            self._push(self.clock() + min(wait, self.pacer.RECHECK), _LOOK, transfer)
            return None
        sent = max(self.clock(), self.last_sent + self.send_gap)  # One at a time.
        self.last_sent = sent
        self._push(sent, _AT_STORE, transfer)
        return sent

    def next_event(self) -> float:
        return self.events[0][0] if self.events else float('inf')

    def due(self) -> list[float]:
        """Handle what is due by now; returns when the GETs sent again were sent."""
        now, sent = self.clock(), []
        while self.events and self.events[0][0] <= now + 1e-12:
            at, _, stage, transfer = heapq.heappop(self.events)
            if stage == _AT_STORE:
                if self.bucket.admit(at):
                    transfer.first_byte_at = self.queue.answer(at, self.ttfb)
                    self.pacer.succeeded()
                else:
                    self._push(at + self.ttfb, _REFUSED, transfer)
            elif stage == _REFUSED:
                self.pacer.throttled()
                self.on_refusal()
                transfer.refusals += 1
                self._push(at + self.backoff(transfer.refusals), _TURN, transfer)
            else:  # A turn after a refusal's backoff is asked for anew; a look is not.
                at = self.request(transfer, new=stage == _TURN)
                if at is not None:
                    sent.append(at)
        return sent

    def backoff(self, refusals: int) -> float:
        """The retry policy's wait before a refused GET's next turn (its jitter drawn)."""
        policy = self.policy
        delay = min(policy.backoff_max, policy.backoff * 2 ** min(refusals - 1, 2)) * \
            self.jitter.uniform(*JITTER_RANGE)
        return min(policy.backoff_max, 2 * delay)  # Doubled for a throttling answer.

    def _push(self, at: float, stage: int, transfer: Transfer) -> None:
        self.count += 1
        heapq.heappush(self.events, (at, self.count, stage, transfer))
