"""The reference's ``streaming.base.partition.orig``."""

from streaming.base.partition import get_partitions_orig

__all__ = ['get_partitions_orig']
