"""``shuffle_algo='index'`` and registered shuffles in a dataset: lazy ids, resume, elasticity.

The ``index`` shuffle's ids are computed as workers read them (no order file); they must be the
ids the materialised engine gives. Real multi-rank jobs (``launch.run_job``) check that with it,
and with a shuffle registered in ``streaming.base.shuffle.algos``, every world sees the same
global batches and a checkpoint resumes on another world exactly.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from streaming import StreamingDataset
from streaming.order import EpochPlan, IndexIds, plan
from tests.dataset.conftest import write_ids
from tests.dataset.launch import global_batches, run_runs

NUM_SAMPLES = 960
GLOBAL_BATCH = 16


@pytest.fixture(scope='module')
def remote(tmp_path_factory) -> str:
    return write_ids(str(tmp_path_factory.mktemp('index') / 'remote'), NUM_SAMPLES)


def _epochs(dataset: StreamingDataset, count: int = 2) -> list[list[int]]:
    return [[int(s['id']) for s in dataset] for _ in range(count)]


@pytest.mark.parametrize('epoch_size', [None, 2 * NUM_SAMPLES, 700])
def test_lazy_ids_are_the_engines_ids(remote, tmp_path, monkeypatch, epoch_size) -> None:
    kwargs = dict(remote=remote, batch_size=4, shuffle=True, shuffle_algo='index',
                  shuffle_block_size=100, num_canonical_nodes=2, epoch_size=epoch_size)
    lazy = StreamingDataset(local=str(tmp_path / 'a'), **kwargs)
    ids = lazy._epoch_ids(plan(lazy._spec(0, 0, lazy.world.with_worker())))
    assert isinstance(ids, IndexIds) == (epoch_size != 700)  # 700: a partial, random draw.
    got = _epochs(lazy)
    monkeypatch.setattr(EpochPlan, 'lazy_ids', lambda self: None)
    whole = StreamingDataset(local=str(tmp_path / 'b'), **kwargs)
    assert _epochs(whole) == got
    total = epoch_size or NUM_SAMPLES
    assert all(len(epoch) == total for epoch in got) and got[0] != got[1]
    if epoch_size is None:
        assert sorted(got[0]) == list(range(NUM_SAMPLES))
        # Nothing epoch-sized was written for the lazy run.
        assert not glob.glob(os.path.join(str(tmp_path / 'a'), '**', 'order-*'), recursive=True)


def _dataset(remote: str, cache: str, nodes: int, ranks: int, algo: str) -> dict:
    return dict(remote=remote, local=cache, shuffle=True, shuffle_algo=algo,
                num_canonical_nodes=2, shuffle_seed=123, shuffle_block_size=200,
                batch_size=GLOBAL_BATCH // (nodes * ranks))


ALGOS = ('index', 'mine')
STOP = 23  # global batches before the checkpoint


@pytest.fixture(scope='module')
def real_jobs(remote, tmp_path_factory) -> dict[str, dict[str, list[dict]]]:
    """{algo: {job: each rank's result}}: one job per world, whose rank processes do the run of
    each algo in turn (``launch.run_runs``: one torch import per rank serves both); ``mine`` is
    registered (``tests.oracle.custom_order``) in its run, after the ``index`` run."""
    tmp = tmp_path_factory.mktemp('jobs')
    state_paths = {algo: str(tmp / f'state-{algo}.json') for algo in ALGOS}
    results: dict[str, dict[str, list[dict]]] = {algo: {} for algo in ALGOS}

    def job(name: str, world: tuple[int, int, int], **config) -> None:
        nodes, ranks, workers = world
        runs = [{'num_workers': workers,
                 'install': ['tests.oracle.custom_order'] if algo == 'mine' else [],
                 'dataset': _dataset(remote, str(tmp / name / algo / 'cache'), nodes, ranks,
                                     algo),
                 **{k: v(algo) if callable(v) else v for k, v in config.items()}}
                for algo in ALGOS]
        os.makedirs(tmp / name, exist_ok=True)
        for algo, result in zip(ALGOS, run_runs(str(tmp / name), nodes=nodes,
                                                ranks_per_node=ranks, runs=runs)):
            results[algo][name] = result

    job('one', (1, 1, 0))
    job('many', (2, 2, 2))
    job('first', (1, 2, 2), stop_after_batches=STOP)
    for algo in ALGOS:
        with open(state_paths[algo], 'w') as f:
            json.dump(results[algo]['first'][0]['state'], f)
    job('resumed', (2, 1, 1), load_state=state_paths.__getitem__)
    return results


@pytest.mark.parametrize('algo', ALGOS)
def test_elastic_and_resumable_in_real_jobs(real_jobs, algo) -> None:
    jobs = real_jobs[algo]
    reference = global_batches(jobs['one'])
    assert sorted(i for b in reference for i in b) == list(range(NUM_SAMPLES))
    assert global_batches(jobs['many']) == reference
    first = jobs['first']
    state = first[0]['state']
    assert state['sample_in_epoch'] == STOP * GLOBAL_BATCH
    assert global_batches(first) + global_batches(jobs['resumed']) == reference
