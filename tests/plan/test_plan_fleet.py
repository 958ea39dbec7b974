"""Nodes planned together: one throttling store met through the library's own pacer, and one
barrier a step (``streaming/plan/fleet.py``, ``streaming/plan/store.py``)."""

from __future__ import annotations

import pytest

from streaming.plan import DatasetShape, RunSettings, get_profile, plan
from streaming.plan.fleet import StepBarrier
from streaming.plan.store import SimPacer, TokenBucket
from streaming.storage.pacing import Pacer


def test_nodes_share_a_throttling_store_through_their_pacers() -> None:
    shape = DatasetShape.synthetic(6_000, 20, 1000)  # 300 small shards.
    limit = 20.0
    result = plan(shape, RunSettings(nodes=2, workers=2, batch_size=16),
                  get_profile('same-region').replace(request_limit=limit), quality=False)
    nodes = result['nodes']
    refused = sum(n['throttled_gets'] for n in nodes)
    answered = sum(n['gets'] for n in nodes) - refused
    assert refused > 0  # The nodes start unpaced, asking above the budget.
    assert answered >= shape.num_shards
    epoch = max(n['epoch_s'][0] for n in nodes)
    # The store never served above its budget (one second's worth banked at the start).
    assert answered <= limit * epoch + limit + len(nodes) * 2
    assert epoch >= (shape.num_shards - limit) / limit
    # And the pacers found most of it: the epoch is not many times the budget's bound.
    assert epoch < 3 * shape.num_shards / limit


def test_nodes_take_each_step_together() -> None:
    """The nodes read different shards, so their batches are ready at different times; at each
    step's barrier (a training step's all-reduce) they take it together: same first batch, same
    end."""
    shape = DatasetShape.synthetic(8_000, 50, 20_000)
    result = plan(shape, RunSettings(nodes=3, workers=2, batch_size=16, steps_per_s=20.0),
                  get_profile('same-region').replace(link_rate=4e6), quality=False)
    firsts = {n['first_batch_s'] for n in result['nodes']}
    ends = {n['epoch_s'][0] for n in result['nodes']}
    assert len(firsts) == 1 and len(ends) == 1, (firsts, ends)


def test_the_barrier_opens_when_every_running_node_arrives() -> None:
    barrier = StepBarrier({0: [2], 1: [2], 2: [1]})
    assert barrier.arrive(0, 0, 0, 1.0) is None
    assert barrier.arrive(1, 0, 0, 3.0) is None
    assert barrier.arrive(2, 0, 0, 2.0) == 3.0 and barrier.opened_at == 3.0
    # Node 2 has no step 1: nobody waits for it there; a node that left is not waited for.
    assert barrier.arrive(0, 0, 1, 4.0) is None
    barrier.leave(1)
    assert barrier.arrive(0, 0, 1, 4.0) == 4.0


def test_the_simulated_pacer_is_the_librarys() -> None:
    clock = [0.0]
    pacer = SimPacer(lambda: clock[0])
    assert isinstance(pacer, Pacer) and pacer.rate is None
    assert pacer.wait_turn() == 0.0  # Unpaced until refused.
    pacer.throttled()
    assert pacer.rate == pytest.approx(max(Pacer.MIN_RATE, Pacer.FIRST_KEEP * 1.0))
    first, second = pacer.wait_turn(), pacer.wait_turn()
    assert second - first == pytest.approx(1 / pacer.rate)  # Turns at their mean spacing.
    bucket = TokenBucket(2.0)
    assert [bucket.admit(0.0) for _ in range(3)] == [True, True, False]
    assert bucket.admit(0.5) and not bucket.admit(0.5)
