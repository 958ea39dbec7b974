"""Mixing several token corpora by token share, e.g. 70% web, 20% code, 10% math.

Each source is a ``ShardRotation`` (its own shards, local directory, disk budget, prefetch and
verification). A step's global batch is ``batch_size x world_size`` windows. Which source feeds
each *unit* (a window with ``interleave=True``, a whole step's batch with ``interleave=False``)
is a pure function of ``(seed, unit number)`` and the weights in force at that step: unit ``n``
draws ``u_n = frac(phase(seed) + n / golden ratio)`` (a low-discrepancy sequence, so token
shares track the weights within a few units at every point, not only on average) and takes
the source whose slice of ``[0, 1)`` holds it. Every rank computes the same assignment with no
communication, and a rank takes its own ``batch_size`` windows of the step.

Source ``k``'s units are numbered in order of use; its ``m``-th window is window
``order_g[o]`` of its ``g``-th shard visit (``m`` = windows in visits before ``g`` + ``o``),
where ``order_g`` is the ``EpochSampler`` permutation seeded by ``(seed + k, g)``. A source that
runs out of shards starts over from its first (``ShardRotation`` cycles), reshuffled per visit.
A step's batch depends only on the step, so a run restarted at any step (from ``state_dict``,
or ``start_step`` alone, which recounts the units of earlier steps) reads the same batches.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from streaming.tokens.rotation import ShardRotation
from streaming.tokens.sampler import EpochSampler
from streaming.util import sorted_unique

__all__ = ['TokenMix']

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio, odd.
_CHUNK = 1 << 20
Schedule = Callable[[int], Sequence[float]] | Sequence[tuple[int, Sequence[float]]]


class TokenMix:
    """Batches mixed from several ``ShardRotation`` sources with weights by tokens.

    ``sources``: ``{name: rotation}`` (or a list). ``weights``: the token share of each source
    (normalised); ``schedule``: weights as a function of the step, either a callable
    ``step -> weights`` or breakpoints ``[(first_step, weights), ...]`` (piecewise constant;
    the first must start at step 0). ``interleave=True``: each window of a batch is drawn on
    its own (every batch mixes sources; all sources need the same window length);
    ``interleave=False``: each step's whole batch comes from one source (window lengths may
    differ; a source's weight is then divided by its window length so that the shares stay by
    tokens). ``seed``: the mix's seed. ``start_step``: the first step of this run.
    """

    def __init__(self, sources: Mapping[str, ShardRotation] | Sequence[ShardRotation],
                 weights: Sequence[float] | Mapping[str, float] | None = None, *,
                 batch_size: int, schedule: Schedule | None = None, seed: int = 0,
                 interleave: bool = True, start_step: int = 0) -> None:
        if isinstance(sources, Mapping):
            self.names = list(sources)
            self.sources = list(sources.values())
        else:
            self.sources = list(sources)
            self.names = [f'source{k}' for k in range(len(self.sources))]
        if not self.sources:
            raise ValueError('TokenMix: no sources.')
        if batch_size < 1:
            raise ValueError(f'TokenMix: batch_size must be >= 1, got {batch_size}.')
        if (weights is None) == (schedule is None):
            raise ValueError('TokenMix: pass exactly one of weights and schedule.')
        if isinstance(weights, Mapping):
            unknown = set(weights) - set(self.names)
            if unknown:
                raise ValueError(f'TokenMix: weights for unknown sources {sorted(unknown)}; '
                                 f'the sources are {self.names}.')
            weights = [weights.get(name, 0.0) for name in self.names]
        self.batch_size, self.seed, self.interleave = int(batch_size), int(seed), interleave
        self.world = self.sources[0].world
        self.lengths = np.array([s.seq_len + s.labels for s in self.sources], np.float64)
        if interleave and len(set(self.lengths.tolist())) > 1:
            raise ValueError(f'TokenMix: interleave=True stacks windows of every source in one '
                             f'batch, so their lengths must agree; got '
                             f'{dict(zip(self.names, self.lengths.astype(int).tolist()))}. '
                             f'Use interleave=False for whole batches per source.')
        self._schedule = self._breakpoints(schedule if schedule is not None
                                           else [(0, weights)])  # type: ignore[list-item]
        self.units_per_step = self.batch_size * self.world.world_size if interleave else 1
        self._phase = np.uint64(np.random.default_rng([self.seed & 0xFFFFFFFF, 0x6D6978])
                                .integers(0, 2**63, dtype=np.uint64)) * np.uint64(2)
        self._windows: list[dict[int, int]] = [{} for _ in self.sources]
        self._orders: list[tuple[int, np.ndarray] | None] = [None] * len(self.sources)
        self._starts: list[np.ndarray | None] = [None] * len(self.sources)
        self.step = int(start_step)
        self.consumed = self._count_before(self.step)

    # ---- weights ----------------------------------------------------------------------------
    def _breakpoints(self, schedule: Any) -> Any:
        if callable(schedule):
            return schedule
        points = sorted((int(step), self._normalised(w, step)) for step, w in schedule)
        if not points or points[0][0] != 0:
            raise ValueError('TokenMix: the schedule must give weights from step 0.')
        return points

    def _normalised(self, weights: Sequence[float], step: int) -> np.ndarray:
        array = np.asarray(weights, np.float64).reshape(-1)
        if len(array) != len(self.sources) or not np.all(np.isfinite(array)) or \
                np.any(array < 0) or array.sum() <= 0:
            raise ValueError(f'TokenMix: weights at step {step} must be {len(self.sources)} '
                             f'non-negative numbers, not all zero (one per source '
                             f'{self.names}); got {list(weights)}.')
        if not self.interleave:
            array = array / self.lengths  # Shares of steps such that tokens follow weights.
        return array / array.sum()

    def weights(self, step: int) -> np.ndarray:
        """The unit probabilities in force at ``step`` (token shares when interleaving)."""
        return self._probabilities(np.array([step]))[0]

    def _probabilities(self, steps: np.ndarray) -> np.ndarray:
        """``(len(steps), sources)`` unit probabilities."""
        if callable(self._schedule):
            cache: dict[int, np.ndarray] = {}
            rows = [cache.setdefault(s, self._normalised(self._schedule(s), s))
                    for s in steps.tolist()]
            return np.array(rows).reshape(len(steps), len(self.sources))
        starts = np.array([p[0] for p in self._schedule])
        table = np.array([p[1] for p in self._schedule])
        return table[np.searchsorted(starts, steps, side='right') - 1]

    # ---- the assignment -----------------------------------------------------------------------
    def _sources_of(self, first_unit: int, count: int) -> np.ndarray:
        """The source of units ``first_unit .. first_unit + count - 1``."""
        units = np.arange(first_unit, first_unit + count, dtype=np.uint64)
        with np.errstate(over='ignore'):
            u = ((self._phase + units * _GOLDEN) >> np.uint64(11)).astype(np.float64) / 2.0**53
        first_step = first_unit // self.units_per_step
        last_step = (first_unit + count - 1) // self.units_per_step
        if first_step == last_step:  # One step (every batch): one set of weights.
            edges = np.cumsum(self._probabilities(np.array([first_step]))[0])[:-1]
            return np.searchsorted(edges, u, side='right').astype(np.int64)
        steps = (np.arange(first_unit, first_unit + count) // self.units_per_step)
        distinct, inverse = np.unique(steps, return_inverse=True)
        edges = np.cumsum(self._probabilities(distinct), axis=1)[:, :-1]
        return (u[:, None] >= edges[inverse]).sum(axis=1).astype(np.int64)

    def sources_of_step(self, step: int) -> np.ndarray:
        """The source of each unit of ``step`` (all ranks' windows, or the one whole batch)."""
        return self._sources_of(step * self.units_per_step, self.units_per_step)

    def _count_before(self, step: int) -> np.ndarray:
        """Units of each source in steps ``0 .. step - 1``."""
        counts = np.zeros(len(self.sources), np.int64)
        total = step * self.units_per_step
        for first in range(0, total, _CHUNK):
            chosen = self._sources_of(first, min(_CHUNK, total - first))
            counts += np.bincount(chosen, minlength=len(self.sources))
        return counts

    # ---- windows of a source --------------------------------------------------------------------
    def _shard_windows(self, k: int, position: int) -> int:
        """Windows of shard ``position`` of source ``k``, without reading the shard.

        The manifest's count, or else the sidecar's size (less one with labels), or else the
        token file's ``.npy`` header (one ranged read).
        """
        cache = self._windows[k]
        if position not in cache:
            source = self.sources[k]
            shard = source.shards[position]
            if shard.entry is not None:
                tokens = shard.entry.num_tokens
                cache[position] = max(0, (tokens - source.labels) // source.seq_len)
            elif shard.ids_url:
                from streaming.storage import get_backend
                size = get_backend(shard.ids_url).stat(shard.ids_url,
                                                       timeout=source.store.timeout).size or 0
                cache[position] = max(0, size // 8 - source.labels)
            else:  # Neither: the token file's header, by a ranged read.
                tokens = _remote_token_count(shard.tokens_url, source.raw_dtype,
                                             source.store.timeout)
                cache[position] = max(0, (tokens - source.labels) // source.seq_len)
        return cache[position]

    def _locate(self, k: int, numbers: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``(visit g, positions in numbers, offsets in the visit)`` for source ``k``'s windows."""
        starts = self._starts[k]
        if starts is None:
            n = len(self.sources[k].shards)
            starts = np.cumsum([0] + [self._shard_windows(k, p) for p in range(n)])
            if starts[-1] == 0:
                raise ValueError(f'TokenMix: source {self.names[k]!r} has no whole windows.')
            self._starts[k] = starts
        n = len(starts) - 1
        laps, rest = np.divmod(numbers, starts[-1])
        within = np.searchsorted(starts, rest, side='right') - 1
        visits = laps * n + within
        offsets = rest - starts[within]
        first, last = int(visits.min()), int(visits.max())
        if first == last:  # The common case: one visit.
            return [(first, np.arange(len(numbers)), offsets)]
        return [(g, where, offsets[where]) for g in range(first, last + 1)
                if len(where := np.flatnonzero(visits == g))]

    def _order(self, k: int, g: int, num_windows: int) -> np.ndarray:
        cached = self._orders[k]
        if cached is None or cached[0] != g:
            order = EpochSampler(num_windows, seed=self.seed + k, epoch=g).order()
            if num_windows < 2**31:
                order = order.astype(np.int32)  # Half the memory for a visit's permutation.
            cached = self._orders[k] = (g, order)
        return cached[1]

    # ---- batches ------------------------------------------------------------------------------
    def batch(self, step: int) -> Any:
        """This rank's ``(batch_size, window)`` batch of ``step`` (a torch tensor)."""
        import torch
        return torch.from_numpy(self.batch_array(step))

    def batch_array(self, step: int) -> np.ndarray:
        """``batch`` as a numpy array; also returns in ``last_sources`` each row's source."""
        if step != self.step:
            self.consumed = self._count_before(step)
        units = self.sources_of_step(step)
        rank, size = self.world.rank, self.batch_size
        if self.interleave:
            before = np.zeros((len(units), len(self.sources)), np.int64)
            before[np.arange(len(units)), units] = 1
            seen = np.cumsum(before, axis=0) - before  # Units of each source earlier in the step.
            mine = np.arange(rank * size, (rank + 1) * size)
            kinds = units[mine]
            numbers = self.consumed[kinds] + seen[mine, kinds]
        else:
            kinds = np.full(size, units[0])
            numbers = (self.consumed[units[0]] * self.world.world_size * size +
                       rank * size + np.arange(size))
        width = int(self.lengths[kinds[0]])
        dtype = None
        out: np.ndarray | None = None
        for k in sorted_unique(kinds).tolist():
            rows = np.flatnonzero(kinds == k)
            for g, where, offsets in self._locate(k, numbers[rows]):
                source = self.sources[k]
                source.started = g
                dataset = source.dataset
                indices = self._order(k, g, len(dataset))[offsets]
                part = dataset.batch(indices) if not dataset.as_tensor else \
                    dataset.batch(indices).numpy()
                if out is None:
                    dtype = part.dtype
                    out = np.empty((size, width), dtype)
                elif part.dtype != dtype:
                    raise ValueError(f'TokenMix: source {self.names[k]!r} holds {part.dtype} '
                                     f'tokens, another {dtype}; mixed batches need one dtype.')
                out[rows[where]] = part
        self.consumed = self.consumed + np.bincount(units, minlength=len(self.sources))
        self.step = step + 1
        self.last_sources = kinds
        assert out is not None
        return out

    def __iter__(self):
        """Batches from the current step on, forever (``step`` advances)."""
        while True:
            yield self.batch(self.step)

    # ---- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The next step and each source's units consumed before it."""
        return {'step': self.step, 'consumed': self.consumed.tolist(), 'seed': self.seed,
                'names': list(self.names)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state.get('names', self.names)) != self.names or \
                int(state.get('seed', self.seed)) != self.seed:
            raise ValueError(f'TokenMix state was saved for sources {state.get("names")} and '
                             f'seed {state.get("seed")}; this mix has {self.names}, seed '
                             f'{self.seed}.')
        self.step = int(state['step'])
        self.consumed = np.array(state['consumed'], np.int64)

    def close(self) -> None:
        for source in self.sources:
            source.close()

    def __enter__(self) -> TokenMix:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remote_token_count(url: str, raw_dtype: Any, timeout: float) -> int:
    """Tokens in the token file at ``url``, from its ``.npy`` header (or size and raw dtype)."""
    import io

    from streaming.storage import get_backend
    from streaming.tokens.format import TokenFormatError, token_dtype
    backend = get_backend(url)
    size = backend.stat(url, timeout=timeout).size or 0
    if raw_dtype is not None:
        return size // token_dtype(raw_dtype, url).itemsize
    head = b''.join(backend.read(url, 0, min(size, 4096), timeout=timeout).chunks)
    try:
        f = io.BytesIO(head)
        version = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, _, _ = reader(f)
    except ValueError as error:
        raise TokenFormatError(f'{url}: unreadable .npy header ({error}).') from None
    return int(shape[0])
