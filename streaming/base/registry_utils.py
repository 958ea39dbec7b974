"""The reference's ``streaming.base.registry_utils``: named registries and construction helpers.

The registry class is ``streaming.registry.TypedRegistry``, which the library itself uses for
``streams_registry``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import os
import sys
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from streaming.registry import TypedRegistry

__all__ = ['TypedRegistry', 'construct_from_registry', 'create_registry', 'import_file',
           'save_registry']

_created: list[weakref.ref] = []


def create_registry(*namespace: str, generic_type: type, entry_points: bool = False,
                    description: str = '') -> TypedRegistry:
    """A new registry named by ``namespace`` (entry-point group ``'_'.join(namespace)``)."""
    del generic_type  # Only a typing hint in the reference.
    registry: TypedRegistry = TypedRegistry(namespace, entry_points=entry_points,
                                            description=description)
    _created.append(weakref.ref(registry))
    return registry


def construct_from_registry(name: str, registry: TypedRegistry, partial_function: bool = True,
                            pre_validation_function: Callable[[Any], None] | type | None = None,
                            post_validation_function: Callable[[Any], None] | None = None,
                            kwargs: dict[str, Any] | None = None) -> Any:
    """Build the object registered as ``name``.

    A registered class is instantiated with ``kwargs``; a registered function is bound to
    ``kwargs`` with ``functools.partial`` (``partial_function``) or called with them.
    ``pre_validation_function`` checks the registered object first (a type: it must be a
    subclass); ``post_validation_function`` checks the result.
    """
    kwargs = kwargs or {}
    registered = registry.get(name)
    if isinstance(pre_validation_function, type):
        if not (isinstance(registered, type) and issubclass(registered, pre_validation_function)):
            raise ValueError(f'Expected {name} to be of type {pre_validation_function}, but got '
                             f'{type(registered)}')
    elif pre_validation_function is not None:
        pre_validation_function(registered)
    if isinstance(registered, type):
        built = registered(**kwargs)
    elif callable(registered):
        built = functools.partial(registered, **kwargs) if partial_function \
            else registered(**kwargs)
    else:
        raise ValueError(f'Registered {name!r} is neither a class nor a function: '
                         f'{registered!r}.')
    if post_validation_function is not None:
        post_validation_function(built)
    return built


def import_file(loc: str | Path) -> ModuleType:
    """Import the Python file at ``loc`` as a module (to run its registrations)."""
    path = os.fspath(loc)
    name = Path(path).stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f'{path} cannot be imported as a Python module.')
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise RuntimeError(f'{path} failed to import: {error}') from error
    sys.modules.setdefault(name, module)
    return module


def _registries() -> list[TypedRegistry]:
    from streaming.dataset.stream import streams_registry
    alive = [ref() for ref in _created]
    return [streams_registry, *(registry for registry in alive if registry is not None)]


@contextlib.contextmanager
def save_registry() -> Iterator[None]:
    """Undo, on exit, every registration made inside the ``with`` block."""
    saved = [(registry, copy.copy(dict(registry))) for registry in _registries()]
    try:
        yield
    finally:
        for registry, items in saved:
            registry.clear()
            registry.update(items)
