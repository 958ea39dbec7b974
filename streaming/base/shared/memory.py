"""The reference's ``streaming.base.shared.memory``: a named POSIX shared-memory block.

A wrapper over ``multiprocessing.shared_memory.SharedMemory`` that does not let Python's
resource tracker unlink blocks it merely attached to. This library keeps its own shared state in
``streaming.coord``; these classes are for user code written against the reference.
"""

from __future__ import annotations

import atexit
import threading
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory as _BuiltinSharedMemory
from typing import Any

from streaming.base.constant import TICK

__all__ = ['SharedMemory', 'TICK']


_attach_lock = threading.Lock()


def _attach(name: str | None) -> _BuiltinSharedMemory:
    """Attach to an existing block without registering it with Python's resource tracker.

    The tracker would otherwise unlink the block when this (non-creating) process exits.
    """
    with _attach_lock:
        register = resource_tracker.register
        resource_tracker.register = lambda *args, **kwargs: None  # type: ignore[assignment]
        try:
            return _BuiltinSharedMemory(name, False)
        finally:
            resource_tracker.register = register  # type: ignore[assignment]


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
                shm = _attach(name)
                create = False
        elif create:
            shm = _BuiltinSharedMemory(name, True, size)
        else:
            shm = _attach(name)
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
