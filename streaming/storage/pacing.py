"""How fast to send requests to a store that throttles: AIMD on the request rate, per node.

A store refuses requests beyond its request-rate budget (S3 ``503 SlowDown``, GCS ``429``,
Azure ``503 ServerBusy``). Retrying each refusal on its own schedule keeps the node asking at
the rate that was refused; halving how many downloads are in flight does not help either once
one download at a time already asks faster than the node's share (a 4 MB shard takes ~0.4 s).
So every request of the node waits for its turn here (``wait_turn``):

* **unlimited until the first refusal.** No pacing at all while the store says nothing.
* **the first refusal sets the rate to what the store served**: the requests answered per
  second over about the last ``TAU`` seconds (a node's share of the budget, found without
  asking other nodes), or, before any answer, ``FIRST_KEEP`` of the rate the node was asking at
  (a refusal before any answer says the node's share is small: a fleet whose nodes all start
  at once asks many times the budget).
* **each later refusal cuts the rate** to ``BETA`` of itself, or lower, to what the store
  served the node since the last cut (answers per second) when that is less, but never below
  ``MIN_KEEP`` of the rate (answers are counted when a body is complete, so a short interval
  under-counts them) nor below ``MIN_RATE``; at most once per ``COOLDOWN`` seconds (refusals of
  requests sent before a cut arrive after it and must not cut again). A fleet that started
  together far above the store's budget is down to it after a cut or two instead of five.
* **additive growth**: while requests are waiting for their turn, the rate grows by ``GROWTH``
  of the rate before the last cut (plus ``MIN_STEP``), per second. Nodes that grow by the same
  rule and cut by the same factor converge to equal shares without talking to each other (AIMD).
  Once ``PROBE_AFTER`` seconds have passed without a cut, the step doubles every ``PROBE``
  seconds more (``PROBE_DOUBLINGS`` times at most): a node cut deep by a busy start, or whose
  peers have finished, finds the room left in seconds instead of minutes (starving a node that
  sends little is what a cut to the served rate would otherwise risk), while nodes that share
  the budget are cut every few seconds and so grow by the plain step, which probes the budget
  gently.

Turns are spaced ``1/rate`` apart with a little jitter; a waiting request holds no turn ahead
but looks again every ``RECHECK`` seconds, so a grown rate serves the queue at once. The state
lives in a few floats: a process's own by default; ``share`` puts it in a node-wide shared array
under a node-wide lock, so that every rank and DataLoader worker of the node takes turns from
one rate (the dataset does this when it is built). ``time.monotonic`` is one clock for every
process of the machine.
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from contextlib import AbstractContextManager
from typing import Callable

import numpy as np

__all__ = ['PACER', 'PACING_FIELDS', 'Pacer']

# The fields of the state array: the rate and when the next turn is, the last cut, refusals
# seen, the rate before the last cut, growth's and waits' times, two decaying counts (of
# answered and of sent requests: each is a rate once divided by ``TAU``) with their times, and
# the answers since the last cut.
(_RATE, _NEXT_AT, _CUT_AT, _THROTTLES, _BASE, _GREW_AT, _WAITED_AT, _OK, _OK_AT, _SENT,
 _SENT_AT, _SERVED) = range(12)
PACING_FIELDS = 12


class Pacer:
    """Turns for requests; see the module's docstring for the rules."""

    BETA = 0.7  # The share of its rate a node keeps at a refusal.
    COOLDOWN = 0.5  # Seconds between two cuts.
    GROWTH = 0.03  # Per second while held back: this share of the rate before the last cut.
    MIN_RATE = 0.2  # Requests per second a throttled node may always send.
    MIN_STEP = 0.05  # Requests per second added per second at the least (a node cut deep).
    MIN_KEEP = 0.3  # A cut keeps at least this share of the rate.
    FIRST_KEEP = 0.2  # A refusal before any answer: this share of the rate the node asked at.
    PROBE_AFTER = 2.0  # Seconds without a cut after which the growth's step doubles...
    PROBE = 1.0  # ...every this many seconds more...
    PROBE_DOUBLINGS = 5  # ...this many times at most.
    RECHECK = 0.25  # Seconds a waiting request sleeps at most before it looks again.
    TAU = 1.0  # Seconds over which the rates of answers and of requests are measured.
    JITTER = 0.2  # Turns are spaced 1/rate times a factor in [1 - JITTER/2, 1 + JITTER/2].

    def __init__(self) -> None:
        self._clock: Callable[[], float] = time.monotonic
        self._sleep: Callable[[float], None] = time.sleep
        self.reset()

    def reset(self) -> None:
        """A process-local state, unlimited (also what a forked child starts from)."""
        self.state = np.zeros(PACING_FIELDS, np.float64)
        self._lock: AbstractContextManager = threading.Lock()

    def share(self, state: np.ndarray, lock: AbstractContextManager) -> None:
        """Keep the state in ``state`` (``PACING_FIELDS`` float64, shared) under ``lock``."""
        if state.shape != (PACING_FIELDS,) or state.dtype != np.float64:
            raise ValueError(f'the pacing state must be {PACING_FIELDS} float64, got '
                             f'{state.shape} {state.dtype}.')
        self.state, self._lock = state, lock

    # ---- readings ---------------------------------------------------------------------------
    @property
    def rate(self) -> float | None:
        """Requests per second allowed now, or None (never refused: unlimited)."""
        rate = float(self.state[_RATE])
        return rate if rate > 0 else None

    @property
    def throttles(self) -> int:
        """Refusals seen (by the whole node when shared)."""
        return int(self.state[_THROTTLES])

    # ---- the rules ----------------------------------------------------------------------------
    def wait_turn(self, deadline: float | None = None) -> float:
        """Sleep until this request's turn (not past ``deadline``); the seconds slept.

        A waiting request reserves no turn ahead: it looks again at least every ``RECHECK``
        seconds, so a rate grown (or cut) meanwhile applies to the requests already waiting.
        (Reserved turns at a rate cut deep would hold a node's queue back for many seconds
        after the store has room again.)
        """
        slept, first = 0.0, True
        while True:
            now = self._clock()
            wait = self.try_turn(count=first)
            first = False
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - now))
            if wait <= 0:
                return slept
            nap = min(wait, self.RECHECK)
            self._sleep(nap)
            slept += nap

    def try_turn(self, count: bool = True) -> float:
        """Take the turn if it is due (0.0), else the seconds until it is.

        ``count``: a new request (it counts toward the rate the node asks at).
        """
        with self._lock:
            state, now = self.state, self._clock()
            if count:
                self._count(_SENT, now)
            if state[_RATE] <= 0:
                return 0.0
            self._grow(now)
            turn = float(state[_NEXT_AT])
            if turn > now:
                state[_WAITED_AT] = now
                return turn - now
            spacing = random.uniform(1 - self.JITTER / 2, 1 + self.JITTER / 2) / state[_RATE]
            state[_NEXT_AT] = now + spacing
            return 0.0

    def succeeded(self) -> None:
        """A request was answered (not refused): counts toward the rate the store serves."""
        with self._lock:
            self._count(_OK, self._clock())
            self.state[_SERVED] += 1

    def throttled(self) -> None:
        """The store refused a request: set or cut the rate (at most once per cooldown)."""
        with self._lock:
            state, now = self.state, self._clock()
            state[_THROTTLES] += 1
            if state[_RATE] > 0 and now - state[_CUT_AT] < self.COOLDOWN:
                return
            if state[_RATE] <= 0:  # The first refusal: what the store serves, or less.
                served = self._rate_of(_OK, now)
                new = served if served > 0 else self.FIRST_KEEP * self._rate_of(_SENT, now)
            else:
                self._grow(now)
                # To what the store served since the last cut, if that is less than BETA of it.
                served = state[_SERVED] / max(self.COOLDOWN, now - state[_CUT_AT])
                new = min(self.BETA * state[_RATE], max(served, self.MIN_KEEP * state[_RATE]))
            state[_SERVED] = 0.0  # The next cut judges only what is answered from now on.
            state[_BASE] = max(state[_RATE], new)
            state[_RATE] = max(self.MIN_RATE, new)
            state[_CUT_AT] = state[_GREW_AT] = now
            # The next turn comes no sooner than one new spacing from now.
            state[_NEXT_AT] = max(float(state[_NEXT_AT]), now + 1 / state[_RATE])

    def _count(self, field: int, now: float) -> None:
        """One more event in the decaying count ``field``."""
        self.state[field] = self._decayed(field, now) + 1
        self.state[field + 1] = now

    def _decayed(self, field: int, now: float) -> float:
        return float(self.state[field]) * math.exp(-max(0.0, now - self.state[field + 1]) /
                                                   self.TAU)

    def _rate_of(self, field: int, now: float) -> float:
        """Events per second lately (over about the last ``TAU`` seconds)."""
        return self._decayed(field, now) / self.TAU

    def _grow(self, now: float) -> None:
        state = self.state
        # Held back lately: a request waited for its turn within the last two turns (or second).
        lately = max(1.0, 2.0 / state[_RATE]) if state[_RATE] > 0 else 1.0
        calm = now - state[_CUT_AT]
        if now - state[_WAITED_AT] < lately and calm >= self.COOLDOWN:
            # Past PROBE_AFTER seconds without a cut the step doubles every PROBE seconds (up to
            # 2**PROBE_DOUBLINGS): a node cut deep, or whose peers have finished, finds the room
            # left in seconds, while nodes that share the budget (and so are cut every few
            # seconds) do not probe it with growth that speeds up.
            calm_long = max(0.0, calm - self.PROBE_AFTER)
            faster = 2 ** min(self.PROBE_DOUBLINGS, calm_long / self.PROBE)
            step = (self.GROWTH * state[_BASE] + self.MIN_STEP) * faster
            state[_RATE] += step * max(0.0, now - state[_GREW_AT])
        state[_GREW_AT] = now


PACER = Pacer()

if hasattr(os, 'register_at_fork'):
    # A forked child must not wait on a lock a parent's thread held at the fork (a shared state
    # is attached again by the dataset the child uses).
    os.register_at_fork(after_in_child=lambda: PACER.reset() if isinstance(
        PACER._lock, type(threading.Lock())) else None)
