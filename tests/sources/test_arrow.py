"""``datasets.Dataset.save_to_disk`` directories (Arrow IPC streams), streamed as they are."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SchemaMismatchError, SourceFileError


def save_dataset(root: str, rows: int = 2500, shard_size: str = '40KB', start: int = 0):
    import datasets
    data = datasets.Dataset.from_dict({
        'id': list(range(start, start + rows)),
        'text': [f'row {i}' for i in range(start, start + rows)],
        'tokens': [list(range(i % 6)) for i in range(start, start + rows)],
        'image': [bytes([i % 256]) * (i % 17) for i in range(start, start + rows)],
    })
    data.save_to_disk(root, max_shard_size=shard_size)
    return data


def _plain(sample: dict) -> dict:
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in sample.items()}


def _dataset(remote: str, local: str, **kwargs) -> StreamingDataset:
    stream_kwargs = {k: kwargs.pop(k) for k in ('columns', 'options') if k in kwargs}
    return StreamingDataset(streams=[SourceStream(remote=remote, local=local, **stream_kwargs)],
                            batch_size=8, **kwargs)


@pytest.mark.parametrize('unit_bytes', [1, 1 << 24])
def test_rows_as_datasets_gives_them(tmp_path, unit_bytes) -> None:
    root = str(tmp_path / 'saved')
    data = save_dataset(root)
    assert len([n for n in os.listdir(root) if n.endswith('.arrow')]) > 1
    dataset = _dataset(root, str(tmp_path / 'cache'), options={'unit_bytes': unit_bytes})
    assert dataset.num_samples == len(data)
    assert [_plain(dataset[i]) for i in range(len(dataset))] == data.to_list()
    sample = dataset[7]
    assert isinstance(sample['tokens'], np.ndarray) and isinstance(sample['image'], bytes)
    if unit_bytes == 1:  # One unit per record batch (1,000 rows each, or a file's rest).
        assert dataset.num_shards > len([n for n in os.listdir(root) if n.endswith('.arrow')])


def test_projected_shuffled_through_workers(tmp_path) -> None:
    root = str(tmp_path / 'saved')
    save_dataset(root)
    dataset = _dataset(root, str(tmp_path / 'cache'), columns=['id', 'text'], shuffle=True)
    assert dataset[3] == {'id': 3, 'text': 'row 3'}
    ids = [i for b in StreamingDataLoader(dataset, batch_size=8, num_workers=2)
           for i in b['id'].tolist()]
    assert sorted(ids) == list(range(2500)) and ids != sorted(ids)


def test_missing_column_and_truncated_file(tmp_path) -> None:
    root = str(tmp_path / 'saved')
    save_dataset(root)
    with pytest.raises(SchemaMismatchError, match="no column 'label'"):
        _dataset(root, str(tmp_path / 'cache'), columns=['label'])
    name = sorted(n for n in os.listdir(root) if n.endswith('.arrow'))[1]
    path = os.path.join(root, name)
    with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) - 1000)
    with pytest.raises(SourceFileError, match=name.replace('.', r'\.')):
        _dataset(root, str(tmp_path / 'cache2'))


def test_arrow_ipc_file_format_too(tmp_path) -> None:
    import pyarrow as pa
    root = tmp_path / 'ipc'
    root.mkdir()
    table = pa.table({'id': list(range(100)), 'v': [float(i) for i in range(100)]})
    with pa.ipc.new_file(str(root / 'a.arrow'), table.schema) as writer:
        for batch in table.to_batches(max_chunksize=30):
            writer.write_batch(batch)
    dataset = _dataset(str(root), str(tmp_path / 'cache'), options={'unit_bytes': 1})
    assert dataset.num_shards == 4
    assert [dataset[i] for i in range(100)] == table.to_pylist()


def test_saved_dataset_from_s3(s3, tmp_path) -> None:
    client, bucket = s3
    root = str(tmp_path / 'saved')
    data = save_dataset(root, rows=1200)
    for name in os.listdir(root):
        client.upload_file(os.path.join(root, name), bucket, f'hf/{name}')
    dataset = _dataset(f's3://{bucket}/hf', str(tmp_path / 'cache'), shuffle=True)
    got = sorted((_plain(s) for s in dataset), key=lambda s: s['id'])
    assert got == data.to_list()
