"""StreamingDataset's arguments: each validated and defaulted here, once, and held in one object.

``DatasetConfig`` is frozen: the rest of the package reads its settings from it and nothing
writes them back. The three values a checkpoint carries and resumption adopts (the canonical
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

__all__ = ['COORDINATION_TIMEOUT_ENV', 'DEFAULT_COORDINATION_TIMEOUT', 'DatasetConfig',
           'ResumableLayout']

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


@dataclass(frozen=True)
class DatasetConfig:
    """Every StreamingDataset setting, validated, with its default filled in.

    ``epoch_size`` is the size asked for (None: every sample); ``num_canonical_nodes`` the count
    given (None: the shuffle's default once the node count is known); ``cache_limit`` is read by
    the shard cache only. ``predownload`` is always a number (the default filled in, as the
    reference reports it); ``predownload_given`` says whether the caller passed it, because only
    a given ``predownload`` bounds the lookahead in samples, even one equal to the default.
    """

    epoch_size: int | None
    predownload: int
    cache_limit: int | None
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
    allow_unsafe_types: bool
    download_retry: int
    download_timeout: float
    validate_hash: str | None
    keep_zip: bool
    coordination_timeout: float
    predownload_given: bool = False

    @classmethod
    def from_arguments(cls, **arguments: Any) -> DatasetConfig:
        """Validate StreamingDataset's keyword arguments; errors name the parameter."""
        given = {f.name for f in fields(cls)} - {'predownload_given'}
        if set(arguments) != given:
            raise TypeError(f'DatasetConfig.from_arguments: expected {sorted(given)}, got '
                            f'{sorted(arguments)}')
        a = dict(arguments, predownload_given=arguments['predownload'] is not None)
        check_choice('sampling_method', a['sampling_method'], SAMPLING_METHODS)
        # The three tables are read now, as the reference reads them: a name registered in
        # streaming.base.{partition,batching,shuffle} before the dataset is made is accepted.
        check_choice('partition_algo', a['partition_algo'], tuple(PARTITIONS))
        batching_fn(a['batching_method'])  # Raises for an unregistered name.
        get_shuffle(a['shuffle_algo'])
        for name in ('sampling_granularity', 'num_canonical_nodes', 'batch_size',
                     'shuffle_block_size', 'replication'):
            if a[name] is not None or name == 'sampling_granularity':
                check_int(name, a[name], 1)
        check_int('shuffle_seed', a['shuffle_seed'], 0)
        if a['predownload'] is None:
            a['predownload'] = cls.default_predownload(a['batch_size'])
        else:
            check_int('predownload', a['predownload'], 0)
            if a['batch_size'] and a['predownload'] < a['batch_size']:
                warnings.warn(f'predownload={a["predownload"]} is below batch_size='
                              f'{a["batch_size"]}: batches will wait on downloads.',
                              stacklevel=3)
        if a['epoch_size'] is not None:
            a['epoch_size'] = parse_quantity('epoch_size', a['epoch_size'], number_abbrev_to_int)
        if a['cache_limit'] is not None:
            a['cache_limit'] = parse_quantity('cache_limit', a['cache_limit'], bytes_to_int,
                                              minimum=1)
        check_download_settings(a['download_retry'], a['download_timeout'])
        a['coordination_timeout'] = _coordination_timeout(a['coordination_timeout'])
        a['shuffle'] = bool(a['shuffle'])
        a['keep_zip'] = bool(a['keep_zip'])
        a['allow_unsafe_types'] = bool(a['allow_unsafe_types'])
        return cls(**a)

    @staticmethod
    def default_predownload(batch_size: int | None) -> int:
        """Samples to download ahead when ``predownload`` is not given."""
        return 8 * batch_size if batch_size else 64

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments ``from_arguments`` would rebuild this configuration from.

        A defaulted ``predownload`` comes back as None, so that it is defaulted again (from a
        new ``batch_size``, say); a given one comes back as given.
        """
        arguments = {f.name: getattr(self, f.name) for f in fields(self)}
        if not arguments.pop('predownload_given'):
            arguments['predownload'] = None
        return arguments

    def stream_defaults(self) -> dict[str, Any]:
        """The download settings streams that left theirs unset inherit."""
        return {'download_retry': self.download_retry, 'download_timeout': self.download_timeout,
                'validate_hash': self.validate_hash, 'keep_zip': self.keep_zip}

    @property
    def block_size_matters(self) -> bool:
        """Whether the epoch is shuffled by an algorithm that uses ``shuffle_block_size``."""
        return self.shuffle and shuffle_traits(self.shuffle_algo).uses_block_size

    def block_size(self, num_canonical_nodes: int, cap: int | None = None) -> int:
        """The shuffle block size in effect: the given one or the default, within ``cap``."""
        block = shuffle_block_size_in_effect(self.shuffle_block_size, num_canonical_nodes)
        return block if cap is None else min(block, cap)


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
