"""Nodes that run together: one store's request budget, and one barrier a step.

A training step ends with every rank's gradients exchanged, so no node takes step ``g`` before
every node has its batches of step ``g`` (``StepBarrier``); and the nodes' GETs draw on one
store's budget, each node through its own pacer (``plan/store.py``). The nodes' simulations
therefore move together, each in turn, in the order of their clocks.
"""

from __future__ import annotations

import heapq
from typing import Generator

import numpy as np

from streaming.plan.inputs import DatasetShape, RunSettings
from streaming.plan.orders import NodeSteps
from streaming.plan.pieces import NodeRun
from streaming.plan.profiles import LinkProfile
from streaming.plan.simulate import MAX_DOWNLOADS, NodeSimulation
from streaming.plan.store import StoreQueue, TokenBucket

__all__ = ['THROTTLE_DRAWS', 'StepBarrier', 'simulate_draws', 'simulate_nodes']

# Draws of the refused GETs' retry jitter a plan of a throttling store is simulated over.
THROTTLE_DRAWS = 41


class StepBarrier:
    """When each step can be taken: once every node still running has its batches ready."""

    def __init__(self, steps: dict[int, list[int]]) -> None:
        self.steps = steps  # Per node, its steps per epoch.
        self.running = set(steps)
        self.arrived: dict[tuple[int, int], dict[int, float]] = {}
        self.opened: set[tuple[int, int]] = set()
        self.opened_at = 0.0  # When the last step opened.

    def arrive(self, node: int, epoch: int, step: int, at: float) -> float | None:
        """``node`` has step ``step`` ready at ``at``: when all take it (None: not known yet)."""
        key = (epoch, step)
        arrived = self.arrived.setdefault(key, {})
        arrived.setdefault(node, at)
        if any(n not in arrived for n in self.running
               if len(self.steps[n]) > epoch and self.steps[n][epoch] > step):
            return None
        opened = max(arrived.values())
        if key not in self.opened:
            self.opened.add(key)
            self.opened_at = opened
        return opened

    def leave(self, node: int) -> None:
        """``node`` is done (or was cut): nobody waits for it any more."""
        self.running.discard(node)


def simulate_nodes(shape: DatasetShape, run: RunSettings, profile: LinkProfile,
                   epochs: dict[int, list[NodeSteps]], first_request: float,
                   in_flight: int | None = None, max_downloads: int = MAX_DOWNLOADS,
                   draw: int = 0) -> dict[int, NodeRun]:
    """Simulate each node through its epochs (``epochs[node]``), together (see module doc).

    The nodes simulated stand for all of them: under a request limit they share their part of
    it (``request_limit`` times simulated over all nodes). ``draw`` seeds the random jitter of
    the retries of refused GETs (``plan/store.py``).
    """
    together = len(epochs) > 1
    bucket = TokenBucket(profile.request_limit * len(epochs) / run.nodes) \
        if profile.request_limit and together else None
    queue = StoreQueue(profile.store_rate * len(epochs) / run.nodes) \
        if profile.store_rate and together else None
    barrier = StepBarrier({node: [s.steps for s in steps] for node, steps in epochs.items()}) \
        if together else None
    sims = {}
    moving: list[tuple[float, int, Generator[float, float | None, None], float | None]] = []
    for node, steps in epochs.items():
        sim = NodeSimulation(shape, run, profile, in_flight, max_downloads, bucket, barrier, node,
                             draw, queue)
        sim.out.steps_planned = sum(s.steps for s in steps)
        sim.out.samples_planned = int(sum(s.samples.sum() for s in steps))
        sim.out.reads_planned = sum(len(rank) for s in steps for step in s.reads
                                    for rank in step)
        sims[node] = sim
        moving.append((0.0, node, sim.moves(steps, first_request), None))
    waiting: list[tuple[int, Generator[float, float | None, None]]] = []
    while moving:  # The node whose next move is soonest moves.
        at, node, moves, wake = heapq.heappop(moving)
        opened = None if barrier is None else len(barrier.opened)
        try:
            until: float | None = moves.send(wake)
        except StopIteration:
            until = None
            if barrier is not None:
                barrier.leave(node)
        if until == float('inf'):
            waiting.append((node, moves))  # At the barrier: woken when a step opens.
        elif until is not None:
            heapq.heappush(moving, (until, node, moves, None))
        if waiting and barrier is not None and (len(barrier.opened) != opened or until is None):
            woken = max(barrier.opened_at, at)
            moving.extend((woken, n, g, woken) for n, g in waiting)
            heapq.heapify(moving)
            waiting = []
    if waiting:
        raise RuntimeError('plan: nodes wait at a step nobody else reaches; this is a bug in '
                           'the planner')
    return {node: sim.result() for node, sim in sims.items()}


def simulate_draws(shape: DatasetShape, run: RunSettings, profile: LinkProfile,
                   epochs: dict[int, list[NodeSteps]], first_request: float,
                   in_flight: int | None = None, max_downloads: int = MAX_DOWNLOADS
                   ) -> tuple[dict[int, NodeRun], list[float], list[float]]:
    """``simulate_nodes`` over draws of the retries' jitter and the nodes' start instants.

    Under a request limit, ``THROTTLE_DRAWS`` draws (one without); the plan is the draw whose
    slowest first batch is the median, and every draw's slowest first batch comes with it,
    sorted, and the nodes' own first batches, fastest to slowest, each the median over the
    draws (as a measured fleet's are over its epochs). Under a throttling store, which node
    the store serves first depends on when the nodes begin and when the refused GETs come
    back, so one draw is one of many runs, not what a run looks like. A draw cut by the
    download budget ends the draws (its run is extrapolated anyway).
    """
    draws = []
    for draw in range(THROTTLE_DRAWS if profile.request_limit else 1):
        runs = simulate_nodes(shape, run, profile, epochs, first_request, in_flight,
                              max_downloads, draw)
        draws.append((max(r.first_batch_s for r in runs.values()), draw, runs))
        if any(r.cut for r in runs.values()):
            break
    draws.sort(key=lambda d: d[:2])
    own = [sorted(r.first_batch_s if r.first_ready_s is None else
                  min(r.first_batch_s, r.first_ready_s) for r in runs.values())
           for _, _, runs in draws]
    staircase = [float(np.median([firsts[i] for firsts in own])) for i in range(len(own[0]))]
    return draws[len(draws) // 2][2], [first for first, _, _ in draws], staircase
