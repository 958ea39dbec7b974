"""The reference's ``streaming.base.dataset``: ``StreamingDataset`` and the names it exported."""

from streaming.base.array import Array
from streaming.base.batching import generate_work
from streaming.base.constant import (
    BARRIER,
    BARRIER_FILELOCK,
    CACHE_FILELOCK,
    CACHE_USAGE,
    DEFAULT_TIMEOUT,
    EPOCH_DATA,
    EPOCH_SHAPE,
    NEXT_EPOCH,
    RESUME,
    SHARD_ACCESS_TIMES,
    SHARD_STATES,
    TICK,
)
from streaming.base.distributed import maybe_init_dist
from streaming.base.registry_utils import construct_from_registry
from streaming.base.sampling import get_sampling
from streaming.base.shared import (
    SharedArray,
    SharedBarrier,
    SharedMemory,
    SharedScalar,
    get_shm_prefix,
)
from streaming.base.spanner import Spanner
from streaming.base.world import World
from streaming.dataset.dataset import StreamingDataset
from streaming.dataset.stream import Stream, streams_registry
from streaming.format.index import get_index_basename
from streaming.util import bytes_to_int, number_abbrev_to_int

# Access time of a shard that is not cached (the largest uint64).
NEVER = (1 << 64) - 1

__all__ = ['Array', 'BARRIER', 'BARRIER_FILELOCK', 'CACHE_FILELOCK', 'CACHE_USAGE',
           'DEFAULT_TIMEOUT', 'EPOCH_DATA', 'EPOCH_SHAPE', 'NEVER', 'NEXT_EPOCH', 'RESUME',
           'SHARD_ACCESS_TIMES', 'SHARD_STATES', 'SharedArray', 'SharedBarrier', 'SharedMemory',
           'SharedScalar', 'Spanner', 'Stream', 'StreamingDataset', 'TICK', 'World',
           'bytes_to_int', 'construct_from_registry', 'generate_work', 'get_index_basename',
           'get_sampling', 'get_shm_prefix', 'maybe_init_dist', 'number_abbrev_to_int',
           'streams_registry']
