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
    # Each node's own ranks had their first batches at their own time, the last when all take it.
    ready = [n['first_batch_ready_s'] for n in result['nodes']]
    assert len(set(ready)) > 1 and max(ready) == pytest.approx(firsts.pop())


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
    assert pacer.try_turn() == 0.0  # Unpaced until refused.
    pacer.throttled()
    assert pacer.rate == pytest.approx(max(Pacer.MIN_RATE, Pacer.FIRST_KEEP * 1.0))
    spacing = 1 / pacer.rate
    assert pacer.try_turn() == pytest.approx(spacing)  # The next turn is one spacing away...
    assert pacer.try_turn(count=False) == pytest.approx(spacing)  # ...and asking again
    clock[0] += spacing  # reserves nothing: each waiting request looks again.
    assert pacer.try_turn(count=False) == 0.0
    # Held back meanwhile, the rate grew: the next turn is one (shorter) mean spacing away.
    assert pacer.rate > 1 / spacing
    assert pacer.try_turn() == pytest.approx(1 / pacer.rate)
    bucket = TokenBucket(2.0)
    assert [bucket.admit(0.0) for _ in range(3)] == [True, True, False]
    assert bucket.admit(0.5) and not bucket.admit(0.5)


def test_a_nodes_burst_leaves_together_and_a_waiting_get_holds_no_turn() -> None:
    """Two nodes' GETs due at one instant: the first node's burst takes the store's banked
    second, the second node's are refused; once paced, a GET not due looks again (no turn held
    ahead) and is sent when its turn comes."""
    from streaming.plan.pieces import Transfer
    from streaming.plan.store import ThrottledStore
    clock = [0.0]
    bucket = TokenBucket(4.0)
    refused = [0, 0]
    stores = [ThrottledStore(bucket, 0.04, lambda: clock[0],
                             lambda n=n: refused.__setitem__(n, refused[n] + 1))
              for n in range(2)]
    bursts = [[Transfer(shard, 1.0, float('inf'), True) for shard in range(4)] for _ in stores]
    for store, burst in zip(stores, bursts):
        assert [store.request(t) for t in burst] == [0.0] * 4  # Unpaced: all sent now.
    clock[0] = 0.0
    for store in stores:
        store.due()
    assert all(t.first_byte_at == pytest.approx(0.04) for t in bursts[0])
    assert all(t.first_byte_at == float('inf') for t in bursts[1])
    clock[0] = 0.04  # The refusals come back: the second node is paced, its GETs back off.
    assert stores[1].due() == [] and refused == [0, 4]
    assert stores[1].pacer.rate is not None and stores[0].pacer.rate is None
    late = Transfer(9, 1.0, float('inf'), True)
    assert stores[1].request(late) is None  # Not its turn: it waits, holding none ahead.
    looks = [at for at, _, _, t in stores[1].events if t is late]
    assert looks and looks[0] <= clock[0] + stores[1].pacer.RECHECK + 1e-9


