"""Batching methods: how the streams' canonical-node layouts become one epoch stream.

These serve shuffles registered under new names; the built-in shuffles (and unshuffled epochs)
take the reference's batching (``exact``, ``exact_batching``). ``stratified_counts`` serves both.

* ``random``: all streams laid out together; global batches mix streams at random.
* ``stratified``: each stream laid out alone; every global batch takes a fixed count from each
  stream, proportional to its ``proportion`` (rounded as the reference, ``stratified_counts``).
  The epoch ends when a stream runs out of whole batches.
* ``per_stream``: each stream laid out alone and cut into whole global batches (a stream's last
  incomplete batch is dropped); the batches of all streams are then interleaved, at random when
  shuffling, evenly otherwise.
* ``device_per_stream``: every device batch comes from one stream. Each canonical node cuts each
  stream's part of its row into device batches, orders them (at random when shuffling, evenly
  otherwise), and the canonical nodes take turns. Rounds some canonical node cannot fill, and
  device batches that do not fill a global batch, are dropped.

The non-random methods resume at global-batch granularity: ``sample_in_epoch // global batch``
whole batches are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from streaming.order.layout import Layout
from streaming.order.rng import TAG_BATCH_ORIGINS, TAG_DEVICE_BATCHES, make_rng

__all__ = ['BATCHING_METHODS', 'EpochStream', 'device_per_stream_batching', 'per_stream_batching',
           'random_batching', 'stratified_batching', 'stratified_counts']

BATCHING_METHODS = ('random', 'stratified', 'per_stream', 'device_per_stream')


@dataclass(frozen=True)
class EpochStream:
    """An epoch stream as ``partition.deal_to_devices`` deals it.

    ``read(a, b)`` gives items ``a:b`` of ``length``, each ``atom_width`` samples wide; item 0 is
    at absolute stream position ``start``.
    """

    read: Callable[[int, int], np.ndarray]
    length: int
    start: int
    atom_width: int = 1


def _read_mapped(layouts: Sequence[Layout], stream: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Ids at ``position`` in the stream of layout ``stream`` (elementwise)."""
    ids = np.empty(len(position), np.int64)
    for index in np.unique(stream).tolist():
        chosen = stream == index
        ids[chosen] = layouts[index].at(position[chosen])
    return ids


def random_batching(layout: Layout, sample_in_epoch: int) -> EpochStream:
    """The layout's own stream, less its first ``sample_in_epoch`` samples."""
    start = min(sample_in_epoch, layout.stream_length)
    return EpochStream(lambda first, last: layout.read(start + first, start + last),
                       layout.stream_length - start, start)


def stratified_counts(stream_proportions: np.ndarray, global_batch: int) -> np.ndarray:
    """Samples per stream in every global batch, for stratified batching, as the reference.

    ``int(proportion * global_batch)`` each (float64); the shortfall goes one each to the streams
    with the largest fractional parts, in the order numpy's (default-kind) argsort of those
    parts, reversed, gives: ties to the higher stream index. A stream left with none is an error.
    """
    exact = global_batch * np.asarray(stream_proportions, np.float64)
    counts = exact.astype(np.int64)
    missing = global_batch - int(counts.sum())
    if missing:
        counts[np.argsort(exact - counts)[::-1][:missing]] += 1
    starved = np.flatnonzero(counts <= 0)
    if len(starved):
        raise ValueError(
            f"batching_method='stratified' gives every stream a fixed share of each global batch, "
            f'but with a global batch of {global_batch} streams {starved.tolist()} would get no '
            'sample (their proportion is too small): raise the batch size or the proportions')
    return counts


