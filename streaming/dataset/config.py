"""StreamingDataset's arguments: each validated and defaulted here, once.

They come in three groups, one for each part of the dataset that reads them: ``OrderSettings``
(the epoch order), ``StreamSettings`` (the streams' set-up) and ``CacheSettings`` (the shard
cache and its downloads); ``DatasetConfig`` holds the three. All are frozen: nothing writes a
setting back. The three values a checkpoint carries and resumption adopts (the canonical
node count, the seed, the node count of the first run) change during a run, so they live apart,
in ``ResumableLayout``. Choices come from the live tables (``streaming.order``'s shuffles,
partitions and batching methods) and integer rules from ``streaming.order``'s checks, so the
dataset and ``EpochSpec`` accept and refuse the same values.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, fields
from typing import Any

from streaming.dataset.epochs import ResumeRecord
from streaming.dataset.order_store import order_cache_enabled
from streaming.dataset.stream import check_download_settings
from streaming.order import (
    PARTITIONS,
    SAMPLING_METHODS,
    batching_fn,
    check_choice,
    check_int,
    default_num_canonical_nodes,
    get_shuffle,
    shuffle_block_size_in_effect,
    shuffle_traits,
)
from streaming.util import bytes_to_int, number_abbrev_to_int, parse_quantity

__all__ = ['COORDINATION_TIMEOUT_ENV', 'DEFAULT_COORDINATION_TIMEOUT', 'CacheSettings',
           'DatasetConfig', 'OrderSettings', 'ResumableLayout', 'StreamSettings']

# How long a rank waits for its node's first rank to publish the shared state (which it does
# after fetching every stream's index), unless ``coordination_timeout`` or this variable says.
DEFAULT_COORDINATION_TIMEOUT = 300.0
COORDINATION_TIMEOUT_ENV = 'STREAMING_COORDINATION_TIMEOUT'


def _coordination_timeout(value: float | None) -> float:
    source = 'coordination_timeout'
    if value is None:
        env = os.environ.get(COORDINATION_TIMEOUT_ENV)
        if env in (None, ''):
            return DEFAULT_COORDINATION_TIMEOUT
        source = f'environment variable {COORDINATION_TIMEOUT_ENV}'
        try:
            value = float(env)  # type: ignore[arg-type]
        except ValueError:
            raise ValueError(f'{source}={env!r} must be a number of seconds.') from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f'{source} must be a number of seconds > 0, got {value!r}.')
    return float(value)


class _Settings:
    """A group of settings, each named as ``StreamingDataset``'s argument it comes from."""

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments ``from_arguments`` would rebuild this group from."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class OrderSettings(_Settings):
    """What the epoch order depends on (``order.plan``'s settings), validated.

    ``num_canonical_nodes`` is the count given (None: the shuffle's default once the node count
    is known); resumption may replace it and the seed (see ``ResumableLayout``).
    """

    sampling_method: str
    sampling_granularity: int
    partition_algo: str
    num_canonical_nodes: int | None
    batch_size: int | None
    shuffle: bool
    shuffle_algo: str
    shuffle_seed: int
    shuffle_block_size: int | None
    batching_method: str
    replication: int | None

    @classmethod
    def from_arguments(cls, *, sampling_method: str, sampling_granularity: int,
                       partition_algo: str, num_canonical_nodes: int | None,
                       batch_size: int | None, shuffle: bool, shuffle_algo: str,
                       shuffle_seed: int, shuffle_block_size: int | None, batching_method: str,
                       replication: int | None) -> OrderSettings:
        """Validate the order's arguments; errors name the parameter."""
        check_choice('sampling_method', sampling_method, SAMPLING_METHODS)
        # The three tables are read now, as the reference reads them: a name registered in
        # streaming.base.{partition,batching,shuffle} before the dataset is made is accepted.
        check_choice('partition_algo', partition_algo, tuple(PARTITIONS))
        batching_fn(batching_method)  # Raises for an unregistered name.
        get_shuffle(shuffle_algo)
        check_int('sampling_granularity', sampling_granularity, 1)
        for name, value in (('num_canonical_nodes', num_canonical_nodes),
                            ('batch_size', batch_size), ('shuffle_block_size', shuffle_block_size),
                            ('replication', replication)):
            if value is not None:
                check_int(name, value, 1)
        check_int('shuffle_seed', shuffle_seed, 0)
        return cls(sampling_method, sampling_granularity, partition_algo, num_canonical_nodes,
                   batch_size, bool(shuffle), shuffle_algo, shuffle_seed, shuffle_block_size,
                   batching_method, replication)

    @property
    def block_size_matters(self) -> bool:
        """Whether the epoch is shuffled by an algorithm that uses ``shuffle_block_size``."""
        return self.shuffle and shuffle_traits(self.shuffle_algo).uses_block_size

    def block_size(self, num_canonical_nodes: int, cap: int | None = None) -> int:
        """The shuffle block size in effect: the given one or the default, within ``cap``."""
        block = shuffle_block_size_in_effect(self.shuffle_block_size, num_canonical_nodes)
        return block if cap is None else min(block, cap)


