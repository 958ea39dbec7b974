"""A per-process cache of SDK clients, shared by the backends that keep clients.

SDK clients hold sockets and locks that do not survive ``fork`` (DataLoader workers are forked),
so each process builds its own: the cache notices a new process id and starts empty. Within a
process, one client is built per key (e.g. a timeout, or an account and a timeout), once, even
when many threads ask at the same time.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Generic, Hashable, TypeVar

__all__ = ['ClientCache']

K = TypeVar('K', bound=Hashable)
C = TypeVar('C')


class ClientCache(Generic[K, C]):
    """Clients built by ``make(key)``, one per key and per process."""

    def __init__(self, make: Callable[[K], C]) -> None:
        self._make = make
        self._clients: dict[K, C] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def get(self, key: K) -> C:
        """The client for ``key``, built on first use in this process."""
        if self._pid != os.getpid():  # A forked child: the parent's clients are not ours.
            self._clients, self._lock, self._pid = {}, threading.Lock(), os.getpid()
        client = self._clients.get(key)
        if client is not None:
            return client
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._make(key)
                self._clients[key] = client
            return client

    def clear(self) -> None:
        """Forget every client (the next ``get`` builds afresh)."""
        with self._lock:
            self._clients = {}
