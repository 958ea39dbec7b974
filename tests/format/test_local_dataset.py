"""LocalDataset: length, numpy-style indexing across shards, splits, compressed datasets."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from streaming import LocalDataset
from tests.unit_helpers import read_index, write_mds

N = 57


def _sample(i: int) -> dict[str, Any]:
    return {'id': i, 'text': f'sample number {i}'}


@pytest.fixture(scope='module')
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp('local'))
    write_mds(root, {'id': 'int', 'text': 'str'}, [_sample(i) for i in range(N)], size_limit=400)
    assert len(read_index(root)['shards']) > 3  # Indexing must cross shard boundaries.
    return root


def test_len_and_size(dataset_dir: str) -> None:
    dataset = LocalDataset(dataset_dir)
    assert len(dataset) == N
    assert dataset.size == N
    assert isinstance(dataset, Dataset)


def test_int_indexing(dataset_dir: str) -> None:
    dataset = LocalDataset(dataset_dir)
    for i in range(N):
        assert dataset[i] == _sample(i)
        assert dataset[i - N] == _sample(i)
    assert dataset[np.int64(5)] == _sample(5)
    assert dataset[np.uint8(6)] == _sample(6)


@pytest.mark.parametrize('index', [N, N + 1, -N - 1, 10**9])
def test_out_of_range(dataset_dir: str, index: int) -> None:
    dataset = LocalDataset(dataset_dir)
    with pytest.raises(IndexError, match=str(index)):
        dataset[index]


@pytest.mark.parametrize('key', [slice(None), slice(3, 40, 7), slice(None, None, -1),
                                 slice(-5, None), slice(50, 10, -3), slice(100, 200),
                                 slice(-1000, 3)])
def test_slices(dataset_dir: str, key: slice) -> None:
    dataset = LocalDataset(dataset_dir)
    assert dataset[key] == [_sample(i) for i in range(N)[key]]


def test_lists_and_arrays(dataset_dir: str) -> None:
    dataset = LocalDataset(dataset_dir)
    picks = [0, N - 1, 5, 5, -2]
    expected = [_sample(i % N) for i in picks]
    assert dataset[picks] == expected
    assert dataset[np.array(picks)] == expected
    assert dataset[np.array(picks, np.int32)] == expected
    assert dataset[[]] == []
    with pytest.raises(IndexError):
        dataset[[0, N]]
    with pytest.raises(IndexError):
        dataset[np.array([N])]


def test_random_access_order_does_not_matter(dataset_dir: str) -> None:
    dataset = LocalDataset(dataset_dir)
    order = np.random.default_rng(0).permutation(N)
    assert [dataset[int(i)]['id'] for i in order] == order.tolist()


def test_pickles_and_loads_in_workers(dataset_dir: str) -> None:
    dataset = LocalDataset(dataset_dir)
    dataset[0]  # Open a shard first: open files must not stop pickling.
    clone = pickle.loads(pickle.dumps(dataset))
    assert clone[:] == dataset[:]
    loader = DataLoader(dataset, batch_size=10, num_workers=2)
    ids = torch.cat([batch['id'] for batch in loader]).tolist()
    assert ids == list(range(N))


def test_split(tmp_path: Any) -> None:
    write_mds(str(tmp_path / 'train'), {'id': 'int'}, [{'id': i} for i in range(5)])
    write_mds(str(tmp_path / 'test'), {'id': 'int'}, [{'id': -i} for i in range(3)])
    train = LocalDataset(str(tmp_path), split='train')
    test = LocalDataset(str(tmp_path), split='test')
    assert [s['id'] for s in train[:]] == list(range(5))
    assert [s['id'] for s in test[:]] == [0, -1, -2]
    assert LocalDataset(str(tmp_path / 'train'))[:] == train[:]


@pytest.mark.parametrize('compression', ['zstd', 'gz:1', 'snappy'])
def test_compressed_only_dataset(tmp_path: Any, compression: str) -> None:
    root = str(tmp_path)
    samples = [_sample(i) for i in range(N)]
    write_mds(root, {'id': 'int', 'text': 'str'}, samples, size_limit=400,
              compression=compression)
    dataset = LocalDataset(root)
    assert len(dataset) == N
    assert dataset[::-1] == samples[::-1]
    # A second dataset object over the same directory (raw files now present) agrees.
    assert LocalDataset(root)[:] == samples
