"""The C copy of a batch's values into a ring slot (``_copy_spans.c``) writes the same bytes as
the memoryview copy used without it, and refuses spans outside a source or the destination. If
the extension was not built (no compiler at install time), these tests build it from its source
first: they always run it."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from streaming.dataset import handoff
from streaming.dataset.handoff import Scattered
from streaming.format.mds.reader import Spans
from tests.unit_helpers import build_extension


@pytest.fixture(scope='module')
def native(tmp_path_factory):
    """The extension module: the installed one, else built from its source into a temp dir."""
    source = os.path.join(os.path.dirname(handoff.__file__), '_copy_spans.c')
    return build_extension(handoff._copy_spans, source,
                           str(tmp_path_factory.mktemp('copy_spans')))


def _sources(rng: np.random.Generator) -> list[mmap.mmap]:
    maps = []
    for size in rng.integers(1, 5_000, 7):
        data = mmap.mmap(-1, int(size))
        data[:] = rng.bytes(int(size))
        maps.append(data)
    return maps


def _copied(module, scattered: Scattered, offsets: np.ndarray, monkeypatch) -> bytes:
    monkeypatch.setattr(handoff, '_copy_spans', module)
    out = bytearray(int(offsets[-1]) + 3)
    scattered.copy_into(memoryview(out), offsets)
    return bytes(out)


@pytest.mark.parametrize('seed', range(5))
def test_same_bytes_as_the_memoryview_copy(native, monkeypatch, seed) -> None:
    rng = np.random.default_rng(seed)
    sources = _sources(rng)
    count = int(rng.integers(1, 60))
    part = rng.integers(0, len(sources), count)
    lengths = np.array([len(sources[p]) for p in part])
    starts = (rng.random(count) * lengths).astype(np.int64)
    stops = starts + (rng.random(count) * (lengths - starts + 1)).astype(np.int64)  # Some empty.
    offsets = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.int64)
    in_order = Scattered.in_order(sources, part, starts, stops)
    want = b''.join(sources[p][a:b] for p, a, b in zip(part, starts, stops)) + bytes(3)
    assert _copied(native, in_order, offsets, monkeypatch) == want
    assert _copied(None, in_order, offsets, monkeypatch) == want
    # The per-shard form (uint32 positions, values out of batch order): the same bytes too.
    order = rng.permutation(count)
    parts = [(Spans(sources[p], starts[order][part[order] == p].astype(np.uint32),
                    stops[order][part[order] == p].astype(np.uint32)),
              order[part[order] == p]) for p in range(len(sources))]
    scattered = Scattered([part for part in parts if len(part[1])], count)
    assert _copied(native, scattered, offsets, monkeypatch) == want
    assert _copied(None, scattered, offsets, monkeypatch) == want
    assert scattered.values() == in_order.values() == [sources[p][a:b] for p, a, b in
                                                       zip(part, starts, stops)]


def test_spans_out_of_bounds_are_refused(native) -> None:
    source = mmap.mmap(-1, 100)
    out = bytearray(50)
    at, part = np.array([0], np.int64), np.array([0], np.int64)
    for start, stop, to in ((90, 101, 0), (-1, 5, 0), (10, 5, 0), (0, 10, 45)):
        with pytest.raises(ValueError, match='out of bounds'):
            native.copy_spans(memoryview(out), np.array([to], np.int64), [source], part,
                              np.array([start], np.int64), np.array([stop], np.int64))
    with pytest.raises(ValueError, match='names source 1'):
        native.copy_spans(memoryview(out), at, [source], np.array([1], np.int64),
                          np.array([0], np.int64), np.array([1], np.int64))
    with pytest.raises(TypeError, match='int64'):
        native.copy_spans(memoryview(out), at, [source], part, np.array([0], np.int32),
                          np.array([1], np.int64))
    with pytest.raises(BufferError):  # Not writable.
        native.copy_spans(memoryview(bytes(50)), at, [source], part, np.array([0], np.int64),
                          np.array([1], np.int64))
    assert out == bytearray(50)
    source.close()  # No buffer of it is still held.
