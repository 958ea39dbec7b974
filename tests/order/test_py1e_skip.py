"""The C skip of py1e's draws leaves numpy's generator exactly where numpy's draws do.

A node of a multi-node job skips the draws of the rows before its own (``_skip_py1e_rows``).
With the optional extension (``_py1e_skip.c``) the draws are replayed in C; without it numpy
makes them. Both must leave the same full PCG64 state, buffered 32-bit half included, or every
later row's order would differ from the reference's. If the extension was not built (no
compiler at install time), these tests build it from its source first: they always run it.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streaming.order.ids import epoch_id_steps, epoch_sample_ids
from streaming.order.shuffles import py1e
from streaming.order.shuffles.rows import RowSpans
from tests.unit_helpers import build_extension


@pytest.fixture(scope='module')
def native(tmp_path_factory):
    """The extension module: the installed one, else built from its source into a temp dir."""
    source = os.path.join(os.path.dirname(py1e.__file__), '_py1e_skip.c')
    return build_extension(py1e._py1e_skip, source,
                           str(tmp_path_factory.mktemp('py1e_skip')))


def _state_after(module, lengths: list[int], cuts: list[int], block: int, seed: int,
                 before: int, monkeypatch) -> dict:
    """The generator's state after skipping every row but the last, with ``module`` or numpy."""
    ends = sorted(min(cut, len(lengths)) for cut in cuts)
    spans = RowSpans(np.zeros(len(lengths), np.int64), np.array(lengths, np.int64),
                     np.array([0, *ends, len(lengths)], np.int64))
    rng = np.random.default_rng(seed)
    for _ in range(before):  # 0, 1 or 2 32-bit draws: a buffered upper half or a stale one.
        rng.integers(0, 1000)
    monkeypatch.setattr(py1e, '_py1e_skip', module)
    py1e._skip_py1e_rows(spans, spans.num_rows - 1, block, rng, np.int64)
    return rng.bit_generator.state


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.one_of(st.integers(0, 40), st.integers(0, 3000)), max_size=40),
       cuts=st.lists(st.integers(0, 40), max_size=6),
       block=st.one_of(st.integers(1, 12), st.integers(1, 1 << 22)),
       seed=st.integers(0, 2**32), before=st.integers(0, 2))
@example(lengths=[70_000, 1, 0, 2], cuts=[1, 1, 3], block=1 << 20, seed=5, before=1)
@example(lengths=[513, 2, 2], cuts=[1, 2], block=1, seed=0, before=0)
def test_the_c_skip_leaves_numpys_state(native, lengths, cuts, block, seed, before) -> None:
    with pytest.MonkeyPatch.context() as patch:
        fast = _state_after(native, lengths, cuts, block, seed, before, patch)
        slow = _state_after(None, lengths, cuts, block, seed, before, patch)
    assert fast == slow


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 5000), max_size=30), keep=st.integers(0, 20_000),
       seed=st.integers(0, 2**32), before=st.integers(0, 2))
def test_a_rows_shuffle_pass_is_the_same_with_the_c_draws(native, lengths, keep, seed,
                                                          before) -> None:
    """A row's own Fisher-Yates pass (kept spans' ids, then the others' draws alone)."""
    results = []
    for module in (native, None):
        rng = np.random.default_rng(seed)
        for _ in range(before):
            rng.integers(0, 1000)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(py1e, '_py1e_skip', module)
            begin = np.cumsum([0, *lengths[:-1]]).tolist()
            kept, saved = py1e._fisher_yates_pass(begin, lengths, keep, rng, np.int64)
        results.append(([ids.tolist() for ids in kept], saved, rng.bit_generator.state))
    assert results[0] == results[1]


def _inputs(rows: int) -> dict:
    sizes = np.random.default_rng(9).integers(200, 4000, 120).astype(np.int64)
    return dict(shard_sizes=sizes, shard_streams=np.zeros(len(sizes), np.int64),
                stream_choose=np.array([int(sizes.sum())]), epoch=3, seed=41, shuffle=True,
                shuffle_algo='py1e', block_size=5000, num_canonical_nodes=rows,
                sampling_method='balanced', sampling_granularity=1)


@pytest.mark.parametrize('use_native', [True, False])
def test_a_node_starting_at_the_last_row_gets_the_same_ids(native, monkeypatch,
                                                           use_native) -> None:
    inputs = _inputs(16)
    expected = epoch_sample_ids(**inputs)
    monkeypatch.setattr(py1e, '_py1e_skip', native if use_native else None)
    steps = epoch_id_steps(**inputs, first_position=len(expected) - 1)
    ids = next(steps)
    for _ in steps:
        pass
    assert np.array_equal(ids, expected)


def test_bad_row_ends_are_a_value_error(native) -> None:
    lengths = np.array([5, 6, 7], np.int64)
    with pytest.raises(ValueError, match='row_ends'):
        native.skip_rows(0, 1, 0, 1, False, 0, lengths, np.array([2, 1], np.int64), 10, 20)
    with pytest.raises(ValueError, match='row_ends'):
        native.skip_rows(0, 1, 0, 1, False, 0, lengths, np.array([4], np.int64), 10, 20)
