"""Parquet streams in real multi-rank jobs and from S3 (moto): the MDS guarantees hold."""

from __future__ import annotations

import json
import os

import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.cache_dirs import setup_cache_dir
from streaming.dataset.source_stream import SourceStream
from tests.dataset.launch import global_batches, run_runs
from tests.sources.conftest import write_parquet

NUM_SAMPLES = 960
GLOBAL_BATCH = 16


@pytest.fixture(scope='module')
def remote(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp('pq') / 'data')
    write_parquet(root, files=4, rows=240, row_group_size=50)
    return root


def _dataset(remote: str, tmp_path, nodes: int, ranks: int) -> dict:
    return dict(remote=remote, local=str(tmp_path / 'cache'), shuffle=True,
                num_canonical_nodes=2, shuffle_seed=123, shuffle_block_size=200,
                batch_size=GLOBAL_BATCH // (nodes * ranks), stream_name='source',
                stream_config={'columns': ['id', 'blob']})


STOP = 23  # global batches before the checkpoint


@pytest.fixture(scope='module')
def jobs(remote, tmp_path_factory) -> dict[str, list[dict]]:
    """{run: each rank's result}: one job per world; the (1, 2) world's ranks do both its runs
    (``launch.run_runs``: a rank process, torch's import, costs more than a run)."""
    tmp = tmp_path_factory.mktemp('jobs')

    def job(name: str, nodes: int, ranks: int, *runs: tuple[str, dict]) -> None:
        configs = [{**config, 'dataset': _dataset(remote, tmp / run, nodes, ranks)}
                   for run, config in runs]
        for (run, _), result in zip(runs, run_runs(str(tmp / name), nodes=nodes,
                                                   ranks_per_node=ranks, runs=configs)):
            results[run] = result

    results: dict[str, list[dict]] = {}
    os.makedirs(tmp / 'one'), os.makedirs(tmp / 'two'), os.makedirs(tmp / 'four')
    os.makedirs(tmp / 'resumed')
    job('one', 1, 1, ('reference', {}))
    job('two', 1, 2, ('(1, 2, 1)', {'num_workers': 1}),
        ('first', {'num_workers': 2, 'stop_after_batches': STOP}))
    job('four', 2, 2, ('(2, 2, 2)', {'num_workers': 2}))
    state_path = tmp / 'state.json'
    state_path.write_text(json.dumps(results['first'][0]['state']))
    job('resumed', 2, 1, ('second', {'num_workers': 1, 'load_state': str(state_path)}))
    return results


@pytest.fixture(scope='module')
def reference_batches(jobs) -> list[frozenset[int]]:
    return global_batches(jobs['reference'])


@pytest.mark.parametrize('nodes,ranks,workers', [(1, 2, 1), (2, 2, 2)])
def test_same_global_batches_whatever_the_world(jobs, reference_batches, nodes, ranks,
                                                workers) -> None:
    results = jobs[str((nodes, ranks, workers))]
    assert len(results) == nodes * ranks
    assert global_batches(results) == reference_batches
    seen = sorted(i for r in results for b in r['epochs'][0] for i in b)
    assert seen == list(range(NUM_SAMPLES))


def test_resume_mid_epoch_on_another_world(jobs, reference_batches) -> None:
    first, second = jobs['first'], jobs['second']
    state = first[0]['state']
    assert state['sample_in_epoch'] == STOP * GLOBAL_BATCH
    assert global_batches(first) + global_batches(second) == reference_batches


def test_parquet_from_s3(s3, tmp_path) -> None:
    client, bucket = s3
    root = str(tmp_path / 'data')
    write_parquet(root, files=3, rows=200, row_group_size=40, compression='snappy')
    for name in sorted(os.listdir(root)):
        client.upload_file(os.path.join(root, name), bucket, f'prefix/{name}')
    remote = f's3://{bucket}/prefix'
    stream = SourceStream(remote=remote, local=str(tmp_path / 'cache'), columns=['id', 'text'],
                          options={'unit_bytes': 1})  # A unit (ranged fetch) per row group.
    dataset = StreamingDataset(streams=[stream], batch_size=8, shuffle=True)
    assert dataset.num_shards == 15
    assert dataset[201] == {'id': 201, 'text': 'word1'}
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2)
    ids = sorted(i for batch in loader for i in batch['id'].tolist())
    assert ids == list(range(600))
    assert os.path.exists(os.path.join(setup_cache_dir(str(tmp_path / 'cache')),
                                       '_shardflow_index.parquet.json'))
    assert not os.path.exists(tmp_path / 'cache' / '.shardflow')
    listed = client.list_objects_v2(Bucket=bucket, Prefix='prefix/')['Contents']
    assert len(listed) == 3  # Nothing written beside remote data by a dataset.
    # A file replaced on S3 after indexing: a new stream re-indexes just it.
    write_parquet(str(tmp_path / 'other'), files=1, rows=10, start=9000)
    client.upload_file(str(tmp_path / 'other' / 'part-000.parquet'), bucket,
                       'prefix/part-001.parquet')
    again = StreamingDataset(streams=[SourceStream(remote=remote, local=str(tmp_path / 'cache'),
                                                   columns=['id'])], batch_size=8)
    assert sorted(again[i]['id'] for i in range(len(again))) == \
        list(range(200)) + list(range(400, 600)) + list(range(9000, 9010))
