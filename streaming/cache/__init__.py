"""The node-wide shard cache and the node's downloads that fill it.

``shard_cache`` (which shards are local, admission and eviction under ``cache_limit``, the LRU
marks), ``budget`` (how the limit's bytes are shared), ``prefetch`` (the node's download
schedule, which asks the cache), ``walk`` (the epoch's first and last uses as the schedule
walks them), ``concurrency`` (how many downloads are in flight) and ``preload`` (what the
download threads import before workers fork). Import the modules themselves; this face loads
nothing.
"""