@dataclass(frozen=True)
class StreamSettings(_Settings):
    """What setting the streams up needs, validated.

    The download settings streams that left theirs unset inherit, what an epoch takes of them
    (``epoch_size``: None, every sample), whether pickled columns may be read, and how long a
    rank waits for its node's first rank, which fetches the indexes.
    """

    epoch_size: int | None
    allow_unsafe_types: bool
    download_retry: int
    download_timeout: float
    validate_hash: str | None
    keep_zip: bool
    coordination_timeout: float

    @classmethod
    def from_arguments(cls, *, epoch_size: int | str | None, allow_unsafe_types: bool,
                       download_retry: int, download_timeout: float, validate_hash: str | None,
                       keep_zip: bool, coordination_timeout: float | None) -> StreamSettings:
        """Validate the streams' arguments; errors name the parameter."""
        if epoch_size is not None:
            epoch_size = parse_quantity('epoch_size', epoch_size, number_abbrev_to_int)
        check_download_settings(download_retry, download_timeout)
        return cls(epoch_size, bool(allow_unsafe_types), download_retry, download_timeout,
                   validate_hash, bool(keep_zip), _coordination_timeout(coordination_timeout))

    def download_defaults(self) -> dict[str, Any]:
        """The download settings streams that left theirs unset inherit."""
        return {'download_retry': self.download_retry, 'download_timeout': self.download_timeout,
                'validate_hash': self.validate_hash, 'keep_zip': self.keep_zip}


@dataclass(frozen=True)
class CacheSettings(_Settings):
    """What the node's shard cache and its downloads ahead read, validated.

    ``cache_limit`` is read by the shard cache only. ``predownload`` is always a number (the
    default filled in, as the reference reports it); ``predownload_given`` says whether the
    caller passed it, because only a given ``predownload`` bounds the lookahead in samples, even
    one equal to the default.
    """

    cache_limit: int | None
    predownload: int
    predownload_given: bool = False

    @classmethod
    def from_arguments(cls, *, cache_limit: int | str | None, predownload: int | None,
                       batch_size: int | None) -> CacheSettings:
        """Validate the cache's arguments (``predownload`` defaults from ``batch_size``)."""
        if predownload is None:
            return cls(cls._limit(cache_limit), cls.default_predownload(batch_size))
        check_int('predownload', predownload, 0)
        if batch_size and predownload < batch_size:
            warnings.warn(f'predownload={predownload} is below batch_size={batch_size}: '
                          f'batches will wait on downloads.', stacklevel=3)
        return cls(cls._limit(cache_limit), predownload, predownload_given=True)

    @staticmethod
    def _limit(cache_limit: int | str | None) -> int | None:
        return None if cache_limit is None else \
            parse_quantity('cache_limit', cache_limit, bytes_to_int, minimum=1)

    @staticmethod
    def default_predownload(batch_size: int | None) -> int:
        """Samples to download ahead when ``predownload`` is not given."""
        return 8 * batch_size if batch_size else 64

    def arguments(self) -> dict[str, Any]:
        """``cache_limit`` and ``predownload`` (None if defaulted: re-defaulted from batch_size)."""
        return {'cache_limit': self.cache_limit,
                'predownload': self.lookahead}

    @property
    def lookahead(self) -> int | None:
        """Samples the node's downloads run ahead: a given ``predownload`` (None: by bytes)."""
        return self.predownload if self.predownload_given else None

    @property
    def keeps_setup_caches(self) -> bool:
        """Whether set-up caches (index summaries, epoch ids) may be written to disk.

        They take disk that ``cache_limit`` does not count: none under a limit.
        """
        return self.cache_limit is None and order_cache_enabled()


