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
from streaming.dataset import order_store
from streaming.dataset.order_store import IndexIds
from tests.dataset.conftest import write_ids
from tests.dataset.launch import global_batches, run_job

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
    params = lazy._order_params(0, 0, lazy.world.with_worker())
    ids = lazy._epoch_ids(params)
    assert isinstance(ids, IndexIds) == (epoch_size != 700)  # 700: a partial, random draw.
    got = _epochs(lazy)
    monkeypatch.setattr(order_store, 'lazy_index_ids', lambda inputs: None)
    from streaming.dataset import dataset as dataset_module
    monkeypatch.setattr(dataset_module, 'lazy_index_ids', lambda inputs: None)
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


@pytest.mark.parametrize('algo', ['index', 'mine'])
def test_elastic_and_resumable_in_real_jobs(remote, tmp_path, algo) -> None:
    install = ['tests.oracle.custom_order'] if algo == 'mine' else []

    def job(name: str, world: tuple[int, int, int], **config) -> list[dict]:
        nodes, ranks, workers = world
        return run_job(str(tmp_path / name), nodes=nodes, ranks_per_node=ranks,
                       num_workers=workers, install=install,
                       dataset=_dataset(remote, str(tmp_path / name / 'cache'), nodes, ranks,
                                        algo), **config)

    os.makedirs(tmp_path / 'one')
    os.makedirs(tmp_path / 'many')
    os.makedirs(tmp_path / 'resumed')
    reference = global_batches(job('one', (1, 1, 0)))
    assert sorted(i for b in reference for i in b) == list(range(NUM_SAMPLES))
    assert global_batches(job('many', (2, 2, 2))) == reference
    stop = 23
    first = job('one', (1, 2, 2), stop_after_batches=stop)
    state = first[0]['state']
    assert state['sample_in_epoch'] == stop * GLOBAL_BATCH
    state_path = tmp_path / 'state.json'
    state_path.write_text(json.dumps(state))
    second = job('resumed', (2, 1, 1), load_state=str(state_path))
    assert global_batches(first) + global_batches(second) == reference
