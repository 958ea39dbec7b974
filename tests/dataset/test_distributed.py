"""Real multi-rank jobs: rank processes in a gloo process group, real DataLoader workers, and
simulated nodes (each with its own cache directory) on this machine.

Every run of the module is done once, by the ``jobs`` fixture: one job per world (nodes, ranks
per node), whose rank processes do that world's runs in turn (``launch.run_runs``), since a rank
process (an interpreter importing torch) costs more than the runs themselves. A run that loads
a checkpoint comes first in its processes, so every resume still starts in a fresh process. The
tests then check the runs: the same global batches in every world (and DataLoader worker count),
each epoch different and complete, a mid-epoch checkpoint resumed on another world exactly.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.dataset.conftest import write_ids
from tests.dataset.launch import global_batches, run_job, run_runs

NUM_SAMPLES = 960  # A multiple of the global batch size: no padding, exact coverage.
GLOBAL_BATCH = 16
STOP = 23  # Global batches consumed before a checkpoint.
# (nodes, ranks per node, DataLoader workers per rank)
WORLDS = [(1, 1, 0), (1, 2, 1), (1, 4, 2), (2, 2, 2), (2, 1, 4), (1, 1, 4)]
# Checkpoint taken on the first world, resumed on the second.
RESUMES = [((1, 2, 2), (2, 1, 1)), ((2, 2, 1), (1, 1, 4)), ((1, 1, 0), (1, 4, 2))]


@pytest.fixture(scope='module')
def remote(tmp_path_factory) -> str:
    return write_ids(str(tmp_path_factory.mktemp('dist') / 'remote'), NUM_SAMPLES,
                     compression='zstd')


def _dataset(remote: str, cache: str, nodes: int, ranks: int, **extra) -> dict:
    return dict(remote=remote, local=cache, shuffle=True, num_canonical_nodes=2,
                shuffle_seed=123, shuffle_block_size=200,
                batch_size=GLOBAL_BATCH // (nodes * ranks), **extra)


def _plan(resumes: list[tuple[tuple[int, int, int], tuple[int, int, int]]]
          ) -> list[tuple[tuple[int, int], list[tuple[str, dict[str, Any]]]]]:
    """Jobs in launch order: (world, [(run name, run config without its dataset)])."""
    worlds: dict[tuple[int, int], list[tuple[str, dict[str, Any]]]] = {}
    for i, (_, after) in enumerate(resumes):  # Loads first: fresh processes.
        worlds.setdefault(after[:2], []).append(
            (f'after{i}', {'num_workers': after[2], 'load_state': f'state{i}.json'}))
    for world in WORLDS:
        worlds.setdefault(world[:2], []).append((f'full{world}', {'num_workers': world[2]}))
    worlds.setdefault((1, 2), []).append(('two-epochs', {'num_workers': 2, 'epochs': 2}))
    for i, (before, _) in enumerate(resumes):
        worlds.setdefault(before[:2], []).append(
            (f'before{i}', {'num_workers': before[2], 'stop_after_batches': STOP}))
    # A world whose runs load a state goes after the world that writes it.
    order: list[tuple[int, int]] = []

    def place(world: tuple[int, int]) -> None:
        if world in order:
            return
        for before, after in resumes:
            if after[:2] == world and before[:2] != world:
                place(before[:2])
        order.append(world)

    for world in worlds:
        place(world)
    return [(world, worlds[world]) for world in order]


@pytest.fixture(scope='module')
def jobs(remote, tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """{run name: each rank's result} of every run of the module."""
    tmp = str(tmp_path_factory.mktemp('jobs'))
    results: dict[str, list[dict[str, Any]]] = {}
    for (nodes, ranks), named in _plan(RESUMES):
        runs = []
        for name, config in named:
            config = dict(config)
            if 'load_state' in config:
                config['load_state'] = os.path.join(tmp, config['load_state'])
            cache = os.path.join(tmp, 'cache', name)
            runs.append({**config, 'dataset': _dataset(remote, cache, nodes, ranks)})
        for (name, _), result in zip(named, run_runs(tmp, nodes=nodes, ranks_per_node=ranks,
                                                     runs=runs)):
            results[name] = result
            if name.startswith('before'):
                with open(os.path.join(tmp, f'state{name[6:]}.json'), 'w') as f:
                    json.dump(result[0]['state'], f)
    return results


@pytest.fixture(scope='module')
def reference_batches(jobs) -> list[frozenset[int]]:
    return global_batches(jobs[f'full{WORLDS[0]}'])


def test_plan_runs_each_world_once_and_loads_after_saves() -> None:
    plan = _plan(RESUMES)
    assert len({world for world, _ in plan}) == len(plan) == 5
    written: set[str] = set()
    for _, runs in plan:
        loads = [config['load_state'] for _, config in runs if 'load_state' in config]
        assert set(loads) <= written
        assert all('load_state' in config for _, config in runs[:len(loads)])  # loads first
        written |= {f'state{name[6:]}.json' for name, _ in runs if name.startswith('before')}


@pytest.mark.parametrize('nodes,ranks,workers', WORLDS)
def test_same_global_batches_whatever_the_world(jobs, reference_batches, nodes, ranks,
                                                workers) -> None:
    results = jobs[f'full{(nodes, ranks, workers)}']
    assert len(results) == nodes * ranks
    batches = global_batches(results)
    assert batches == reference_batches
    seen = [i for r in results for b in r['epochs'][0] for i in b]
    assert sorted(seen) == list(range(NUM_SAMPLES))  # Each sample exactly once.
    assert all(r['len'] == NUM_SAMPLES // (nodes * ranks) for r in results)


def test_each_epoch_differs_and_covers_everything(jobs) -> None:
    results = jobs['two-epochs']
    first, second = global_batches(results, 0), global_batches(results, 1)
    assert first != second
    for batches in (first, second):
        assert sorted(i for b in batches for i in b) == list(range(NUM_SAMPLES))


@pytest.mark.parametrize('index', range(len(RESUMES)),
                         ids=[f'{b}-to-{a}' for b, a in RESUMES])
def test_resume_mid_epoch_on_another_world(jobs, reference_batches, index) -> None:
    (nodes, ranks, _), after = RESUMES[index]
    first, second = jobs[f'before{index}'], jobs[f'after{index}']
    assert len(first) == nodes * ranks and len(second) == after[0] * after[1]
    state = first[0]['state']
    assert state['sample_in_epoch'] == STOP * GLOBAL_BATCH and state['epoch'] == 0
    assert all(rank['state'] == state for rank in first)
    assert global_batches(first) + global_batches(second) == reference_batches


def test_env_only_world_without_process_group(remote, tmp_path, reference_batches) -> None:
    """Launchers that set RANK/WORLD_SIZE but no process group: ranks still agree."""
    results = run_job(str(tmp_path), nodes=1, ranks_per_node=2, num_workers=1,
                      init_process_group=False,
                      dataset=_dataset(remote, str(tmp_path / 'cache'), 1, 2))
    assert global_batches(results) == reference_batches
