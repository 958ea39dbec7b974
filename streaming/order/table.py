"""The order's three tables (shuffles, partitions, batching methods): one registry type.

Each table is an ``AlgorithmTable``: a ``TypedRegistry`` (a dict of name -> function with the
reference's signature) read whenever an epoch's order is made. The reference's public dicts
(``streaming.base.shuffle.algos``, ``streaming.base.partition.algos``,
``streaming.base.batching.batching_methods``) are these very objects, so a function put there and
one registered here are the same thing. Built-in entries are ``Builtin`` objects: callable with
the reference's signature, while the engine recognises them and runs its own incremental form.
A table may keep traits per name (what the dataset needs to know of a shuffle, say).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from streaming.order.checks import check_choice
from streaming.registry import TypedRegistry

__all__ = ['AlgorithmTable', 'Builtin']


class Builtin:
    """A built-in entry named ``name``; ``prefix`` names it as the reference's function."""

    prefix = ''

    def __init__(self, name: str) -> None:
        self.name = name
        self.__name__ = self.__qualname__ = f'{self.prefix}{name}'

    @property
    def algo(self) -> str:
        """The name, as shuffles and partitions call it."""
        return self.name

    def __reduce__(self) -> tuple:
        return type(self), (self.name,)


class AlgorithmTable(TypedRegistry):
    """Name -> function for the setting ``parameter`` (``shuffle_algo``, say), built-ins first.

    ``get`` keeps the plain dict's meaning (None when absent), as the reference's dicts do;
    ``lookup`` is the engine's: a ValueError naming ``parameter`` and the choices.
    """

    def __init__(self, parameter: str, kind: str, builtins: Iterable[Builtin]) -> None:
        items = {entry.name: entry for entry in builtins}
        super().__init__(['streaming', 'order', kind], description=f'{kind} for {parameter}',
                         items=items)
        self.parameter, self.kind = parameter, kind
        self.builtin_names = tuple(items)
        self.traits: dict[str, Any] = {}
        self.lock = threading.Lock()

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        """The function registered as ``name``, else ``default`` (a dict's ``get``)."""
        return dict.get(self, name, default)

    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self))

    def lookup(self, name: str) -> Any:
        """The function registered as ``name``; ValueError naming the parameter otherwise."""
        fn = dict.get(self, name)
        if fn is None:
            check_choice(self.parameter, name, tuple(self))
        return fn

    def is_builtin(self, name: str) -> bool:
        """Whether ``name`` holds a built-in entry (not a function put there by a user)."""
        return isinstance(self.lookup(name), Builtin)

    def add(self, who: str, name: str, fn: Any, traits: Any = None) -> Any:
        """Register ``fn`` as ``name`` (with ``traits``) for ``who``; built-ins stay. Returns it."""
        if not isinstance(name, str) or not name:
            raise ValueError(f'{who}: name must be a non-empty string, got {name!r}')
        if name in self.builtin_names:
            raise ValueError(f'{who}: {name!r} is a built-in {self.kind} and names built in '
                             f'cannot be replaced; pick another name')
        with self.lock:
            self[name] = fn
            if traits is not None:
                self.traits[name] = traits
        return fn

    def remove(self, who: str, name: str) -> None:
        """Remove a name that is not built in (and its traits)."""
        if name in self.builtin_names:
            raise ValueError(f'{who}: {name!r} is built in')
        with self.lock:
            self.pop(name, None)
            self.traits.pop(name, None)

    def restore(self, name: str, fn: Any, traits: Any) -> tuple[Any, Any]:
        """Register ``fn`` unless ``name`` is there already; the entry and traits in effect."""
        with self.lock:
            if name not in self:
                self[name] = fn
                self.traits[name] = traits
            return self[name], self.traits.get(name, traits)
