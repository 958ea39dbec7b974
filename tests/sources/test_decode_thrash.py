"""A shuffled epoch whose decoded units do not fit the decode budget decodes them again and again:
counted per epoch on the node and warned of once per epoch (``cache.decoded_units``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.cache import decoded_units
from streaming.dataset.source_stream import SourceStream
from streaming.sources import reader as source_reader
from streaming.sources.arrow_values import DecodedCache
from tests.sources.test_decode_once import FILES, ROWS, write_dataset

LOGGER = 'streaming.cache.decoded_units'


def _epoch(dataset: StreamingDataset) -> int:
    return sum(len(batch['id']) for batch in StreamingDataLoader(dataset, batch_size=8))


def _thrash_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING]


@pytest.fixture
def dataset(tmp_path) -> StreamingDataset:
    root = str(tmp_path / 'data')
    write_dataset(root)
    stream = SourceStream(remote=root, local=str(tmp_path / 'cache'), options={'unit_bytes': 1})
    # One shuffle block over all 9 units: each batch draws on most of them.
    return StreamingDataset(streams=[stream], batch_size=8, shuffle=True, shuffle_seed=3,
                            shuffle_block_size=FILES * ROWS)


def test_a_budget_too_small_for_the_shuffle_warns_once_per_epoch(
        dataset, tmp_path, monkeypatch, caplog) -> None:
    # Keeps the newest unit only; set after ``streaming`` was imported: read when used.
    monkeypatch.setenv('STREAMING_DECODED_BYTES', '1')
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert _epoch(dataset) == FILES * ROWS
    counts = dataset.cache.decoded.epoch_decodes()
    assert counts.max() > 1 + decoded_units.REDECODES_TO_WARN  # Decoded again and again.
    assert (dataset.cache.decoded.decodes() == counts).all()
    warnings = _thrash_warnings(caplog)
    assert len(warnings) == 1, warnings
    message = warnings[0]
    assert str(tmp_path / 'cache') in message  # The stream.
    assert 'STREAMING_DECODED_BYTES=1 ' in message and 'epoch 0' in message
    assert 'shuffle_block_size' in message and 'shuffle_algo' in message

    caplog.clear()
    assert _epoch(dataset) == FILES * ROWS  # The next epoch: counted afresh, warned once more.
    warnings = _thrash_warnings(caplog)
    assert len(warnings) == 1 and 'epoch 1' in warnings[0], warnings
    assert dataset.cache.decoded.epoch_decodes().sum() < dataset.cache.decoded.decodes().sum()


def test_units_that_fit_the_budget_are_decoded_once_without_a_warning(dataset, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert _epoch(dataset) == FILES * ROWS
    counts = dataset.cache.decoded.epoch_decodes()
    # Each unit decoded once: also those decoded ahead for a batch then read sample by sample
    # (these columns cannot be gathered at once) are kept, not decoded again.
    assert counts.tolist() == [1] * (FILES * 3), counts
    first = int(dataset.cache.decoded.decodes().sum())
    assert _epoch(dataset) == FILES * ROWS  # Kept decoded: at most once more per unit.
    assert int(dataset.cache.decoded.decodes().sum()) <= first + FILES * 3
    assert not _thrash_warnings(caplog)


def test_two_workers_count_their_decodes_on_the_node_and_mark_the_epoch_warned(
        dataset, monkeypatch) -> None:
    # Each worker decodes what it reads (not shared: its decodes follow from its own order
    # alone) and keeps only its newest unit; the budget is set before the workers fork.
    monkeypatch.setenv('STREAMING_SHARED_DECODE', '0')
    monkeypatch.setenv('STREAMING_DECODED_BYTES', '1')
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2)
    assert sum(len(batch['id']) for batch in loader) == FILES * ROWS
    counts = dataset.cache.decoded.epoch_decodes()
    assert counts.max() > 2 + decoded_units.REDECODES_TO_WARN, counts  # 2 readers on the node.
    # One of the workers warned (in its own log) and marked epoch 0 warned for the node.
    assert dataset.cache.decoded.shared.array('decode_epochs').tolist() == [1, 1]


def test_the_decode_budget_is_read_when_used(monkeypatch) -> None:
    """``STREAMING_DECODED_BYTES`` set after import is followed, by new and existing caches."""
    monkeypatch.setenv('STREAMING_DECODED_BYTES', '10')
    assert source_reader._decoded.budget == 10  # The process's cache, made at import.
    cache = DecodedCache()
    owners = [SimpleNamespace(decoded=None) for _ in range(3)]
    for owner in owners:
        cache.put(owner, 'columns', 6)
    assert [owner.decoded for owner in owners] == [None, None, 'columns']  # Only 6 of 18 fit.
    monkeypatch.setenv('STREAMING_DECODED_BYTES', '100')
    for owner in owners:
        cache.put(owner, 'columns', 6)
    assert [owner.decoded for owner in owners] == ['columns'] * 3
    monkeypatch.delenv('STREAMING_DECODED_BYTES')
    assert cache.budget == 512 << 20 and DecodedCache(budget=5).budget == 5
    monkeypatch.setenv('STREAMING_DECODED_BYTES', 'lots')
    with pytest.raises(ValueError, match="STREAMING_DECODED_BYTES='lots'"):
        cache.put(owners[0], 'columns', 6)
