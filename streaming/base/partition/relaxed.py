"""The reference's ``streaming.base.partition.relaxed``."""

from streaming.base.partition import get_partitions_orig, get_partitions_relaxed

__all__ = ['get_partitions_orig', 'get_partitions_relaxed']