@dataclass(frozen=True)
class DatasetConfig:
    """Every StreamingDataset setting, validated, grouped by the part of the dataset that reads it.

    ``order`` goes to the epoch order, ``streams`` to the streams' set-up, ``cache`` to the shard
    cache and its downloads. Each setting also reads by its argument's name
    (``config.shuffle_algo``), as the dataset's attributes do. Frozen: nothing writes a setting
    back; ``replace`` makes a new configuration.
    """

    order: OrderSettings
    streams: StreamSettings
    cache: CacheSettings

    def __getattr__(self, name: str) -> Any:
        group = _GROUP_OF.get(name)
        if group is None:
            raise AttributeError(f'{type(self).__name__} has no setting {name!r}')
        return getattr(object.__getattribute__(self, group), name)

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``StreamingDataset`` this configuration was built from.

        A defaulted ``predownload`` comes back as None, so that it is defaulted again (from a
        new ``batch_size``, say); a given one comes back as given.
        """
        return {**self.order.arguments(), **self.streams.arguments(), **self.cache.arguments()}

    def replace(self, name: str, value: Any) -> DatasetConfig:
        """This configuration with setting ``name`` set to ``value``, validated as at first."""
        a = {**self.arguments(), name: value}
        order = OrderSettings.from_arguments(**{n: a[n] for n in _names(OrderSettings)})
        return DatasetConfig(
            order, StreamSettings.from_arguments(**{n: a[n] for n in _names(StreamSettings)}),
            CacheSettings.from_arguments(cache_limit=a['cache_limit'],
                                         predownload=a['predownload'],
                                         batch_size=order.batch_size))


def _names(group: type) -> list[str]:
    return [f.name for f in fields(group)]


_GROUP_OF = {name: group for group, cls in
             (('order', OrderSettings), ('streams', StreamSettings), ('cache', CacheSettings))
             for name in _names(cls)}


@dataclass
class ResumableLayout:
    """The settings that fix a run's epoch orders and travel in its checkpoints.

    ``state_dict`` records them; ``load_state_dict`` (through the resume record) replaces them,
    so a resumed run lays its epochs out as the checkpointed one did.
    """

    num_canonical_nodes: int | None
    shuffle_seed: int
    initial_physical_nodes: int | None = None

    def resolve_canonical_nodes(self, shuffle_algo: str, num_physical_nodes: int) -> int:
        """The canonical node count, fixing the shuffle's default on first use."""
        if self.num_canonical_nodes is None:
            self.num_canonical_nodes = default_num_canonical_nodes(shuffle_algo,
                                                                   num_physical_nodes)
        return self.num_canonical_nodes

    def adopt(self, record: ResumeRecord) -> None:
        """Take the layout a checkpoint was made with (the values it holds)."""
        if record.num_canonical_nodes is not None:
            self.num_canonical_nodes = record.num_canonical_nodes
        if record.shuffle_seed is not None:
            self.shuffle_seed = record.shuffle_seed
        if record.initial_physical_nodes is not None:
            self.initial_physical_nodes = record.initial_physical_nodes
