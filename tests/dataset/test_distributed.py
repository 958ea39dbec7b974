"""Real multi-rank jobs: rank processes in a gloo process group, real DataLoader workers, and
simulated nodes (each with its own cache directory) on this machine."""

from __future__ import annotations

import json

import pytest

from tests.dataset.conftest import write_ids
from tests.dataset.launch import global_batches, run_job

NUM_SAMPLES = 960  # A multiple of the global batch size: no padding, exact coverage.
GLOBAL_BATCH = 16
# (nodes, ranks per node, DataLoader workers per rank)
WORLDS = [(1, 1, 0), (1, 2, 1), (1, 4, 2), (2, 2, 2), (2, 1, 4), (1, 1, 4)]


@pytest.fixture(scope='module')
def remote(tmp_path_factory) -> str:
    return write_ids(str(tmp_path_factory.mktemp('dist') / 'remote'), NUM_SAMPLES,
                     compression='zstd')


def _dataset(remote: str, tmp_path, nodes: int, ranks: int, **extra) -> dict:
    return dict(remote=remote, local=str(tmp_path / 'cache'), shuffle=True,
                num_canonical_nodes=2, shuffle_seed=123, shuffle_block_size=200,
                batch_size=GLOBAL_BATCH // (nodes * ranks), **extra)


@pytest.fixture(scope='module')
def reference_batches(remote, tmp_path_factory) -> list[frozenset[int]]:
    tmp = tmp_path_factory.mktemp('single')
    results = run_job(str(tmp), nodes=1, ranks_per_node=1, dataset=_dataset(remote, tmp, 1, 1))
    return global_batches(results)


@pytest.mark.parametrize('nodes,ranks,workers', WORLDS)
def test_same_global_batches_whatever_the_world(remote, tmp_path, reference_batches, nodes,
                                                ranks, workers) -> None:
    results = run_job(str(tmp_path), nodes=nodes, ranks_per_node=ranks, num_workers=workers,
                      dataset=_dataset(remote, tmp_path, nodes, ranks))
    batches = global_batches(results)
    assert batches == reference_batches
    seen = [i for r in results for b in r['epochs'][0] for i in b]
    assert sorted(seen) == list(range(NUM_SAMPLES))  # Each sample exactly once.
    assert all(r['len'] == NUM_SAMPLES // (nodes * ranks) for r in results)


def test_each_epoch_differs_and_covers_everything(remote, tmp_path) -> None:
    results = run_job(str(tmp_path), nodes=1, ranks_per_node=2, num_workers=2, epochs=2,
                      dataset=_dataset(remote, tmp_path, 1, 2))
    first, second = global_batches(results, 0), global_batches(results, 1)
    assert first != second
    for batches in (first, second):
        assert sorted(i for b in batches for i in b) == list(range(NUM_SAMPLES))


@pytest.mark.parametrize('before,after', [((1, 2, 2), (2, 1, 1)), ((2, 2, 1), (1, 1, 4)),
                                          ((1, 1, 0), (1, 4, 2))])
def test_resume_mid_epoch_on_another_world(remote, tmp_path, reference_batches, before,
                                           after) -> None:
    stop = 23  # Global batches consumed before the checkpoint.
    nodes, ranks, workers = before
    first = run_job(str(tmp_path), nodes=nodes, ranks_per_node=ranks, num_workers=workers,
                    stop_after_batches=stop, dataset=_dataset(remote, tmp_path, nodes, ranks))
    state = first[0]['state']
    assert state['sample_in_epoch'] == stop * GLOBAL_BATCH and state['epoch'] == 0
    state_path = tmp_path / 'state.json'
    state_path.write_text(json.dumps(state))
    nodes, ranks, workers = after
    second = run_job(str(tmp_path), nodes=nodes, ranks_per_node=ranks, num_workers=workers,
                     load_state=str(state_path),
                     dataset=_dataset(remote, tmp_path / 'b', nodes, ranks))
    assert global_batches(first) + global_batches(second) == reference_batches


def test_env_only_world_without_process_group(remote, tmp_path, reference_batches) -> None:
    """Launchers that set RANK/WORLD_SIZE but no process group: ranks still agree."""
    results = run_job(str(tmp_path), nodes=1, ranks_per_node=2, num_workers=1,
                      init_process_group=False, dataset=_dataset(remote, tmp_path, 1, 2))
    assert global_batches(results) == reference_batches
