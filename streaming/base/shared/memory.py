"""The reference's ``streaming.base.shared.memory``: a named POSIX shared-memory block.

A wrapper over ``multiprocessing.shared_memory.SharedMemory`` that does not let Python's
resource tracker unlink blocks it merely attached to. This library keeps its own shared state in
``streaming.coord``; these classes are for user code written against the reference.
"""

from __future__ import annotations

import atexit
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory as _BuiltinSharedMemory
from typing import Any

from streaming.base.constant import TICK

__all__ = ['SharedMemory', 'TICK']


class SharedMemory:
    """Create (``create=True``), attach to (``False``) or either (``None``) the block ``name``.

    The creator unlinks the block at exit when ``auto_cleanup``.
    """

    def __init__(self, name: str | None = None, create: bool | None = None, size: int = 0,
                 auto_cleanup: bool = True) -> None:
        self.created_shms: list[_BuiltinSharedMemory] = []
        self.opened_shms: list[_BuiltinSharedMemory] = []
        if create is None:
            try:
                shm = _BuiltinSharedMemory(name, True, size)
                create = True
            except FileExistsError:
                shm = _BuiltinSharedMemory(name, False, size)
                create = False
        else:
            shm = _BuiltinSharedMemory(name, create, size)
        if not create:
            # Only the creator owns the block: stop the tracker from unlinking it at our exit.
            try:
                resource_tracker.unregister(shm._name, 'shared_memory')  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - the tracker may not know it
                pass
        self.shm = shm
        self.created = create
        (self.created_shms if create else self.opened_shms).append(shm)
        if auto_cleanup:
            atexit.register(self.cleanup)

    @property
    def buf(self) -> memoryview:
        """The block's bytes."""
        return self.shm.buf

    @property
    def name(self) -> str:
        """The block's name."""
        return self.shm.name

    @property
    def size(self) -> int:
        """The block's size in bytes."""
        return self.shm.size

    def cleanup(self) -> None:
        """Close the block, and unlink it if this object created it."""
        try:
            self.shm.close()
            if self.created:
                self.shm.unlink()
        except (FileNotFoundError, BufferError):
            pass

    def __getstate__(self) -> dict[str, Any]:
        return {'name': self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state['name'], False, auto_cleanup=False)  # type: ignore[misc]
