"""The reference's ``streaming.base.shared``: named shared memory, arrays, scalars, a barrier.

And the per-dataset prefix.
"""

from streaming.base.shared.array import SharedArray
from streaming.base.shared.barrier import SharedBarrier
from streaming.base.shared.memory import SharedMemory
from streaming.base.shared.prefix import get_shm_prefix
from streaming.base.shared.scalar import SharedScalar

__all__ = ['SharedArray', 'SharedBarrier', 'SharedMemory', 'SharedScalar', 'get_shm_prefix']