def test_refused_gets_back_off_at_drawn_jitter_and_the_plan_reports_the_median_draw() -> None:
    """The retries of refused GETs wait the retry policy's backoff at a jitter drawn in its
    range (not all at its mean, which sent a node's refused GETs back at one instant); a plan of
    a throttling store is simulated over several draws, says so, and is the same plan twice."""
    from streaming.plan.fleet import THROTTLE_DRAWS
    from streaming.plan.store import ThrottledStore
    store = ThrottledStore(TokenBucket(1.0), 0.04, lambda: 0.0, lambda: None, seed=3)
    policy = store.policy
    waits = [store.backoff(1) for _ in range(200)]
    # First refusal: backoff times a factor in [0.5, 1], doubled for a throttling answer.
    assert min(waits) >= policy.backoff - 1e-9 and max(waits) <= 2 * policy.backoff + 1e-9
    assert max(waits) - min(waits) > 0.4 * policy.backoff  # Spread over the range.
    shape = DatasetShape.synthetic(4_000, 20, 2_000)
    run = RunSettings(nodes=3, workers=2, batch_size=8)
    profile = get_profile('same-region').replace(request_limit=12.0)
    first, again = (plan(shape, run, profile, quality=False) for _ in range(2))
    assert [n['first_batch_s'] for n in first['nodes']] == \
        [n['first_batch_s'] for n in again['nodes']]
    note = [n for n in first['notes'] if 'draws' in n]
    assert note and f'{THROTTLE_DRAWS} draws' in note[0]
    # The nodes' own first batches, fastest to slowest, each the median over the draws.
    draws, staircase = first['draws_first_batch_s'], first['draws_nodes_first_batch_s']
    assert len(draws) == THROTTLE_DRAWS and len(staircase) == 3
    assert staircase == sorted(staircase) and draws[0] <= staircase[-1] <= draws[-1]
    assert staircase[-1] == pytest.approx(sorted(draws)[len(draws) // 2], abs=1e-3)
    # Without a request limit there is nothing to draw: one simulation, no such note.
    unlimited = plan(shape, run, get_profile('same-region'), quality=False)
    assert not [n for n in unlimited['notes'] if 'draws' in n]


def test_a_nodes_gets_leave_send_gap_apart_so_two_nodes_share_the_banked_second() -> None:
    """With ``send_gap`` a node's burst reaches the store one GET at a time; two nodes starting
    5 ms apart interleave there and both are served from the banked second (at one instant the
    first node takes all of it: the test above)."""
    from streaming.plan.pieces import Transfer
    from streaming.plan.store import ThrottledStore
    clock = [0.0]
    bucket = TokenBucket(4.0)
    stores = [ThrottledStore(bucket, 0.04, lambda: clock[0], lambda: None, send_gap=0.01)
              for _ in range(2)]
    bursts = [[Transfer(shard, 1.0, float('inf'), True) for shard in range(4)] for _ in stores]
    assert [stores[0].request(t) for t in bursts[0]] == pytest.approx([0.0, 0.01, 0.02, 0.03])
    clock[0] = 0.005
    assert [stores[1].request(t) for t in bursts[1]] == \
        pytest.approx([0.005, 0.015, 0.025, 0.035])
    while clock[0] < 0.1:  # The nodes move in the order of their clocks, as in a fleet.
        clock[0] += 0.001
        for store in stores:
            store.due()
    served = [sum(t.first_byte_at < float('inf') for t in burst) for burst in bursts]
    assert served == [2, 2]


def test_nodes_run_together_begin_within_the_start_spread() -> None:
    """Each node of a fleet begins at an instant drawn in ``[0, start_spread_s]`` (seeded by
    the draw and the node); the first step waits for the latest; a node alone begins at 0."""
    from streaming.plan.simulate import NodeSimulation
    shape = DatasetShape.synthetic(4_000, 20, 2_000)
    profile = get_profile('same-region')
    run = RunSettings(nodes=4, workers=2, batch_size=8, start_spread_s=0.5)
    barrier = StepBarrier({node: [1] for node in range(4)})
    offsets = [[NodeSimulation(shape, run, profile, barrier=barrier, node=node,
                               draw=draw).start_offset for node in range(4)] for draw in range(3)]
    flat = [o for draw in offsets for o in draw]
    assert all(0.0 <= o <= 0.5 for o in flat) and len(set(flat)) == len(flat)
    assert offsets[0] == [NodeSimulation(shape, run, profile, barrier=barrier, node=node,
                                         draw=0).start_offset for node in range(4)]
    assert NodeSimulation(shape, run, profile).start_offset == 0.0
    together = plan(shape, RunSettings(nodes=4, workers=2, batch_size=8), profile,
                    quality=False)['nodes']
    spread = plan(shape, run, profile, quality=False)['nodes']
    late = max(offsets[0])  # One draw without a request limit: draw 0.
    first = max(n['first_batch_s'] for n in together)
    assert max(n['first_batch_s'] for n in spread) == pytest.approx(first + late, abs=0.06)
    with pytest.raises(ValueError, match='send_gap_s'):
        RunSettings(send_gap_s=-1.0)
