"""A shuffle added from outside the package, exactly as docs/extending/shuffle.md says."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest
from torch.utils.data import DataLoader

from streaming import StreamingDataset
from streaming.order import get_epoch_order, shuffle_names, unregister_shuffle
from tests.dataset.conftest import write_ids

PAGE = os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'extending', 'shuffle.md')


@pytest.fixture
def my_shuffles(tmp_path, monkeypatch):
    """The page's first code block, saved as my_shuffles.py outside the package and imported."""
    with open(PAGE) as f:
        block = re.findall(r'```python\n(.*?)```', f.read(), re.S)[0]
    assert "register_shuffle('span_order'" in block
    (tmp_path / 'my_shuffles.py').write_text(block)
    monkeypatch.syspath_prepend(str(tmp_path))
    # Spawned workers get sys.path from the parent, and PYTHONPATH for good measure.
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join([str(tmp_path),
                                                      os.environ.get('PYTHONPATH', '')]))
    import my_shuffles
    yield my_shuffles
    unregister_shuffle('span_order')
    sys.modules.pop('my_shuffles', None)


def _runs_ascending(ids: list[int], shard_size: int) -> bool:
    """Within each shard, samples come in stored order (what span_order promises)."""
    last: dict[int, int] = {}
    for i in ids:
        if last.get(i // shard_size, -1) > i:
            return False
        last[i // shard_size] = i
    return True


def test_the_reference_way_writes_the_same_table(my_shuffles) -> None:
    with open(PAGE) as f:
        block = re.findall(r'```python\n(.*?)```', f.read(), re.S)[1]
    assert "algos['span_order'] = shuffle_span_order" in block
    unregister_shuffle('span_order')
    assert 'span_order' not in shuffle_names()
    exec(block, {})
    assert shuffle_names().count('span_order') == 1
    from streaming.order import get_shuffle
    assert get_shuffle('span_order') is my_shuffles.shuffle_span_order


def test_registered_shuffle_iterates_a_dataset(my_shuffles, tmp_path) -> None:
    assert 'span_order' in shuffle_names()
    local = write_ids(str(tmp_path / 'data'), 600, size_limit=1 << 11)
    dataset = StreamingDataset(local=local, batch_size=4, shuffle=True,
                               shuffle_algo='span_order', num_canonical_nodes=1)
    shard_size = dataset.samples_per_shard[0]
    assert (dataset.samples_per_shard[:-1] == shard_size).all()
    epochs = [[int(s['id']) for s in dataset] for _ in range(2)]
    for ids in epochs:
        assert sorted(ids) == list(range(600))
        assert ids != list(range(600))
        assert _runs_ascending(ids, shard_size)
    assert epochs[0] != epochs[1]  # A new order each epoch...
    again = StreamingDataset(local=local, batch_size=4, shuffle=True, shuffle_algo='span_order',
                             num_canonical_nodes=1)
    assert [int(s['id']) for s in again] == epochs[0]  # ...and the same one for the same seed.


def test_registered_shuffle_reaches_spawned_workers(my_shuffles, tmp_path) -> None:
    local = write_ids(str(tmp_path / 'data'), 200, size_limit=1 << 11)
    dataset = StreamingDataset(local=local, batch_size=5, shuffle=True,
                               shuffle_algo='span_order')
    loader = DataLoader(dataset, batch_size=5, num_workers=2, multiprocessing_context='spawn')
    ids = [int(i) for batch in loader for i in batch['id']]
    assert sorted(ids) == list(range(200))


def test_registered_shuffle_in_get_epoch_order(my_shuffles) -> None:
    order = get_epoch_order(shard_sizes=np.array([10, 10, 10]), shard_streams=np.zeros(3, int),
                            stream_choose=np.array([30]), epoch=0, seed=1, shuffle=True,
                            shuffle_algo='span_order', num_canonical_nodes=1, batch_size=30)
    ids = order.reshape(-1).tolist()
    assert sorted(ids) == list(range(30)) and _runs_ascending(ids, 10)


def test_unknown_and_builtin_names_are_refused() -> None:
    from streaming.order import register_shuffle
    with pytest.raises(ValueError, match="shuffle_algo.*'naive'.*got 'nope'"):
        StreamingDataset(local='/nonexistent', shuffle_algo='nope')
    with pytest.raises(ValueError, match='built-in'):
        register_shuffle('py1e', lambda row, out, block, rng: None)
    with pytest.raises(ValueError, match='callable'):
        register_shuffle('both', None)


@pytest.mark.parametrize('uses_block_size', [True, False])
def test_only_shuffles_that_use_the_block_size_get_it_capped_by_the_cache(
        tmp_path, uses_block_size) -> None:
    import warnings

    from streaming.order import register_shuffle
    register_shuffle('blocky', _in_order, uses_block_size=uses_block_size)
    try:
        remote = write_ids(str(tmp_path / 'remote'), 600, size_limit=1 << 11)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            dataset = StreamingDataset(remote=remote, local=str(tmp_path / 'cache'),
                                       batch_size=4, shuffle=True, shuffle_algo='blocky',
                                       cache_limit=1 << 14)
        capped = [w for w in caught if 'shuffle_block_size' in str(w.message)]
        assert bool(capped) == uses_block_size
        assert (dataset.effective_block_size() < 1 << 18) == uses_block_size
        assert sorted(int(s['id']) for s in dataset) == list(range(600))
    finally:
        unregister_shuffle('blocky')


def _in_order(shard_sizes, num_canonical_nodes, seed, epoch, block_size) -> np.ndarray:
    return np.arange(int(np.sum(shard_sizes)))
