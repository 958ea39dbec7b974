"""The reference's ``streaming.base.constant``: names of its shared-memory blocks and timings.

This library keeps its shared state elsewhere (see ``streaming.coord``); the values are kept
because user code reads them, for example to build ``clean_stale_shared_memory`` scripts.
"""

# Names of the per-dataset shared-memory blocks (prefixed with a 6-digit dataset number).
LOCALS = 'locals'
BARRIER = 'barrier'
NEXT_EPOCH = 'next_epoch'
CACHE_USAGE = 'cache_usage'
SHARD_STATES = 'shard_states'
SHARD_ACCESS_TIMES = 'shard_access_times'
RESUME = 'resume'
EPOCH_SHAPE = 'epoch_shape'
EPOCH_DATA = 'epoch_data'
SHM_TO_CLEAN = [LOCALS, BARRIER, NEXT_EPOCH, CACHE_USAGE, SHARD_STATES, SHARD_ACCESS_TIMES,
                RESUME, EPOCH_SHAPE, EPOCH_DATA]

# File locks, in the temp dir, with the same prefix.
BARRIER_FILELOCK = 'barrier_filelock'
CACHE_FILELOCK = 'cache_filelock'

# Seconds between polls, and the default wait for a file or a peer.
TICK = 0.007
DEFAULT_TIMEOUT = 60.0