def stratified_batching(layouts: Sequence[Layout], counts: np.ndarray, global_batch: int,
                        sample_in_epoch: int) -> EpochStream:
    """Each global batch holds ``counts[k]`` consecutive samples of stream ``k``'s stream."""
    used = np.flatnonzero(counts)
    batches = min((layouts[k].stream_length // int(counts[k]) for k in used), default=0)
    skipped = min(sample_in_epoch // global_batch, batches)
    owner = np.repeat(np.arange(len(counts)), counts)
    offset_in_stream = np.arange(global_batch) - np.repeat(np.cumsum(counts) - counts, counts)

    def read(first: int, last: int) -> np.ndarray:
        index = np.arange(first, last, dtype=np.int64) + skipped * global_batch
        batch, offset = np.divmod(index, global_batch)
        stream = owner[offset]
        return _read_mapped(layouts, stream, batch * counts[stream] + offset_in_stream[offset])

    return EpochStream(read, (batches - skipped) * global_batch, skipped * global_batch)


def _interleave_evenly(counts: np.ndarray) -> np.ndarray:
    """Labels ``k`` repeated ``counts[k]`` times, spread evenly.

    Item ``t`` of label ``k`` is placed ``(t + 0.5) / counts[k]`` of the way through.
    """
    labels = np.repeat(np.arange(len(counts)), counts)
    ordinal = np.arange(len(labels)) - np.repeat(np.cumsum(counts) - counts, counts)
    return labels[np.lexsort((labels, (ordinal + 0.5) / np.maximum(counts[labels], 1)))]


def _ordinals(labels: np.ndarray) -> np.ndarray:
    """For each item, how many earlier items carry the same label."""
    order = np.argsort(labels, kind='stable')
    counts = np.bincount(labels) if len(labels) else np.zeros(0, np.int64)
    ordinal = np.empty(len(labels), np.int64)
    ordinal[order] = np.arange(len(labels)) - np.repeat(np.cumsum(counts) - counts, counts)
    return ordinal


def per_stream_batching(layouts: Sequence[Layout], global_batch: int, *, shuffle: bool, seed: int,
                        epoch: int, sample_in_epoch: int) -> EpochStream:
    """Whole global batches from single streams, interleaved across streams."""
    counts = np.array([layout.stream_length // global_batch for layout in layouts], np.int64)
    if shuffle:
        origin = make_rng(seed, TAG_BATCH_ORIGINS, epoch).permutation(
            np.repeat(np.arange(len(counts)), counts))
    else:
        origin = _interleave_evenly(counts)
    ordinal = _ordinals(origin)
    skipped = min(sample_in_epoch // global_batch, len(origin))

    def read(first: int, last: int) -> np.ndarray:
        index = np.arange(first, last, dtype=np.int64) + skipped * global_batch
        batch, offset = np.divmod(index, global_batch)
        return _read_mapped(layouts, origin[batch], ordinal[batch] * global_batch + offset)

    return EpochStream(read, (len(origin) - skipped) * global_batch, skipped * global_batch)


def device_per_stream_batching(layouts: Sequence[Layout], *, num_canonical_nodes: int,
                               batch_size: int, num_devices: int, shuffle: bool, seed: int,
                               epoch: int, sample_in_epoch: int) -> EpochStream:
    """Device batches of one stream each, canonical nodes taking turns.

    Items are whole device batches (``atom_width == batch_size``).
    """
    tables = []
    for node in range(num_canonical_nodes):
        per_stream = np.array([int(layout.lengths[node]) // batch_size
                               if node < layout.num_rows else 0 for layout in layouts], np.int64)
        if shuffle:
            stream = make_rng(seed, TAG_DEVICE_BATCHES, epoch, node).permutation(
                np.repeat(np.arange(len(layouts)), per_stream))
        else:
            stream = _interleave_evenly(per_stream)
        tables.append((stream, _ordinals(stream)))
    rounds = min(len(stream) for stream, _ in tables)
    if rounds == 0 and any(layout.stream_length for layout in layouts):
        raise ValueError(
            "batching_method='device_per_stream' needs every canonical node to fill at least one "
            f'device batch of {batch_size} from a single stream, but some of the '
            f'{num_canonical_nodes} canonical nodes cannot: use fewer canonical nodes or a '
            'smaller batch size')
    streams = np.stack([stream[:rounds] for stream, _ in tables]) if tables else None
    ordinals = np.stack([ordinal[:rounds] for _, ordinal in tables]) if tables else None
    whole = rounds * num_canonical_nodes // num_devices
    skipped = min(sample_in_epoch // (num_devices * batch_size), whole)
    within = np.arange(batch_size)

    def read(first: int, last: int) -> np.ndarray:
        item = np.arange(first, last, dtype=np.int64) + skipped * num_devices
        node, turn = item % num_canonical_nodes, item // num_canonical_nodes
        stream, ordinal = streams[node, turn], ordinals[node, turn]
        ids = np.empty((len(item), batch_size), np.int64)
        for index in np.unique(stream).tolist():
            chosen = stream == index
            rows = layouts[index].rows
            columns = ordinal[chosen, None] * batch_size + within
            ids[chosen] = rows[node[chosen, None], columns]
        return ids

    return EpochStream(read, (whole - skipped) * num_devices, skipped * num_devices,
                       atom_width=batch_size)
