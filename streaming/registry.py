"""Named registries of classes or functions, extensible through Python entry points.

``streams_registry`` (``streaming.dataset.stream``) is one: ``StreamingDataset(stream_name=...)``
looks its stream class up there. Compatible with the reference's ``TypedRegistry``:
``registry.register('name', func=cls)``, ``registry.get('name')``, ``registry.get_all()``; a name
not registered is also looked up in the entry-point group ``'_'.join(namespace)``.
"""

from __future__ import annotations

from typing import Any, Generic, Sequence, TypeVar

__all__ = ['RegistryError', 'TypedRegistry']

T = TypeVar('T')
_MISSING: Any = object()


class RegistryError(ValueError):
    """A name that is not in a registry."""


class TypedRegistry(dict, Generic[T]):
    """A ``dict`` of name -> object with the reference's registry methods."""

    def __init__(self, namespace: Sequence[str], entry_points: bool = False,
                 description: str = '', items: dict[str, T] | None = None) -> None:
        super().__init__(items or {})
        self.namespace = list(namespace)
        self.entry_points = entry_points
        self.description = description

    @property
    def group(self) -> str:
        """The entry-point group searched for names not registered here."""
        return '_'.join(self.namespace)

    def register(self, name: str, *, func: T | None = None) -> Any:
        """Register ``func`` under ``name``; without ``func``, return a decorator that does."""
        if func is None:
            def decorate(obj: T) -> T:
                self[name] = obj
                return obj
            return decorate
        self[name] = func
        return func

    register_class = register

    def get_entry_points(self) -> dict[str, T]:
        """Every object offered by installed packages under this registry's group."""
        if not self.entry_points:
            return {}
        from importlib.metadata import entry_points
        return {ep.name: ep.load() for ep in entry_points(group=self.group)}

    def get_entry_point(self, name: str, default: T | None = None) -> T | None:
        """The object registered by an installed package under ``name``, else ``default``."""
        return self.get_entry_points().get(name, default)

    def get(self, name: str, default: Any = _MISSING) -> T:  # type: ignore[override]
        """The object registered as ``name``; RegistryError (a ValueError) if none is."""
        if name in self:
            return self[name]
        found = self.get_entry_point(name)
        if found is not None:
            self[name] = found
            return found
        if default is not _MISSING:
            return default
        raise RegistryError(f'{name!r} is not in registry {" -> ".join(self.namespace)}; '
                            f'registered: {", ".join(sorted(self)) or "none"}.')

    def get_all(self) -> dict[str, T]:
        """Every registered object, those from entry points included."""
        return {**self.get_entry_points(), **self}

    def __repr__(self) -> str:
        return f'TypedRegistry({self.namespace!r}, {sorted(self)!r})'


