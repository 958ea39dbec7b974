"""TokenMix: token shares, schedules, exact restarts at any step, cycling sources, ranks."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming.tokens import ShardRotation, TokenMix, list_shards
from streaming.world import World
from tests.tokens.conftest import SEQ, tokens_for

BATCH = 8
# Each source writes shard numbers offset by 100 * k, so every token says where it came from.
SIZES = {'web': (3, 40), 'code': (2, 24), 'math': (2, 8)}  # (shards, windows per shard)


@pytest.fixture(scope='module')
def remotes(tmp_path_factory):
    root = tmp_path_factory.mktemp('mix')
    out = {}
    for k, (name, (shards, windows)) in enumerate(SIZES.items()):
        from streaming.tokens.writer import TokenShardWriter
        path = str(root / name)
        with TokenShardWriter(path, seq_len=SEQ, shard_tokens=windows * SEQ) as writer:
            for i in range(shards):
                writer.write(tokens_for(100 * k + i, windows * SEQ))
        out[name] = path
    return out


def owner(window: np.ndarray) -> tuple[int, int]:
    """(source index, shard number) of a window, from its first token."""
    for k, (shards, windows) in enumerate(SIZES.values()):
        for i in range(shards):
            data = tokens_for(100 * k + i, windows * SEQ)
            hits = np.flatnonzero(data.reshape(-1, SEQ)[:, 0] == window[0])
            for h in hits.tolist():
                if np.array_equal(data[h * SEQ:(h + 1) * SEQ], window):
                    return k, i
    raise AssertionError('a window that no source holds')


def make_mix(remotes, tmp_path, tag: str, world: World | None = None, **kwargs) -> TokenMix:
    sources = {}
    for name, remote in remotes.items():
        shards, _ = list_shards(remote)
        sources[name] = ShardRotation(shards, str(tmp_path / tag / name), seq_len=SEQ, keep=2,
                                      prefetch=1, world=world or World(0, 1, 0, 1))
    kwargs.setdefault('weights', {'web': 0.7, 'code': 0.2, 'math': 0.1})
    kwargs.setdefault('batch_size', BATCH)
    return TokenMix(sources, seed=5, **kwargs)


def shares(kinds: list[np.ndarray]) -> np.ndarray:
    counts = np.bincount(np.concatenate(kinds), minlength=3)
    return counts / counts.sum()


def test_token_shares_follow_the_weights(remotes, tmp_path) -> None:
    """Tolerance: within 0.5 percentage points over 300 steps x 8 windows (2,400 windows)."""
    with make_mix(remotes, tmp_path, 'w') as mix:
        kinds = []
        for step in range(300):
            batch = mix.batch(step)
            assert batch.shape == (BATCH, SEQ)
            kinds.append(mix.last_sources.copy())
            if step % 37 == 0:  # the rows really come from the sources they are said to
                for row, k in zip(batch.numpy(), mix.last_sources.tolist()):
                    assert owner(row)[0] == k
        got = shares(kinds)
        assert np.abs(got - [0.7, 0.2, 0.1]).max() <= 0.005, got
        # Every batch mixes: a low-discrepancy draw gives each batch ~ the weights already.
        assert all(len(set(k.tolist())) >= 2 for k in kinds)


def test_a_schedule_moves_the_shares(remotes, tmp_path) -> None:
    schedule = [(0, [1.0, 0.0, 0.0]), (100, [0.2, 0.3, 0.5])]
    with make_mix(remotes, tmp_path, 's', weights=None, schedule=schedule) as mix:
        kinds = [mix.batch_array(step) is not None and mix.last_sources.copy()
                 for step in range(250)]
    assert shares(kinds[:100]).tolist() == [1.0, 0.0, 0.0]
    assert np.abs(shares(kinds[100:]) - [0.2, 0.3, 0.5]).max() <= 0.01
    with make_mix(remotes, tmp_path, 'c', weights=None,
                  schedule=lambda s: [1, 0, 0] if s < 100 else [0.2, 0.3, 0.5]) as mix:
        assert np.array_equal(np.concatenate([mix.sources_of_step(s) for s in range(250)]),
                              np.concatenate(kinds))


@pytest.mark.parametrize('interleave', [True, False])
def test_restart_at_any_step_reads_the_same_batches(remotes, tmp_path, interleave) -> None:
    with make_mix(remotes, tmp_path, f'full{interleave}', interleave=interleave) as mix:
        full, states = [], {}
        for step in range(60):
            states[step] = mix.state_dict()
            full.append(mix.batch(step).numpy().copy())
    for restart in (1, 17, 33, 59):
        with make_mix(remotes, tmp_path, f'r{restart}{interleave}', interleave=interleave,
                      start_step=restart) as mix:
            assert mix.state_dict() == states[restart]
            again = [mix.batch(s).numpy() for s in range(restart, 60)]
        assert all(np.array_equal(a, b) for a, b in zip(again, full[restart:])), restart
    with make_mix(remotes, tmp_path, f'st{interleave}', interleave=interleave) as mix:
        mix.load_state_dict(states[41])
        assert np.array_equal(mix.batch(41).numpy(), full[41])


def test_a_source_that_runs_out_cycles_and_reshuffles(remotes, tmp_path) -> None:
    """'math' has 2 shards x 8 windows; at half the tokens it is gone through many times."""
    with make_mix(remotes, tmp_path, 'cyc', weights=[0.25, 0.25, 0.5]) as mix:
        seen: dict[int, list[tuple[int, ...]]] = {}
        for step in range(40):
            batch = mix.batch(step).numpy()
            for row, k in zip(batch, mix.last_sources.tolist()):
                if k == 2:
                    shard = owner(row)[1]
                    seen.setdefault(shard, []).append(tuple(row[:2].tolist()))
        math = mix.sources[2]
        assert math.cycle >= 5
        assert math.store.local.endswith('math')
        assert len(os.listdir(math.store.local)) <= 2 * 3 + 2  # keep=2: files, markers, locks
    # Each visit of a shard serves its 8 windows once: group the draws into visits of 8.
    total = sum(len(v) for v in seen.values())
    assert total >= 150
    for shard, rows in seen.items():
        for visit in range(len(rows) // 8):
            assert len(set(rows[visit * 8:(visit + 1) * 8])) == 8, (shard, visit)
        orders = {tuple(rows[v * 8:(v + 1) * 8]) for v in range(len(rows) // 8)}
        assert len(orders) > 1  # reshuffled per visit


def test_ranks_split_each_step_with_no_communication(remotes, tmp_path) -> None:
    """Two ranks build their mixes alone; together they read exactly the batch one process
    with twice the batch size reads."""
    got = []
    for rank in (0, 1):
        with make_mix(remotes, tmp_path, f'rank{rank}', world=World(rank, 2, 0, 1)) as mix:
            got.append([mix.batch(step).numpy() for step in range(30)])
    with make_mix(remotes, tmp_path, 'one', batch_size=2 * BATCH) as single:
        for step in range(30):
            both = single.batch(step).numpy()
            assert np.array_equal(both[:BATCH], got[0][step])
            assert np.array_equal(both[BATCH:], got[1][step])


def test_bad_weights_are_named(remotes, tmp_path) -> None:
    with pytest.raises(ValueError, match='unknown sources'):
        make_mix(remotes, tmp_path, 'bad1', weights={'web': 1, 'prose': 1})
    with pytest.raises(ValueError, match='weights at step 0'):
        make_mix(remotes, tmp_path, 'bad2', weights=[1, -1, 0])
    with pytest.raises(ValueError, match='from step 0'):
        make_mix(remotes, tmp_path, 'bad3', weights=None, schedule=[(5, [1, 1, 1])])


def test_sources_without_a_manifest_plan_from_the_sidecars(tmp_path) -> None:
    """The source project's layout (np.save + raw sidecar, no manifest): window counts come
    from the sidecars' sizes, and a restart still reads the same batches."""
    from tests.tokens.test_verify import numpy_dataset
    numpy_dataset(str(tmp_path / 'a'), 2, 8)
    numpy_dataset(str(tmp_path / 'b'), 3, 5)

    def mix(tag: str, start: int) -> TokenMix:
        sources = {}
        for name in 'ab':
            shards, manifest = list_shards(str(tmp_path / name))
            assert manifest is None
            sources[name] = ShardRotation(shards, str(tmp_path / tag / name), seq_len=SEQ,
                                          world=World(0, 1, 0, 1))
        return TokenMix(sources, [0.5, 0.5], batch_size=4, start_step=start)

    with mix('full', 0) as full:
        batches = [full.batch(s).numpy().copy() for s in range(20)]
        assert full._windows == [{0: 8, 1: 8}, {0: 5, 1: 5, 2: 5}]
    with mix('again', 11) as again:
        assert all(np.array_equal(again.batch(s).numpy(), batches[s]) for s in range(11, 20))


def test_whole_batches_per_source_keep_token_shares_across_window_lengths(remotes, tmp_path):
    """interleave=False: 'code' read as windows of 32 tokens, 'web' of 16; equal token weights
    mean 'web' gets twice the steps. Tolerance: 1 point over 300 steps."""
    web, _ = list_shards(remotes['web'])
    code, _ = list_shards(remotes['code'], ids=False, manifest=False)
    world = World(0, 1, 0, 1)
    sources = {'web': ShardRotation(web, str(tmp_path / 'web'), seq_len=SEQ, world=world),
               'code': ShardRotation(code, str(tmp_path / 'code'), seq_len=2 * SEQ,
                                     world=world, verify=False)}
    with TokenMix(sources, {'web': 0.5, 'code': 0.5}, batch_size=4, interleave=False,
                  seed=1) as mix:
        tokens = np.zeros(2)
        for step in range(300):
            batch = mix.batch(step)
            assert len(set(mix.last_sources.tolist())) == 1  # one source per step
            tokens[mix.last_sources[0]] += batch.numel()
            assert batch.shape[1] == (SEQ if mix.last_sources[0] == 0 else 2 * SEQ)
    assert abs(tokens[0] / tokens.sum() - 0.5) <= 0.01, tokens
