"""The reference's ``streaming.base.batching.random``."""

from streaming.base.batching import generate_work_random_batching
from streaming.base.partition import get_partitions
from streaming.base.shuffle import get_shuffle
from streaming.base.world import World

__all__ = ['World', 'generate_work_random_batching', 'get_partitions', 'get_shuffle']
